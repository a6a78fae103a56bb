/* tilelang CUDA device header: embedded into every generated CUDA kernel.
 *
 * The generated code includes no CUDA toolkit header, so NVRTC compiles it with no include
 * path: everything below uses only what NVRTC provides built in (threadIdx, uint4, the math
 * functions, __shfl_*_sync, atomicAdd) and inline PTX. Every helper is the device twin of the
 * CPU header's function of the same name (tl_cpu.h), so the shared C-family printer emits the
 * same calls for both. Targets: sm_80 and newer (cp.async, ldmatrix, mma.sync, cvt to bf16). */

typedef signed char int8_t;
typedef short int16_t;
typedef int int32_t;
typedef long long int64_t;
typedef unsigned char uint8_t;
typedef unsigned short uint16_t;
typedef unsigned int uint32_t;
typedef unsigned long long uint64_t;

#define TL_DEVICE __device__ __forceinline__

#ifndef NAN
#define NAN __int_as_float(0x7fc00000)
#endif
#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif

/* ---- narrow floats: stored as uint16_t/uint8_t, computed as float ---- */
TL_DEVICE float tl_bits_to_f32(uint32_t u) { return __uint_as_float(u); }
TL_DEVICE uint32_t tl_f32_to_bits(float f) { return __float_as_uint(f); }

/* bf16 -> f32 is exact: the bf16 bits are the high half of the f32. */
TL_DEVICE float tl_bf16_to_f32(uint16_t h) { return __uint_as_float(((uint32_t)h) << 16); }
TL_DEVICE uint16_t tl_f32_to_bf16(float f) {
    uint16_t r;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r) : "f"(f));
    return r;
}
TL_DEVICE float tl_round_bf16(float f) { return tl_bf16_to_f32(tl_f32_to_bf16(f)); }
/* Two conversions and one 32-bit store: PTX packs the first operand into the high half. */
TL_DEVICE void tl_store_bf16x2(uint16_t* d, float lo, float hi) {
    uint32_t r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    *(uint32_t*)d = r;
}

TL_DEVICE float tl_f16_to_f32(uint16_t h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}
TL_DEVICE uint16_t tl_f32_to_f16(float f) {
    uint16_t r;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r) : "f"(f));
    return r;
}
TL_DEVICE float tl_round_f16(float f) { return tl_f16_to_f32(tl_f32_to_f16(f)); }
TL_DEVICE void tl_store_f16x2(uint16_t* d, float lo, float hi) {
    uint32_t r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    *(uint32_t*)d = r;
}

/* float8 (OCP e4m3fn / e5m2): round to nearest even, saturate to the largest finite value.
 * sm_89+ has the conversions in hardware; sm_80 uses the CPU header's formulas. */
TL_DEVICE float tl_e4m3_to_f32(uint8_t b) {
#if __CUDA_ARCH__ >= 890
    uint32_t h2;
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h2) : "h"((uint16_t)b));
    return tl_f16_to_f32((uint16_t)(h2 & 0xffffu));
#else
    uint32_t s = b & 0x80u, e = (b >> 3) & 0xfu, m = b & 7u;
    float v;
    if ((b & 0x7fu) == 0x7fu) return NAN;
    if (e == 0) v = (float)m * 0.001953125f; /* 2^-9 */
    else v = tl_bits_to_f32(((e + 120u) << 23) | (m << 20));
    return s ? -v : v;
#endif
}
TL_DEVICE uint8_t tl_f32_to_e4m3(float f) {
#if __CUDA_ARCH__ >= 890
    uint16_t r;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(0.0f), "f"(f));
    return (uint8_t)(r & 0xffu);
#else
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
#endif
}
TL_DEVICE float tl_round_e4m3(float f) { return tl_e4m3_to_f32(tl_f32_to_e4m3(f)); }
/* e5m2 is the high byte of an f16: decoding is exact everywhere. */
TL_DEVICE float tl_e5m2_to_f32(uint8_t b) { return tl_f16_to_f32((uint16_t)((uint16_t)b << 8)); }
TL_DEVICE uint8_t tl_f32_to_e5m2(float f) {
#if __CUDA_ARCH__ >= 890
    uint16_t r;
    asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(r) : "f"(0.0f), "f"(f));
    return (uint8_t)(r & 0xffu);
#else
    if (f != f) return 0x7f;
    uint8_t s = f < 0 ? 0x80 : 0;
    float a = fabsf(f);
    if (a >= 57344.0f) return s | 0x7b;
    uint16_t h = tl_f32_to_f16(a);
    uint32_t r = (uint32_t)h + 0x7fu + ((h >> 8) & 1u);
    uint8_t out = (uint8_t)(r >> 8);
    if (out > 0x7b) out = 0x7b;
    return s | out;
#endif
}
TL_DEVICE float tl_round_e5m2(float f) { return tl_e5m2_to_f32(tl_f32_to_e5m2(f)); }

/* ---- integer and float helpers (the same definitions as the CPU header) ---- */
TL_DEVICE int32_t tl_floordiv_i32(int32_t a, int32_t b) { int32_t q = a / b; return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q; }
TL_DEVICE int32_t tl_floormod_i32(int32_t a, int32_t b) { int32_t r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }
TL_DEVICE int64_t tl_floordiv_i64(int64_t a, int64_t b) { int64_t q = a / b; return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q; }
TL_DEVICE int64_t tl_floormod_i64(int64_t a, int64_t b) { int64_t r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }
TL_DEVICE float tl_floormod_f32(float a, float b) { return a - floorf(a / b) * b; }
TL_DEVICE double tl_floormod_f64(double a, double b) { return a - floor(a / b) * b; }
/* exp2 and exp on the special-function unit: one MUFU.EX2 (relative error below 2^-22; inputs
 * below 2^-126 flush to 0, so exp(-inf) is exactly 0). The accurate library versions cost
 * several more instructions each, which softmax-heavy kernels (attention) feel. */
TL_DEVICE float tl_exp2f(float x) {
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
}
TL_DEVICE float tl_expf(float x) { return tl_exp2f(x * 1.4426950408889634f); }
TL_DEVICE float tl_sigmoidf(float x) { return 1.0f / (1.0f + tl_expf(-x)); }
TL_DEVICE double tl_sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

/* ---- shared-memory addresses for PTX (32-bit, in the shared window) ---- */
TL_DEVICE uint32_t tl_smem_addr(const void* p) { return (uint32_t)__cvta_generic_to_shared(p); }

/* ---- cp.async: global -> shared, 4/8/16 bytes; pred == 0 zero-fills and reads nothing
 * (src-size 0). 16-byte copies bypass L1 (.cg); 4- and 8-byte ones must use .ca. The "memory"
 * clobbers keep the compiler from moving ordinary shared accesses across the copy and its
 * wait (the IR lets a thread read its own copied data right after the wait). ---- */
TL_DEVICE void tl_cp_async_16(void* dst, const void* src, int pred) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
                 :: "r"(tl_smem_addr(dst)), "l"(src), "r"(pred ? 16 : 0) : "memory");
}
TL_DEVICE void tl_cp_async_8(void* dst, const void* src, int pred) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n"
                 :: "r"(tl_smem_addr(dst)), "l"(src), "r"(pred ? 8 : 0) : "memory");
}
TL_DEVICE void tl_cp_async_4(void* dst, const void* src, int pred) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n"
                 :: "r"(tl_smem_addr(dst)), "l"(src), "r"(pred ? 4 : 0) : "memory");
}
TL_DEVICE void tl_cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N> TL_DEVICE void tl_cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" :: "n"(N) : "memory");
}

/* ---- synchronous vector copies (both addresses aligned to the size) ---- */
TL_DEVICE void tl_vec_copy_16(void* d, const void* s) { *(uint4*)d = *(const uint4*)s; }
TL_DEVICE void tl_vec_copy_8(void* d, const void* s) { *(uint2*)d = *(const uint2*)s; }
TL_DEVICE void tl_vec_copy_4(void* d, const void* s) { *(uint32_t*)d = *(const uint32_t*)s; }
TL_DEVICE void tl_vec_copy_2(void* d, const void* s) { *(uint16_t*)d = *(const uint16_t*)s; }
TL_DEVICE void tl_vec_copy_1(void* d, const void* s) { *(uint8_t*)d = *(const uint8_t*)s; }
/* ---- 16 bytes from any element to an aligned destination (Intrinsic::LoadWindow and
 * StoreShifted): rows TMA cannot read, staged a vector at a time. The window is the 32 bytes
 * from the source's 16-byte unit on; where they leave the tensor's `count` elements, its
 * elements among them are read one by one and the rest are zero. ---- */
template <typename T>
TL_DEVICE void tl_load_window(uint32_t* w, const T* base, long long off, long long count) {
    const char* lo = (const char*)base;
    const char* hi = (const char*)(base + count);
    const char* a0 = (const char*)((unsigned long long)(base + off) & ~15ull);
    if (a0 >= lo && a0 + 32 <= hi) {
        uint4 x = __ldg((const uint4*)a0), y = __ldg((const uint4*)a0 + 1);
        w[0] = x.x; w[1] = x.y; w[2] = x.z; w[3] = x.w;
        w[4] = y.x; w[5] = y.y; w[6] = y.z; w[7] = y.w;
    } else {
#pragma unroll
        for (int i = 0; i < 8; ++i) w[i] = 0;
#pragma unroll
        for (int e = 0; e < 32 / (int)sizeof(T); ++e) {
            const char* p = a0 + e * (int)sizeof(T);
            if (p >= lo && p < hi) {
                uint32_t v = sizeof(T) == 1 ? (uint32_t)*(const uint8_t*)p
                           : sizeof(T) == 2 ? (uint32_t)*(const uint16_t*)p
                                            : *(const uint32_t*)p;
                w[e * sizeof(T) / 4] |= v << (8 * ((e * sizeof(T)) % 4));
            }
        }
    }
}
/* A hint that writes no register (a warp issuing wgmma waits for loads that do). */
TL_DEVICE void tl_prefetch_l2(const void* p) {
    asm volatile("prefetch.global.L2 [%0];" :: "l"(p));
}
/* The window's 16 bytes from the source's byte within its 16-byte unit: words picked by
   selects (constant indices keep the window in registers), then funnel shifts. */
template <typename T>
TL_DEVICE void tl_store_shifted(void* dst, const uint32_t* w, const T* base, long long off) {
    uint32_t s = (uint32_t)((unsigned long long)(base + off) & 15);
    uint32_t q = s >> 2, r = (s & 3) * 8;
    uint32_t v[5];
#pragma unroll
    for (int i = 0; i < 5; ++i)
        v[i] = q == 0 ? w[i] : q == 1 ? w[i + 1] : q == 2 ? w[i + 2] : w[i + 3];
    uint4 o;
    o.x = __funnelshift_r(v[0], v[1], r);
    o.y = __funnelshift_r(v[1], v[2], r);
    o.z = __funnelshift_r(v[2], v[3], r);
    o.w = __funnelshift_r(v[3], v[4], r);
    *(uint4*)dst = o;
}
/* Eight 2-byte elements from any element of shared memory to a 16-byte-aligned destination:
   the words from the one holding the first element, funnel-shifted by its half (the fifth
   word only where it starts mid-word). */
TL_DEVICE void tl_shifted_vec_copy(void* dst, const void* src) {
    unsigned long long a = (unsigned long long)src;
    const uint32_t* w = (const uint32_t*)(a & ~3ull);
    uint32_t r = (uint32_t)(a & 2) * 8;
    uint32_t w4 = r ? w[4] : 0u;
    uint4 o;
    o.x = __funnelshift_r(w[0], w[1], r);
    o.y = __funnelshift_r(w[1], w[2], r);
    o.z = __funnelshift_r(w[2], w[3], r);
    o.w = __funnelshift_r(w[3], w4, r);
    *(uint4*)dst = o;
}
/* Four chunks of a peer copy, the first `valid` (1..4) of them: every load before any store,
   so four loads are in flight at once (a pull from a peer waits a round trip per load). */
#define TL_DEFINE_VEC_COPY_X4(BYTES, T)                                                        \
TL_DEVICE void tl_vec_copy_x4_##BYTES(void* d0, const void* s0, void* d1, const void* s1,      \
                                      void* d2, const void* s2, void* d3, const void* s3,      \
                                      int valid) {                                             \
    T v0 = *(const T*)s0, v1 = v0, v2 = v0, v3 = v0;                                           \
    if (valid > 1) v1 = *(const T*)s1;                                                         \
    if (valid > 2) v2 = *(const T*)s2;                                                         \
    if (valid > 3) v3 = *(const T*)s3;                                                         \
    *(T*)d0 = v0;                                                                              \
    if (valid > 1) *(T*)d1 = v1;                                                               \
    if (valid > 2) *(T*)d2 = v2;                                                               \
    if (valid > 3) *(T*)d3 = v3;                                                               \
}
TL_DEFINE_VEC_COPY_X4(16, uint4)
TL_DEFINE_VEC_COPY_X4(8, uint2)
TL_DEFINE_VEC_COPY_X4(4, uint32_t)
TL_DEFINE_VEC_COPY_X4(2, uint16_t)
TL_DEFINE_VEC_COPY_X4(1, uint8_t)
/* The same with a predicate: false zero-fills the destination and reads nothing. */
#define TL_DEFINE_VEC_COPY_ZFILL(BYTES, T, ZERO)                                               \
TL_DEVICE void tl_vec_copy_##BYTES##_zfill(void* d, const void* s, bool p) {                 \
    T v = ZERO;                                                                                \
    if (p) v = *(const T*)s;                                                                   \
    *(T*)d = v;                                                                                \
}
TL_DEFINE_VEC_COPY_ZFILL(16, uint4, make_uint4(0u, 0u, 0u, 0u))
TL_DEFINE_VEC_COPY_ZFILL(8, uint2, make_uint2(0u, 0u))
TL_DEFINE_VEC_COPY_ZFILL(4, uint32_t, 0u)
TL_DEFINE_VEC_COPY_ZFILL(2, uint16_t, (uint16_t)0)
TL_DEFINE_VEC_COPY_ZFILL(1, uint8_t, (uint8_t)0)

/* ---- multi-rank memory (the symmetric heap) ----
 * Every rank's heap is mapped into one range at base + r * stride: rank `peer`'s copy of an
 * element is the element's address plus (peer - rank) * stride bytes. */
template <typename T> TL_DEVICE T* tl_peer(T* p, int32_t peer, int32_t rank, int64_t stride) {
    return (T*)((char*)p + (int64_t)(peer - rank) * stride);
}
/* Peer tables (memory another library mapped): rank `peer`'s copy of the tensor whose own
 * copy starts at `own` starts at `entry`. */
template <typename T, typename U> TL_DEVICE T* tl_peer_table(T* p, int64_t entry, U* own) {
    return (T*)((char*)p + (entry - (int64_t)own));
}
/* Memory-model loads, stores and reductions of 4- and 8-byte elements, by PTX name. */
#define TL_DEFINE_MEM_OPS(SEM, SCOPE, QUAL)                                                      \
TL_DEVICE uint32_t tl_ld_##SEM##_##SCOPE##_b32(const void* p) {                                \
    uint32_t v; asm volatile("ld" QUAL ".global.b32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");  \
    return v;                                                                                  \
}                                                                                              \
TL_DEVICE uint64_t tl_ld_##SEM##_##SCOPE##_b64(const void* p) {                                \
    uint64_t v; asm volatile("ld" QUAL ".global.b64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");  \
    return v;                                                                                  \
}
#define TL_DEFINE_ST_OPS(SEM, SCOPE, QUAL)                                                       \
TL_DEVICE void tl_st_##SEM##_##SCOPE##_b32(void* p, uint32_t v) {                              \
    asm volatile("st" QUAL ".global.b32 [%0], %1;" :: "l"(p), "r"(v) : "memory");               \
}                                                                                              \
TL_DEVICE void tl_st_##SEM##_##SCOPE##_b64(void* p, uint64_t v) {                              \
    asm volatile("st" QUAL ".global.b64 [%0], %1;" :: "l"(p), "l"(v) : "memory");               \
}
#define TL_DEFINE_RED_OPS(SEM, SCOPE, QUAL)                                                      \
TL_DEVICE void tl_red_add_##SEM##_##SCOPE##_u32(void* p, uint32_t v) {                         \
    asm volatile("red" QUAL ".global.add.u32 [%0], %1;" :: "l"(p), "r"(v) : "memory");          \
}                                                                                              \
TL_DEVICE void tl_red_add_##SEM##_##SCOPE##_u64(void* p, uint64_t v) {                         \
    asm volatile("red" QUAL ".global.add.u64 [%0], %1;" :: "l"(p), "l"(v) : "memory");          \
}                                                                                              \
TL_DEVICE void tl_red_add_##SEM##_##SCOPE##_f32(void* p, float v) {                            \
    asm volatile("red" QUAL ".global.add.f32 [%0], %1;" :: "l"(p), "f"(v) : "memory");          \
}
#define TL_DEFINE_ATOM_OPS(SEM, SCOPE, QUAL)                                                     \
TL_DEVICE uint32_t tl_atom_add_##SEM##_##SCOPE##_u32(void* p, uint32_t v) {                    \
    uint32_t old;                                                                              \
    asm volatile("atom" QUAL ".global.add.u32 %0, [%1], %2;" : "=r"(old) : "l"(p), "r"(v) : "memory"); \
    return old;                                                                                \
}                                                                                              \
TL_DEVICE uint64_t tl_atom_add_##SEM##_##SCOPE##_u64(void* p, uint64_t v) {                    \
    uint64_t old;                                                                              \
    asm volatile("atom" QUAL ".global.add.u64 %0, [%1], %2;" : "=l"(old) : "l"(p), "l"(v) : "memory"); \
    return old;                                                                                \
}
#define TL_DEFINE_SCOPED(SCOPE)                                                                  \
TL_DEFINE_MEM_OPS(relaxed, SCOPE, ".relaxed." #SCOPE)                                           \
TL_DEFINE_MEM_OPS(acquire, SCOPE, ".acquire." #SCOPE)                                           \
TL_DEFINE_ST_OPS(relaxed, SCOPE, ".relaxed." #SCOPE)                                            \
TL_DEFINE_ST_OPS(release, SCOPE, ".release." #SCOPE)                                            \
TL_DEFINE_RED_OPS(relaxed, SCOPE, ".relaxed." #SCOPE)                                           \
TL_DEFINE_RED_OPS(release, SCOPE, ".release." #SCOPE)                                           \
TL_DEFINE_ATOM_OPS(relaxed, SCOPE, ".relaxed." #SCOPE)                                          \
TL_DEFINE_ATOM_OPS(acquire, SCOPE, ".acquire." #SCOPE)                                          \
TL_DEFINE_ATOM_OPS(release, SCOPE, ".release." #SCOPE)                                          \
TL_DEFINE_ATOM_OPS(acq_rel, SCOPE, ".acq_rel." #SCOPE)                                          \
TL_DEVICE void tl_fence_acq_rel_##SCOPE() { asm volatile("fence.acq_rel." #SCOPE ";" ::: "memory"); } \
TL_DEVICE void tl_fence_sc_##SCOPE() { asm volatile("fence.sc." #SCOPE ";" ::: "memory"); }
TL_DEFINE_SCOPED(cta)
TL_DEFINE_SCOPED(gpu)
TL_DEFINE_SCOPED(sys)
/* Weak and volatile accesses have no scope; they are defined once per scope name so that the
 * code generator can name every (sem, scope) pair alike. */
#define TL_DEFINE_UNSCOPED(SCOPE)                                                                \
TL_DEFINE_MEM_OPS(weak, SCOPE, "")                                                              \
TL_DEFINE_MEM_OPS(volatile, SCOPE, ".volatile")                                                 \
TL_DEFINE_ST_OPS(weak, SCOPE, "")                                                               \
TL_DEFINE_ST_OPS(volatile, SCOPE, ".volatile")
TL_DEFINE_UNSCOPED(cta)
TL_DEFINE_UNSCOPED(gpu)
TL_DEFINE_UNSCOPED(sys)
/* Spin until `*p CMP v`, each read an acquire at SCOPE (what the signaller wrote before its
 * release is visible after the wait). */
#define TL_DEFINE_WAIT(NAME, OP, SCOPE)                                                          \
TL_DEVICE void tl_wait_##NAME##_##SCOPE##_s32(const void* p, int32_t v) {                      \
    while (!((int32_t)tl_ld_acquire_##SCOPE##_b32(p) OP v)) {}                                  \
}                                                                                              \
TL_DEVICE void tl_wait_##NAME##_##SCOPE##_u32(const void* p, uint32_t v) {                     \
    while (!(tl_ld_acquire_##SCOPE##_b32(p) OP v)) {}                                           \
}                                                                                              \
TL_DEVICE void tl_wait_##NAME##_##SCOPE##_s64(const void* p, int64_t v) {                      \
    while (!((int64_t)tl_ld_acquire_##SCOPE##_b64(p) OP v)) {}                                  \
}                                                                                              \
TL_DEVICE void tl_wait_##NAME##_##SCOPE##_u64(const void* p, uint64_t v) {                     \
    while (!(tl_ld_acquire_##SCOPE##_b64(p) OP v)) {}                                           \
}
/* Counters: spin until `*p - v CMP 0`, the difference taken modulo 2^bits and read as signed
 * (serial-number arithmetic), so a counter that wraps past 2^31 keeps comparing right. The
 * subtraction is unsigned: no signed overflow. */
#define TL_DEFINE_WAIT_COUNTER(NAME, OP, SCOPE)                                                  \
TL_DEVICE void tl_wait_counter_##NAME##_##SCOPE##_s32(const void* p, int32_t v) {              \
    while (!((int32_t)(tl_ld_acquire_##SCOPE##_b32(p) - (uint32_t)v) OP 0)) {}                 \
}                                                                                              \
TL_DEVICE void tl_wait_counter_##NAME##_##SCOPE##_u32(const void* p, uint32_t v) {             \
    while (!((int32_t)(tl_ld_acquire_##SCOPE##_b32(p) - v) OP 0)) {}                           \
}                                                                                              \
TL_DEVICE void tl_wait_counter_##NAME##_##SCOPE##_s64(const void* p, int64_t v) {              \
    while (!((int64_t)(tl_ld_acquire_##SCOPE##_b64(p) - (uint64_t)v) OP 0)) {}                 \
}                                                                                              \
TL_DEVICE void tl_wait_counter_##NAME##_##SCOPE##_u64(const void* p, uint64_t v) {             \
    while (!((int64_t)(tl_ld_acquire_##SCOPE##_b64(p) - v) OP 0)) {}                           \
}
#define TL_DEFINE_WAITS(SCOPE)                                                                   \
TL_DEFINE_WAIT(eq, ==, SCOPE) TL_DEFINE_WAIT(ne, !=, SCOPE) TL_DEFINE_WAIT(lt, <, SCOPE)       \
TL_DEFINE_WAIT(le, <=, SCOPE) TL_DEFINE_WAIT(gt, >, SCOPE) TL_DEFINE_WAIT(ge, >=, SCOPE)       \
TL_DEFINE_WAIT_COUNTER(lt, <, SCOPE) TL_DEFINE_WAIT_COUNTER(le, <=, SCOPE)                     \
TL_DEFINE_WAIT_COUNTER(gt, >, SCOPE) TL_DEFINE_WAIT_COUNTER(ge, >=, SCOPE)
TL_DEFINE_WAITS(cta)
TL_DEFINE_WAITS(gpu)
TL_DEFINE_WAITS(sys)

/* ---- atomics (generic addresses: global or shared) ---- */
TL_DEVICE void tl_atomic_add_f32(float* p, float v) { atomicAdd(p, v); }
TL_DEVICE void tl_atomic_add_f64(double* p, double v) { atomicAdd(p, v); }
TL_DEVICE void tl_atomic_add_i32(int32_t* p, int32_t v) { atomicAdd((int*)p, (int)v); }
TL_DEVICE void tl_atomic_add_u32(uint32_t* p, uint32_t v) { atomicAdd((unsigned int*)p, (unsigned int)v); }
/* Two's complement: a signed 64-bit add is the unsigned one. */
TL_DEVICE void tl_atomic_add_i64(int64_t* p, int64_t v) {
    atomicAdd((unsigned long long*)p, (unsigned long long)v);
}
TL_DEVICE void tl_atomic_add_u64(uint64_t* p, uint64_t v) { atomicAdd((unsigned long long*)p, v); }
TL_DEVICE void tl_atomic_max_i32(int32_t* p, int32_t v) { atomicMax((int*)p, (int)v); }
TL_DEVICE void tl_atomic_min_i32(int32_t* p, int32_t v) { atomicMin((int*)p, (int)v); }
TL_DEVICE void tl_atomic_max_u32(uint32_t* p, uint32_t v) { atomicMax((unsigned*)p, (unsigned)v); }
TL_DEVICE void tl_atomic_min_u32(uint32_t* p, uint32_t v) { atomicMin((unsigned*)p, (unsigned)v); }
/* Floats (NaN aside) on the bits: a non-negative float orders as a signed int, a negative one
 * reversed as an unsigned int, so one integer atomic does it. */
TL_DEVICE void tl_atomic_max_f32(float* p, float v) {
    int b = __float_as_int(v);
    if (b >= 0) atomicMax((int*)p, b); else atomicMin((unsigned*)p, (unsigned)b);
}
TL_DEVICE void tl_atomic_min_f32(float* p, float v) {
    int b = __float_as_int(v);
    if (b >= 0) atomicMin((int*)p, b); else atomicMax((unsigned*)p, (unsigned)b);
}
/* The value has the element's type (already representable), so converting it is exact. */
TL_DEVICE void tl_atomic_add_f16(uint16_t* p, float v) {
    uint16_t h = tl_f32_to_f16(v);
    asm volatile("red.add.noftz.f16 [%0], %1;" :: "l"(p), "h"(h) : "memory");
}
TL_DEVICE void tl_atomic_add_bf16(uint16_t* p, float v) {
#if __CUDA_ARCH__ >= 900
    uint16_t h = tl_f32_to_bf16(v);
    asm volatile("red.add.noftz.bf16 [%0], %1;" :: "l"(p), "h"(h) : "memory");
#else
    /* sm_80 has no bf16 atomic add: a compare-and-swap loop on the 16-bit word. */
    unsigned short* q = (unsigned short*)p;
    unsigned short old = *q, assumed;
    do {
        assumed = old;
        unsigned short nw = tl_f32_to_bf16(tl_bf16_to_f32(assumed) + v);
        old = atomicCAS(q, assumed, nw);
    } while (old != assumed);
#endif
}

/* ---- ldmatrix: lane l < 8*num supplies the shared address of row l%8 of matrix l/8; the
 * lane's register j (16-bit elements 2j, 2j+1 of dst, low half first) receives row l/4,
 * columns 2(l%4), 2(l%4)+1 of matrix j. Registers are unpacked with shifts rather than
 * through a uint32_t pointer so no type-punned store touches the 16-bit local array. The
 * "memory" clobber keeps the compiler from moving shared stores past the load (it only
 * constrains NVVM; ptxas still schedules by real dependences). ---- */
TL_DEVICE void tl_unpack2(uint16_t* d, uint32_t r) {
    d[0] = (uint16_t)(r & 0xffffu);
    d[1] = (uint16_t)(r >> 16);
}
TL_DEVICE uint32_t tl_pack2(const uint16_t* s) {
    return (uint32_t)s[0] | ((uint32_t)s[1] << 16);
}
TL_DEVICE void tl_ldmatrix_x1(const void* smem, uint16_t* dst) {
    uint32_t r0;
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\n"
                 : "=r"(r0) : "r"(tl_smem_addr(smem)) : "memory");
    tl_unpack2(dst, r0);
}
TL_DEVICE void tl_ldmatrix_x2(const void* smem, uint16_t* dst) {
    uint32_t r0, r1;
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
                 : "=r"(r0), "=r"(r1) : "r"(tl_smem_addr(smem)) : "memory");
    tl_unpack2(dst, r0);
    tl_unpack2(dst + 2, r1);
}
TL_DEVICE void tl_ldmatrix_x4(const void* smem, uint16_t* dst) {
    uint32_t r0, r1, r2, r3;
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(tl_smem_addr(smem)) : "memory");
    tl_unpack2(dst, r0);
    tl_unpack2(dst + 2, r1);
    tl_unpack2(dst + 4, r2);
    tl_unpack2(dst + 6, r3);
}
TL_DEVICE void tl_ldmatrix_x1_trans(const void* smem, uint16_t* dst) {
    uint32_t r0;
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];\n"
                 : "=r"(r0) : "r"(tl_smem_addr(smem)) : "memory");
    tl_unpack2(dst, r0);
}
TL_DEVICE void tl_ldmatrix_x2_trans(const void* smem, uint16_t* dst) {
    uint32_t r0, r1;
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
                 : "=r"(r0), "=r"(r1) : "r"(tl_smem_addr(smem)) : "memory");
    tl_unpack2(dst, r0);
    tl_unpack2(dst + 2, r1);
}
TL_DEVICE void tl_ldmatrix_x4_trans(const void* smem, uint16_t* dst) {
    uint32_t r0, r1, r2, r3;
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(tl_smem_addr(smem)) : "memory");
    tl_unpack2(dst, r0);
    tl_unpack2(dst + 2, r1);
    tl_unpack2(dst + 4, r2);
    tl_unpack2(dst + 6, r3);
}

/* ---- mma.sync m16n8k16, f32 accumulate: D = A*B + C (D may alias C). A: 8 16-bit elements
 * (registers a0..a3 = element pairs), B: 4, C/D: 4 floats, in PTX's fragment order. No side
 * effects, so the asm is not volatile and the compiler may schedule it freely. ---- */
#define TL_DEFINE_MMA_16816(NAME, AB)                                                          \
TL_DEVICE void NAME(float* d, const uint16_t* a, const uint16_t* b, const float* c) {          \
    float d0, d1, d2, d3;                                                                      \
    asm("mma.sync.aligned.m16n8k16.row.col.f32." AB "." AB ".f32 "                            \
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n"                \
        : "=f"(d0), "=f"(d1), "=f"(d2), "=f"(d3)                                               \
        : "r"(tl_pack2(a)), "r"(tl_pack2(a + 2)), "r"(tl_pack2(a + 4)), "r"(tl_pack2(a + 6)),   \
          "r"(tl_pack2(b)), "r"(tl_pack2(b + 2)),                                              \
          "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));                                         \
    d[0] = d0; d[1] = d1; d[2] = d2; d[3] = d3;                                                \
}
TL_DEFINE_MMA_16816(tl_mma_m16n8k16_bf16, "bf16")
TL_DEFINE_MMA_16816(tl_mma_m16n8k16_f16, "f16")
