/* tilelang CPU runtime header: embedded into every generated C kernel.
 * Conversions for narrow float types (stored as integers), integer floor division, a
 * vectorizable exp, atomics, and the register-blocked gemm micro-kernel. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <math.h>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#define TL_INLINE static inline __attribute__((always_inline))

/* ---- narrow floats: stored as uint16_t/uint8_t, computed as float ---- */
/* Union punning (defined in C) vectorizes where memcpy sometimes does not. */
TL_INLINE float tl_bits_to_f32(uint32_t u) { union { uint32_t u; float f; } x; x.u = u; return x.f; }
TL_INLINE uint32_t tl_f32_to_bits(float f) { union { uint32_t u; float f; } x; x.f = f; return x.u; }

TL_INLINE float tl_bf16_to_f32(uint16_t h) { return tl_bits_to_f32(((uint32_t)h) << 16); }
TL_INLINE uint16_t tl_f32_to_bf16(float f) {
    uint32_t u = tl_f32_to_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* NaN stays NaN */
    u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest even */
    return (uint16_t)(u >> 16);
}
TL_INLINE float tl_round_bf16(float f) { return tl_bf16_to_f32(tl_f32_to_bf16(f)); }

TL_INLINE float tl_f16_to_f32(uint16_t h) {
    uint32_t sign = ((uint32_t)h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (exp == 0) { /* zero or subnormal: man * 2^-24 */
        float v = (float)man * 5.9604644775390625e-8f;
        return sign ? -v : v;
    }
    if (exp == 31) return tl_bits_to_f32(sign | 0x7f800000u | (man << 13));
    return tl_bits_to_f32(sign | ((exp + 112u) << 23) | (man << 13));
}
TL_INLINE uint16_t tl_f32_to_f16(float f) {
    uint32_t u = tl_f32_to_bits(f);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* overflow to inf */
    if (a < 0x38800000u) { /* subnormal or zero in half: round man * 2^24 */
        float v = tl_bits_to_f32(a) * 16777216.0f;
        uint32_t m = (uint32_t)v;
        float rem = v - (float)m;
        if (rem > 0.5f || (rem == 0.5f && (m & 1u))) m++;
        return (uint16_t)(sign | m);
    }
    uint32_t r = a + 0xfffu + ((a >> 13) & 1u);
    return (uint16_t)(sign | ((r - 0x38000000u) >> 13));
}
TL_INLINE float tl_round_f16(float f) { return tl_f16_to_f32(tl_f32_to_f16(f)); }

/* float8 (OCP e4m3fn / e5m2): decode by formula, encode with round-to-nearest-even and
 * saturation to the largest finite value. */
TL_INLINE float tl_e4m3_to_f32(uint8_t b) {
    uint32_t s = b & 0x80u, e = (b >> 3) & 0xfu, m = b & 7u;
    float v;
    if ((b & 0x7fu) == 0x7fu) return NAN;
    if (e == 0) v = (float)m * 0.001953125f; /* 2^-9 */
    else v = tl_bits_to_f32(((e + 120u) << 23) | (m << 20));
    return s ? -v : v;
}
TL_INLINE uint8_t tl_f32_to_e4m3(float f) {
    if (f != f) return 0x7f;
    uint8_t s = f < 0 ? 0x80 : 0;
    float a = fabsf(f);
    if (a >= 448.0f) return s | 0x7e;
    if (a < 0.015625f) { /* subnormal: multiples of 2^-9 */
        float q = a * 512.0f;
        uint32_t m = (uint32_t)q;
        float rem = q - (float)m;
        if (rem > 0.5f || (rem == 0.5f && (m & 1u))) m++;
        return s | (uint8_t)m;
    }
    uint32_t u = tl_f32_to_bits(a);
    u += 0x7ffffu + ((u >> 20) & 1u);
    uint32_t e = (u >> 23) - 120u, m = (u >> 20) & 7u;
    if (e > 15 || (e == 15 && m == 7)) return s | 0x7e;
    return s | (uint8_t)((e << 3) | m);
}
TL_INLINE float tl_round_e4m3(float f) { return tl_e4m3_to_f32(tl_f32_to_e4m3(f)); }
TL_INLINE float tl_e5m2_to_f32(uint8_t b) { return tl_f16_to_f32((uint16_t)((uint16_t)b << 8)); }
TL_INLINE uint8_t tl_f32_to_e5m2(float f) {
    if (f != f) return 0x7f;
    uint8_t s = f < 0 ? 0x80 : 0;
    float a = fabsf(f);
    if (a >= 57344.0f) return s | 0x7b;
    uint16_t h = tl_f32_to_f16(a);
    uint32_t r = (uint32_t)h + 0x7fu + ((h >> 8) & 1u);
    uint8_t out = (uint8_t)(r >> 8);
    if (out > 0x7b) out = 0x7b;
    return s | out;
}
TL_INLINE float tl_round_e5m2(float f) { return tl_e5m2_to_f32(tl_f32_to_e5m2(f)); }

/* ---- integer helpers ---- */
TL_INLINE int32_t tl_floordiv_i32(int32_t a, int32_t b) { int32_t q = a / b; return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q; }
TL_INLINE int32_t tl_floormod_i32(int32_t a, int32_t b) { int32_t r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }
TL_INLINE int64_t tl_floordiv_i64(int64_t a, int64_t b) { int64_t q = a / b; return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q; }
TL_INLINE int64_t tl_floormod_i64(int64_t a, int64_t b) { int64_t r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }
TL_INLINE float tl_floormod_f32(float a, float b) { return a - floorf(a / b) * b; }
TL_INLINE double tl_floormod_f64(double a, double b) { return a - floor(a / b) * b; }

/* ---- math: a branch-free exp the compiler can vectorize (max rel. error ~2e-7) ----
 * 2^x = 2^n * 2^f with n = round(x), f in [-0.5, 0.5]: a degree-6 polynomial for 2^f and the
 * exponent field for 2^n. Below 2^-126 the result flushes to 0 (so exp(-inf) = 0 exactly, as
 * masked scores need); NaN stays NaN. */
TL_INLINE float tl_exp2f(float x) {
    float t = x < -127.0f ? -127.0f : (x > 127.0f ? 127.0f : x);
    float n = (t + 12582912.0f) - 12582912.0f; /* round to nearest: 1.5 * 2^23 */
    float f = t - n;
    float p = 1.5353362e-4f;
    p = p * f + 1.3398874e-3f;
    p = p * f + 9.6180329e-3f;
    p = p * f + 5.5504110e-2f;
    p = p * f + 2.4022652e-1f;
    p = p * f + 6.9314718e-1f;
    p = p * f + 1.0f;
    float r = p * tl_bits_to_f32((uint32_t)((int32_t)n + 127) << 23);
    r = x < -126.0f ? 0.0f : r;
    return x != x ? x : r;
}
TL_INLINE float tl_expf(float x) { return tl_exp2f(x * 1.4426950408889634f); }
TL_INLINE float tl_sigmoidf(float x) { return 1.0f / (1.0f + tl_expf(-x)); }
TL_INLINE double tl_sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

/* ---- streaming stores: a large tile written to a tensor nobody reads back soon skips the
 * read-for-ownership a normal store costs (a third of the traffic of a copy) ---- */
TL_INLINE void tl_stream_store(void* restrict dst, const void* restrict src, int64_t bytes) {
#if defined(__AVX512F__)
    if ((((uintptr_t)dst) & 63) == 0 && (bytes & 63) == 0) {
        for (int64_t i = 0; i < bytes; i += 64)
            _mm512_stream_si512((__m512i*)((char*)dst + i),
                                _mm512_loadu_si512((const void*)((const char*)src + i)));
        _mm_sfence();
        return;
    }
#endif
    memcpy(dst, src, (size_t)bytes);
}

/* ---- atomics: blocks run on several OS threads ---- */
TL_INLINE void tl_atomic_add_f32(float* p, float v) {
    uint32_t* u = (uint32_t*)p;
    uint32_t old = __atomic_load_n(u, __ATOMIC_RELAXED), nw;
    do { nw = tl_f32_to_bits(tl_bits_to_f32(old) + v); }
    while (!__atomic_compare_exchange_n(u, &old, nw, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
}
TL_INLINE void tl_atomic_add_f64(double* p, double v) {
    uint64_t* u = (uint64_t*)p;
    uint64_t old = __atomic_load_n(u, __ATOMIC_RELAXED), nw;
    do { double d; memcpy(&d, &old, 8); d += v; memcpy(&nw, &d, 8); }
    while (!__atomic_compare_exchange_n(u, &old, nw, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
}
TL_INLINE void tl_atomic_add_bf16(uint16_t* p, float v) {
    uint16_t old = __atomic_load_n(p, __ATOMIC_RELAXED), nw;
    do { nw = tl_f32_to_bf16(tl_bf16_to_f32(old) + v); }
    while (!__atomic_compare_exchange_n(p, &old, nw, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
}
TL_INLINE void tl_atomic_add_f16(uint16_t* p, float v) {
    uint16_t old = __atomic_load_n(p, __ATOMIC_RELAXED), nw;
    do { nw = tl_f32_to_f16(tl_f16_to_f32(old) + v); }
    while (!__atomic_compare_exchange_n(p, &old, nw, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
}
#define tl_atomic_add_i32(p, v) ((void)__atomic_fetch_add((p), (v), __ATOMIC_RELAXED))
#define tl_atomic_add_i64(p, v) ((void)__atomic_fetch_add((p), (v), __ATOMIC_RELAXED))
#define tl_atomic_add_u32(p, v) ((void)__atomic_fetch_add((p), (v), __ATOMIC_RELAXED))
/* max / min: a compare-and-swap loop that stops once the stored value needs no change. */
#define TL_DEFINE_ATOMIC_MINMAX(NAME, T, KEEP)                                                 \
TL_INLINE void NAME(T* p, T v) {                                                               \
    T old = __atomic_load_n(p, __ATOMIC_RELAXED);                                              \
    while (!(KEEP) && !__atomic_compare_exchange_n(p, &old, v, 1, __ATOMIC_RELAXED,            \
                                                   __ATOMIC_RELAXED)) {}                       \
}
TL_DEFINE_ATOMIC_MINMAX(tl_atomic_max_i32, int32_t, old >= v)
TL_DEFINE_ATOMIC_MINMAX(tl_atomic_min_i32, int32_t, old <= v)
TL_DEFINE_ATOMIC_MINMAX(tl_atomic_max_u32, uint32_t, old >= v)
TL_DEFINE_ATOMIC_MINMAX(tl_atomic_min_u32, uint32_t, old <= v)
/* Floats as GPUs order them (one integer atomic on the bits): IEEE total order, so -0 < +0
 * and a NaN orders by its sign bit. */
TL_INLINE uint32_t tl_f32_order_key(uint32_t b) { return (b & 0x80000000u) ? ~b : (b | 0x80000000u); }
TL_INLINE void tl_atomic_max_f32(float* p, float v) {
    uint32_t* u = (uint32_t*)p;
    uint32_t old = __atomic_load_n(u, __ATOMIC_RELAXED), nw = tl_f32_to_bits(v);
    while (tl_f32_order_key(old) < tl_f32_order_key(nw)
           && !__atomic_compare_exchange_n(u, &old, nw, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {}
}
TL_INLINE void tl_atomic_min_f32(float* p, float v) {
    uint32_t* u = (uint32_t*)p;
    uint32_t old = __atomic_load_n(u, __ATOMIC_RELAXED), nw = tl_f32_to_bits(v);
    while (tl_f32_order_key(old) > tl_f32_order_key(nw)
           && !__atomic_compare_exchange_n(u, &old, nw, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {}
}

/* ---- gemm: C[m][n] (+)= sum_k A[m][k] * B[k][n] on tiles, f32 accumulate ----
 * Operands are packed into f32 panels (converting narrow types), then an MR x NR register
 * block of C is accumulated in vector registers across all of K. */
typedef float tl_v16f __attribute__((vector_size(64)));
/* The same vector for unaligned memory: loads and stores through it compile to single
 * unaligned vector moves (memcpy into a vector variable may go through the stack). */
typedef float tl_v16f_u __attribute__((vector_size(64), aligned(4), may_alias));
#define TL_MR 8
#define TL_NR 32

TL_INLINE void tl_gemm_micro(const float* restrict ap, const float* restrict bp, int K, int ldb,
                             float* restrict c, int64_t c_ms, int64_t c_ns, int mr, int nr) {
    tl_v16f acc[TL_MR][2];
    for (int i = 0; i < TL_MR; ++i) { acc[i][0] = (tl_v16f){0}; acc[i][1] = (tl_v16f){0}; }
    for (int k = 0; k < K; ++k) {
        tl_v16f b0 = *(const tl_v16f_u*)(bp + (int64_t)k * ldb);
        tl_v16f b1 = *(const tl_v16f_u*)(bp + (int64_t)k * ldb + 16);
        for (int i = 0; i < TL_MR; ++i) {
            float a = ap[k * TL_MR + i];
            acc[i][0] += a * b0;
            acc[i][1] += a * b1;
        }
    }
    if (mr == TL_MR && nr == TL_NR && c_ns == 1) {
        for (int i = 0; i < TL_MR; ++i) {
            *(tl_v16f_u*)(c + i * c_ms) += acc[i][0];
            *(tl_v16f_u*)(c + i * c_ms + 16) += acc[i][1];
        }
    } else {
        for (int i = 0; i < mr; ++i)
            for (int j = 0; j < nr; ++j)
                c[i * c_ms + j * c_ns] += j < 16 ? acc[i][0][j] : acc[i][1][j - 16];
    }
}

#define TL_DEFINE_GEMM(NAME, T, LOAD) TL_DEFINE_GEMM2(NAME, T, LOAD, T, LOAD)
/* A and B of different types: the two fp8 formats mix. */
#define TL_DEFINE_GEMM2(NAME, T, LOAD, TB, LOADB)                                               \
static void NAME(const T* restrict A, int64_t a_ms, int64_t a_ks, const TB* restrict B,          \
                 int64_t b_ks, int64_t b_ns, float* restrict C, int64_t c_ms, int64_t c_ns,       \
                 int M, int N, int K, int clear) {                                              \
    int Mp = (M + TL_MR - 1) / TL_MR * TL_MR, Np = (N + TL_NR - 1) / TL_NR * TL_NR;              \
    float* ap = (float*)__builtin_alloca(sizeof(float) * (size_t)Mp * K + 64);                    \
    float* bp = (float*)__builtin_alloca(sizeof(float) * (size_t)K * Np + 64);                    \
    if (clear)                                                                                 \
        for (int m = 0; m < M; ++m)                                                            \
            for (int n = 0; n < N; ++n) C[m * c_ms + n * c_ns] = 0.0f;                         \
    /* A panels: [M/MR][K][MR]; B: [K][Np] row-major, zero-padded */                           \
    for (int m0 = 0; m0 < Mp; m0 += TL_MR)                                                     \
        for (int k = 0; k < K; ++k)                                                            \
            for (int i = 0; i < TL_MR; ++i)                                                    \
                ap[(int64_t)m0 * K + k * TL_MR + i] =                                          \
                    m0 + i < M ? LOAD(A[(m0 + i) * a_ms + k * a_ks]) : 0.0f;                   \
    for (int k = 0; k < K; ++k) {                                                              \
        for (int n = 0; n < N; ++n) bp[(int64_t)k * Np + n] = LOADB(B[k * b_ks + n * b_ns]);   \
        for (int n = N; n < Np; ++n) bp[(int64_t)k * Np + n] = 0.0f;                           \
    }                                                                                          \
    for (int m0 = 0; m0 < M; m0 += TL_MR)                                                      \
        for (int n0 = 0; n0 < N; n0 += TL_NR)                                                  \
            tl_gemm_micro(ap + (int64_t)m0 * K, bp + n0, K, Np, C + m0 * c_ms + n0 * c_ns,     \
                          c_ms, c_ns, M - m0 < TL_MR ? M - m0 : TL_MR,                         \
                          N - n0 < TL_NR ? N - n0 : TL_NR);                                     \
}

#define TL_LOAD_F32(x) (x)
TL_DEFINE_GEMM(tl_cpu_gemm_f32, float, TL_LOAD_F32)
TL_DEFINE_GEMM(tl_cpu_gemm_bf16, uint16_t, tl_bf16_to_f32)
TL_DEFINE_GEMM(tl_cpu_gemm_f16, uint16_t, tl_f16_to_f32)
TL_DEFINE_GEMM(tl_cpu_gemm_e4m3, uint8_t, tl_e4m3_to_f32)
TL_DEFINE_GEMM(tl_cpu_gemm_e5m2, uint8_t, tl_e5m2_to_f32)
TL_DEFINE_GEMM2(tl_cpu_gemm_e4m3_e5m2, uint8_t, tl_e4m3_to_f32, uint8_t, tl_e5m2_to_f32)
TL_DEFINE_GEMM2(tl_cpu_gemm_e5m2_e4m3, uint8_t, tl_e5m2_to_f32, uint8_t, tl_e4m3_to_f32)
