/* tilelang HIP device header (AMD CDNA3/CDNA4: gfx942, gfx950), embedded into every generated
 * HIP kernel.
 *
 * No ROCm or HIP header is included: clang compiles the source with -nogpulib -nogpuinc, so
 * everything here is compiler builtins and inline assembly. Every helper is the device twin of
 * the CPU header's function of the same name (tl_cpu.h), so the shared C-family printer emits
 * the same calls for every target. Single-precision math lowers to the hardware's
 * instructions; there is no device math library, so double-precision transcendental functions
 * are not available (code generation rejects them). */

typedef signed char int8_t;
typedef short int16_t;
typedef int int32_t;
typedef long long int64_t;
typedef unsigned char uint8_t;
typedef unsigned short uint16_t;
typedef unsigned int uint32_t;
typedef unsigned long long uint64_t;

#define __global__ __attribute__((global))
#define __shared__ __attribute__((shared))
#define TL_DEVICE static __attribute__((device, always_inline)) inline
#define TL_LAUNCH_BOUNDS(n) __attribute__((amdgpu_flat_work_group_size(1, n)))

#define NAN __builtin_nanf("")
#define INFINITY __builtin_inff()

typedef float tl_f32x4 __attribute__((ext_vector_type(4)));
typedef float tl_f32x16 __attribute__((ext_vector_type(16)));
typedef short tl_i16x4 __attribute__((ext_vector_type(4)));
typedef _Float16 tl_f16x4 __attribute__((ext_vector_type(4)));
typedef _Float16 tl_f16x8 __attribute__((ext_vector_type(8)));
typedef __bf16 tl_bf16x8 __attribute__((ext_vector_type(8)));
typedef uint32_t tl_u32x2 __attribute__((ext_vector_type(2)));
typedef uint32_t tl_u32x4 __attribute__((ext_vector_type(4)));
typedef __amdgpu_buffer_rsrc_t tl_rsrc;
#define TL_LDS(p) ((__attribute__((address_space(3))) void*)(p))

/* ---- math: the hardware's single-precision instructions (v_exp_f32, v_log_f32, ...) ---- */
#define expf __builtin_expf
#define exp2f __builtin_exp2f
#define logf __builtin_logf
#define log2f __builtin_log2f
#define sqrtf __builtin_sqrtf
#define sinf __builtin_sinf
#define cosf __builtin_cosf
#define floorf __builtin_floorf
#define ceilf __builtin_ceilf
#define fabsf __builtin_fabsf
#define fminf __builtin_fminf
#define fmaxf __builtin_fmaxf
#define fmodf __builtin_fmodf
#define floor __builtin_floor
#define ceil __builtin_ceil
#define fabs __builtin_fabs
#define fmin __builtin_fmin
#define fmax __builtin_fmax
#define sqrt __builtin_sqrt
TL_DEVICE float rsqrtf(float x) { return 1.0f / __builtin_sqrtf(x); }
TL_DEVICE float tanhf(float x) {
    float a = __builtin_fabsf(x);
    float e = __builtin_expf(-2.0f * a);
    float t = (1.0f - e) / (1.0f + e);
    return x < 0.0f ? -t : t;
}
/* Abramowitz and Stegun 7.1.26 (absolute error below 1.5e-7). */
TL_DEVICE float erff(float x) {
    float a = __builtin_fabsf(x);
    float t = 1.0f / (1.0f + 0.3275911f * a);
    float p = t * (0.254829592f + t * (-0.284496736f + t * (1.421413741f + t * (-1.453152027f + t * 1.061405429f))));
    float r = 1.0f - p * __builtin_expf(-a * a);
    return x < 0.0f ? -r : r;
}
TL_DEVICE float powf(float x, float y) {
    if (y == 0.0f) return 1.0f;
    float r = __builtin_exp2f(y * __builtin_log2f(__builtin_fabsf(x)));
    if (x < 0.0f) {
        if (__builtin_floorf(y) != y) return NAN;
        if (__builtin_fmodf(__builtin_fabsf(y), 2.0f) == 1.0f) r = -r;
    }
    return r;
}
/* exp2 and exp straight on v_exp_f32 (inputs below 2^-126 flush to 0, so exp(-inf) is 0). */
TL_DEVICE float tl_exp2f(float x) { return __builtin_amdgcn_exp2f(x); }
TL_DEVICE float tl_expf(float x) { return tl_exp2f(x * 1.4426950408889634f); }
TL_DEVICE float tl_sigmoidf(float x) { return 1.0f / (1.0f + tl_expf(-x)); }

/* ---- narrow floats: stored as uint16_t/uint8_t, computed as float ---- */
TL_DEVICE float tl_bits_to_f32(uint32_t u) { return __builtin_bit_cast(float, u); }
TL_DEVICE uint32_t tl_f32_to_bits(float f) { return __builtin_bit_cast(uint32_t, f); }
TL_DEVICE float tl_bf16_to_f32(uint16_t h) { return tl_bits_to_f32(((uint32_t)h) << 16); }
TL_DEVICE uint16_t tl_f32_to_bf16(float f) {
    uint32_t u = tl_f32_to_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* NaN stays NaN */
    u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest even */
    return (uint16_t)(u >> 16);
}
TL_DEVICE float tl_round_bf16(float f) { return tl_bf16_to_f32(tl_f32_to_bf16(f)); }
TL_DEVICE float tl_f16_to_f32(uint16_t h) { return (float)__builtin_bit_cast(_Float16, h); }
TL_DEVICE uint16_t tl_f32_to_f16(float f) { return __builtin_bit_cast(uint16_t, (_Float16)f); }
TL_DEVICE float tl_round_f16(float f) { return tl_f16_to_f32(tl_f32_to_f16(f)); }
/* float8 (OCP e4m3fn / e5m2), by formula as on the CPU: round to nearest even, saturate. */
TL_DEVICE float tl_e4m3_to_f32(uint8_t b) {
    uint32_t s = b & 0x80u, e = (b >> 3) & 0xfu, m = b & 7u;
    float v;
    if ((b & 0x7fu) == 0x7fu) return NAN;
    if (e == 0) v = (float)m * 0.001953125f;
    else v = tl_bits_to_f32(((e + 120u) << 23) | (m << 20));
    return s ? -v : v;
}
TL_DEVICE uint8_t tl_f32_to_e4m3(float f) {
    if (f != f) return 0x7f;
    uint8_t s = f < 0 ? 0x80 : 0;
    float a = __builtin_fabsf(f);
    if (a >= 448.0f) return s | 0x7e;
    if (a < 0.015625f) {
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
TL_DEVICE float tl_round_e4m3(float f) { return tl_e4m3_to_f32(tl_f32_to_e4m3(f)); }
TL_DEVICE float tl_e5m2_to_f32(uint8_t b) { return tl_f16_to_f32((uint16_t)((uint16_t)b << 8)); }
TL_DEVICE uint8_t tl_f32_to_e5m2(float f) {
    if (f != f) return 0x7f;
    uint8_t s = f < 0 ? 0x80 : 0;
    float a = __builtin_fabsf(f);
    if (a >= 57344.0f) return s | 0x7b;
    uint16_t h = tl_f32_to_f16(a);
    uint32_t r = (uint32_t)h + 0x7fu + ((h >> 8) & 1u);
    uint8_t out = (uint8_t)(r >> 8);
    if (out > 0x7b) out = 0x7b;
    return s | out;
}
TL_DEVICE float tl_round_e5m2(float f) { return tl_e5m2_to_f32(tl_f32_to_e5m2(f)); }

/* ---- integer and float helpers (the CPU header's definitions) ---- */
TL_DEVICE int32_t tl_floordiv_i32(int32_t a, int32_t b) { int32_t q = a / b; return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q; }
TL_DEVICE int32_t tl_floormod_i32(int32_t a, int32_t b) { int32_t r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }
TL_DEVICE int64_t tl_floordiv_i64(int64_t a, int64_t b) { int64_t q = a / b; return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q; }
TL_DEVICE int64_t tl_floormod_i64(int64_t a, int64_t b) { int64_t r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }
TL_DEVICE float tl_floormod_f32(float a, float b) { return a - __builtin_floorf(a / b) * b; }
TL_DEVICE double tl_floormod_f64(double a, double b) { return a - __builtin_floor(a / b) * b; }

/* ---- thread and wave indices ---- */
TL_DEVICE int32_t tl_thread_idx() { return (int32_t)__builtin_amdgcn_workitem_id_x(); }
/* The wave's index in its workgroup, in a scalar register (the compiler cannot see that
 * thread_idx / 64 is the same for a whole wave). */
TL_DEVICE int32_t tl_wave_idx() { return __builtin_amdgcn_readfirstlane(tl_thread_idx() >> 6); }

/* ---- barriers and waits. s_barrier alone: __syncthreads would also wait for every
 * outstanding global load (vmcnt(0)), draining the direct-to-LDS pipeline at every barrier.
 * The "memory" clobbers keep the compiler from moving LDS accesses across them. ---- */
TL_DEVICE void tl_barrier_lds() { asm volatile("s_waitcnt lgkmcnt(0)\n\ts_barrier" ::: "memory"); }
TL_DEVICE void tl_syncthreads() {
    __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
    __builtin_amdgcn_s_barrier();
    __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
}
#define tl_wait_vmcnt(N) asm volatile("s_waitcnt vmcnt(" #N ")" ::: "memory")

/* ---- direct-to-LDS buffer loads: lane l's bytes land at M0 + l*bytes, M0 = the wave's base
 * (uniform); voffset out of range (predicated-off lanes get 0x80000000) lands zeros. The
 * resource descriptor is built once per tensor at kernel entry. ---- */
TL_DEVICE tl_rsrc tl_make_rsrc(const void* base, uint32_t bytes) {
    return __builtin_amdgcn_make_buffer_rsrc((void*)base, (short)0, (int)bytes, 0x00020000);
}
#define TL_DEFINE_BUFFER_LOAD_LDS(BYTES)                                                       \
TL_DEVICE void tl_buffer_load_lds_##BYTES(void* lds, tl_rsrc r, uint32_t voff, uint32_t soff, \
                                          bool p) {                                            \
    __builtin_amdgcn_raw_ptr_buffer_load_lds(r, TL_LDS(lds), BYTES, p ? voff : 0x80000000u,    \
                                             soff, 0, 0);                                      \
}
TL_DEFINE_BUFFER_LOAD_LDS(4)
#if defined(__gfx950__)
TL_DEFINE_BUFFER_LOAD_LDS(16)
#endif

/* gfx950's transposing LDS read: a 16-lane group reads a 4 x 16 block of 16-bit elements (each
 * lane names 8 bytes) and lane l receives element l % 4 of lanes (l / 4) % 4 + 4n, n = 0..3. */
#if defined(__gfx950__)
TL_DEVICE void tl_ds_read_tr16_b64(void* d, const void* s) {
    *(tl_i16x4*)d = __builtin_amdgcn_ds_read_tr16_b64_v4i16(
        (__attribute__((address_space(3))) tl_i16x4*)(s));
}
#endif

/* Buffer loads into registers: the same range check (a predicate-false lane's offset is past
 * any tensor), no branch around the load, and one 32-bit offset per lane instead of a 64-bit
 * address. */
#define TL_DEFINE_BUFFER_LOAD(BYTES, T, LOAD)                                                  \
TL_DEVICE void tl_buffer_load_##BYTES(void* d, tl_rsrc r, uint32_t voff, uint32_t soff,       \
                                      bool p) {                                                \
    *(T*)d = LOAD(r, p ? voff : 0x80000000u, soff, 0);                                         \
}
TL_DEFINE_BUFFER_LOAD(4, uint32_t, __builtin_amdgcn_raw_buffer_load_b32)
TL_DEFINE_BUFFER_LOAD(8, tl_u32x2, __builtin_amdgcn_raw_buffer_load_b64)
TL_DEFINE_BUFFER_LOAD(16, tl_u32x4, __builtin_amdgcn_raw_buffer_load_b128)

/* ---- synchronous vector copies (both addresses aligned to the size) ---- */
TL_DEVICE void tl_vec_copy_16(void* d, const void* s) { *(tl_u32x4*)d = *(const tl_u32x4*)s; }
TL_DEVICE void tl_vec_copy_8(void* d, const void* s) { *(tl_u32x2*)d = *(const tl_u32x2*)s; }
TL_DEVICE void tl_vec_copy_4(void* d, const void* s) { *(uint32_t*)d = *(const uint32_t*)s; }
TL_DEVICE void tl_vec_copy_2(void* d, const void* s) { *(uint16_t*)d = *(const uint16_t*)s; }
TL_DEVICE void tl_vec_copy_1(void* d, const void* s) { *(uint8_t*)d = *(const uint8_t*)s; }
#define TL_DEFINE_VEC_COPY_ZFILL(BYTES, T)                                                     \
TL_DEVICE void tl_vec_copy_##BYTES##_zfill(void* d, const void* s, bool p) {                 \
    T v = (T)0;                                                                                \
    if (p) v = *(const T*)s;                                                                   \
    *(T*)d = v;                                                                                \
}
TL_DEFINE_VEC_COPY_ZFILL(16, tl_u32x4)
TL_DEFINE_VEC_COPY_ZFILL(8, tl_u32x2)
TL_DEFINE_VEC_COPY_ZFILL(4, uint32_t)
TL_DEFINE_VEC_COPY_ZFILL(2, uint16_t)
TL_DEFINE_VEC_COPY_ZFILL(1, uint8_t)

/* ---- wave shuffles over 64 lanes (ds_bpermute), CUDA's segment semantics: a source lane
 * outside the caller's segment of `width` lanes leaves the value unchanged. ---- */
TL_DEVICE int tl_lane() { return __builtin_amdgcn_mbcnt_hi(~0u, __builtin_amdgcn_mbcnt_lo(~0u, 0u)); }
TL_DEVICE int tl_shfl_src(int kind, int arg, int width) {
    int lane = tl_lane();
    int seg = lane & ~(width - 1);
    int src = kind == 0 ? (lane ^ arg) : kind == 1 ? lane + arg : seg + (arg & (width - 1));
    return (src >= seg && src < seg + width) ? src : lane;
}
TL_DEVICE int tl_shfl_i32(int v, int kind, int arg, int width) {
    return __builtin_amdgcn_ds_bpermute(tl_shfl_src(kind, arg, width) << 2, v);
}
TL_DEVICE float tl_shfl_f32(float v, int kind, int arg, int width) {
    return __builtin_bit_cast(float, tl_shfl_i32(__builtin_bit_cast(int, v), kind, arg, width));
}
TL_DEVICE int64_t tl_shfl_i64(int64_t v, int kind, int arg, int width) {
    int lo = tl_shfl_i32((int)(uint32_t)v, kind, arg, width);
    int hi = tl_shfl_i32((int)(v >> 32), kind, arg, width);
    return (int64_t)(((uint64_t)(uint32_t)hi << 32) | (uint32_t)lo);
}
TL_DEVICE double tl_shfl_f64(double v, int kind, int arg, int width) {
    return __builtin_bit_cast(double, tl_shfl_i64(__builtin_bit_cast(int64_t, v), kind, arg, width));
}

/* ---- atomics (global or LDS) ---- */
#define TL_ATOMIC_ADD(p, v) __hip_atomic_fetch_add((p), (v), __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT)
TL_DEVICE void tl_atomic_add_f32(float* p, float v) { TL_ATOMIC_ADD(p, v); }
TL_DEVICE void tl_atomic_add_f64(double* p, double v) { TL_ATOMIC_ADD(p, v); }
TL_DEVICE void tl_atomic_add_i32(int32_t* p, int32_t v) { TL_ATOMIC_ADD(p, v); }
TL_DEVICE void tl_atomic_add_u32(uint32_t* p, uint32_t v) { TL_ATOMIC_ADD(p, v); }
TL_DEVICE void tl_atomic_add_i64(int64_t* p, int64_t v) { TL_ATOMIC_ADD(p, v); }
TL_DEVICE void tl_atomic_add_u64(uint64_t* p, uint64_t v) { TL_ATOMIC_ADD(p, v); }
#define TL_ATOMIC_MAX(p, v) __hip_atomic_fetch_max((p), (v), __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT)
#define TL_ATOMIC_MIN(p, v) __hip_atomic_fetch_min((p), (v), __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT)
TL_DEVICE void tl_atomic_max_i32(int32_t* p, int32_t v) { TL_ATOMIC_MAX(p, v); }
TL_DEVICE void tl_atomic_min_i32(int32_t* p, int32_t v) { TL_ATOMIC_MIN(p, v); }
TL_DEVICE void tl_atomic_max_u32(uint32_t* p, uint32_t v) { TL_ATOMIC_MAX(p, v); }
TL_DEVICE void tl_atomic_min_u32(uint32_t* p, uint32_t v) { TL_ATOMIC_MIN(p, v); }
/* Floats (NaN aside) on the bits: a non-negative float orders as a signed int, a negative one
 * reversed as an unsigned int, so one integer atomic does it. */
TL_DEVICE void tl_atomic_max_f32(float* p, float v) {
    int32_t b = __builtin_bit_cast(int32_t, v);
    if (b >= 0) TL_ATOMIC_MAX((int32_t*)p, b); else TL_ATOMIC_MIN((uint32_t*)p, (uint32_t)b);
}
TL_DEVICE void tl_atomic_min_f32(float* p, float v) {
    int32_t b = __builtin_bit_cast(int32_t, v);
    if (b >= 0) TL_ATOMIC_MIN((int32_t*)p, b); else TL_ATOMIC_MAX((uint32_t*)p, (uint32_t)b);
}
/* 16-bit floats: a compare-and-swap loop on the aligned 32-bit word holding the element. */
#define TL_DEFINE_ATOMIC_ADD_16(NAME, TO, FROM)                                                \
TL_DEVICE void NAME(uint16_t* p, float v) {                                                    \
    uint32_t* w = (uint32_t*)((uintptr_t)p & ~(uintptr_t)3);                                   \
    uint32_t sh = ((uintptr_t)p & 2) ? 16u : 0u;                                               \
    uint32_t old = *w, assumed;                                                                \
    do {                                                                                       \
        assumed = old;                                                                         \
        uint16_t h = FROM(TO((uint16_t)(assumed >> sh)) + v);                                  \
        uint32_t nw = (assumed & ~(0xffffu << sh)) | ((uint32_t)h << sh);                      \
        old = assumed;                                                                         \
        __hip_atomic_compare_exchange_strong(w, &old, nw, __ATOMIC_RELAXED, __ATOMIC_RELAXED,  \
                                             __HIP_MEMORY_SCOPE_AGENT);                        \
    } while (old != assumed);                                                                  \
}
typedef unsigned long uintptr_t;
TL_DEFINE_ATOMIC_ADD_16(tl_atomic_add_f16, tl_f16_to_f32, tl_f32_to_f16)
TL_DEFINE_ATOMIC_ADD_16(tl_atomic_add_bf16, tl_bf16_to_f32, tl_f32_to_bf16)

/* ---- MFMA, f32 accumulate: D = A*B + C (D may alias C), operands in the instruction's lane
 * layout (docs/design/thread-ir.md) in per-thread arrays. ---- */
#define TL_DEFINE_MFMA(NAME, BUILTIN, AT, CT)                                                  \
TL_DEVICE void NAME(float* d, const uint16_t* a, const uint16_t* b, const float* c) {          \
    *(CT*)d = BUILTIN(*(const AT*)a, *(const AT*)b, *(const CT*)c, 0, 0, 0);                  \
}
TL_DEFINE_MFMA(tl_mfma_f32_16x16x16_bf16, __builtin_amdgcn_mfma_f32_16x16x16bf16_1k, tl_i16x4, tl_f32x4)
TL_DEFINE_MFMA(tl_mfma_f32_16x16x16_f16, __builtin_amdgcn_mfma_f32_16x16x16f16, tl_f16x4, tl_f32x4)
TL_DEFINE_MFMA(tl_mfma_f32_32x32x8_bf16, __builtin_amdgcn_mfma_f32_32x32x8bf16_1k, tl_i16x4, tl_f32x16)
TL_DEFINE_MFMA(tl_mfma_f32_32x32x8_f16, __builtin_amdgcn_mfma_f32_32x32x8f16, tl_f16x4, tl_f32x16)
#if defined(__gfx950__)
TL_DEFINE_MFMA(tl_mfma_f32_16x16x32_bf16, __builtin_amdgcn_mfma_f32_16x16x32_bf16, tl_bf16x8, tl_f32x4)
TL_DEFINE_MFMA(tl_mfma_f32_16x16x32_f16, __builtin_amdgcn_mfma_f32_16x16x32_f16, tl_f16x8, tl_f32x4)
TL_DEFINE_MFMA(tl_mfma_f32_32x32x16_bf16, __builtin_amdgcn_mfma_f32_32x32x16_bf16, tl_bf16x8, tl_f32x16)
TL_DEFINE_MFMA(tl_mfma_f32_32x32x16_f16, __builtin_amdgcn_mfma_f32_32x32x16_f16, tl_f16x8, tl_f32x16)
#endif
