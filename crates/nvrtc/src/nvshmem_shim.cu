// tilelang's NVSHMEM shim: one C function per peer operation the PTX printer lowers to NVSHMEM
// (crates/codegen/src/ptx/intrin/shmem.rs declares them; the names and parameter types must
// match). Compiled by NVRTC against the NVSHMEM headers of the library the process loads, as
// relocatable PTX, and linked with our kernel and libnvshmem_device.a by nvJitLink.

// NVRTC has no <type_traits>; NVSHMEM 3.4's collectives name std:: traits.
#include <cuda/std/type_traits>
namespace std {
using cuda::std::is_floating_point;
using cuda::std::is_integral;
using cuda::std::is_same;
using cuda::std::is_signed;
using cuda::std::is_unsigned;
}  // namespace std

#include <nvshmem.h>
#include <nvshmemx.h>

extern "C" {

// `count` chunks of `bytes`, `stride` bytes apart; the destination on `pe`.
__device__ void tl_shmem_put(void* dst, const void* src, unsigned long long bytes,
                             unsigned long long stride, int count, int pe) {
  for (int i = 0; i < count; ++i)
    nvshmem_putmem(static_cast<char*>(dst) + i * stride,
                   static_cast<const char*>(src) + i * stride, bytes, pe);
}

// As tl_shmem_put, the source on `pe`.
__device__ void tl_shmem_get(void* dst, const void* src, unsigned long long bytes,
                             unsigned long long stride, int count, int pe) {
  for (int i = 0; i < count; ++i)
    nvshmem_getmem(static_cast<char*>(dst) + i * stride,
                   static_cast<const char*>(src) + i * stride, bytes, pe);
}

// A warp's run of a transfer: one call, made by every lane of the warp alike. (Block copies
// are split into one run per warp: NVSHMEM's block calls divide the work by the launch's block,
// which a warp-specialized kernel's copying warps are not.)
__device__ void tl_shmem_put_warp(void* dst, const void* src, unsigned long long bytes, int pe) {
  nvshmemx_putmem_warp(dst, src, bytes, pe);
}
__device__ void tl_shmem_get_warp(void* dst, const void* src, unsigned long long bytes, int pe) {
  nvshmemx_getmem_warp(dst, src, bytes, pe);
}

__device__ void tl_shmem_quiet() { nvshmem_quiet(); }

// After this PE's own flag was seen to satisfy a wait: NVSHMEM's waits then make the data a
// proxied network transport delivered before the flag visible; a test that always holds does
// the same step (the flag is read as 32 bits whatever its width: only the step matters).
__device__ void tl_shmem_waited(void* flag) {
  (void)nvshmem_uint32_test(static_cast<unsigned*>(flag), NVSHMEM_CMP_GE, 0u);
}

__device__ unsigned tl_shmem_fetch32(unsigned* p, int pe) {
  return nvshmem_uint32_atomic_fetch(p, pe);
}
__device__ unsigned long long tl_shmem_fetch64(unsigned long long* p, int pe) {
  return nvshmem_ulonglong_atomic_fetch(p, pe);
}
__device__ void tl_shmem_set32(unsigned* p, unsigned v, int pe) {
  nvshmem_uint32_atomic_set(p, v, pe);
}
__device__ void tl_shmem_set64(unsigned long long* p, unsigned long long v, int pe) {
  nvshmem_ulonglong_atomic_set(p, v, pe);
}
__device__ void tl_shmem_add32(unsigned* p, unsigned v, int pe) {
  nvshmem_uint32_atomic_add(p, v, pe);
}
__device__ void tl_shmem_add64(unsigned long long* p, unsigned long long v, int pe) {
  nvshmem_ulonglong_atomic_add(p, v, pe);
}
// NVSHMEM has no floating-point add: a compare-and-swap loop on the bits.
__device__ void tl_shmem_addf32(unsigned* p, unsigned bits, int pe) {
  float v = __uint_as_float(bits);
  unsigned old = nvshmem_uint32_atomic_fetch(p, pe);
  for (;;) {
    unsigned want = __float_as_uint(__uint_as_float(old) + v);
    unsigned seen = nvshmem_uint32_atomic_compare_swap(p, old, want, pe);
    if (seen == old) break;
    old = seen;
  }
}
__device__ unsigned tl_shmem_fetch_add32(unsigned* p, unsigned v, int pe) {
  return nvshmem_uint32_atomic_fetch_add(p, v, pe);
}
__device__ unsigned long long tl_shmem_fetch_add64(unsigned long long* p, unsigned long long v,
                                                   int pe) {
  return nvshmem_ulonglong_atomic_fetch_add(p, v, pe);
}

}  // extern "C"
