// How fast the runtime's pitched copy of odd-length rows could run on the whole GPU (gpu-notes
// run 39): the shipped kernel's scheme (a block a row, 256 threads, a thread's chunks one after
// another) beside forms with more loads in flight, an aligned copy of the same bytes (no
// shift: the ceiling) and cudaMemcpyAsync. Each timing follows an L2 flush, as the GEMM
// benchmarks' windows do. Standalone, for nvcc on the GPU machine:
//
//   nvcc -O3 -arch=sm_90a -o /tmp/copy_full_probe bench/copy_full_probe.cu && /tmp/copy_full_probe
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "probe_check.cuh"  // CHECK

#include "../crates/runtime/src/pitched_shift.cuh"

struct Args {
  const unsigned char* src;
  unsigned char* dst;
  long sp, dp, w, h;
};

// One 16-byte chunk `c` of row `r`: the shipped kernel's three cases.
__device__ __forceinline__ uint4 load_chunk(const Args& a, long r, long c, unsigned long long end) {
  const unsigned char* s = a.src + r * a.sp + c * 16;
  const unsigned long long p = (unsigned long long)s, p0 = p & ~15ull;
  if (c * 16 + 16 <= a.w && (p & 15) == 0) return __ldg((const uint4*)s);
  if (c * 16 + 16 <= a.w && p0 >= (unsigned long long)a.src && p0 + 32 <= end) {
    const uint4 lo = __ldg((const uint4*)p0), hi = __ldg((const uint4*)(p0 + 16));
    return tl_shifted(lo, hi, (unsigned)(p & 15));
  }
  unsigned long long lo = 0, hi = 0;
  const long n = a.w - c * 16 < 16 ? a.w - c * 16 : 16;
  for (int i = 0; i < n; ++i) {
    const unsigned long long b = __ldg(s + i);
    if (i < 8) lo |= b << (8 * i); else hi |= b << (8 * (i - 8));
  }
  return make_uint4((unsigned)lo, (unsigned)(lo >> 32), (unsigned)hi, (unsigned)(hi >> 32));
}

__device__ __forceinline__ unsigned long long end_of(const Args& a) {
  return (unsigned long long)a.src + (a.h - 1) * a.sp + a.w;
}

// The shipped kernel: a block a row, its threads the row's chunks in turn.
__global__ void __launch_bounds__(256) shipped(Args a) {
  const long chunks = (a.w + 15) / 16;
  const unsigned long long end = end_of(a);
  for (long r = blockIdx.x; r < a.h; r += gridDim.x) {
    uint4* d = (uint4*)(a.dst + r * a.dp);
    for (long c = threadIdx.x; c < chunks; c += blockDim.x) d[c] = load_chunk(a, r, c, end);
  }
}

// A block a row as shipped, with the loads of a thread's chunks (PER of them, blockDim.x
// apart) all issued before its stores.
template <int PER>
__global__ void __launch_bounds__(1024) row_hoisted(Args a) {
  const long chunks = (a.w + 15) / 16;
  const unsigned long long end = end_of(a);
  for (long r = blockIdx.x; r < a.h; r += gridDim.x) {
    uint4 v[PER];
#pragma unroll
    for (int j = 0; j < PER; ++j) {
      const long c = threadIdx.x + (long)j * blockDim.x;
      if (c < chunks) v[j] = load_chunk(a, r, c, end);
    }
    uint4* d = (uint4*)(a.dst + r * a.dp);
#pragma unroll
    for (int j = 0; j < PER; ++j) {
      const long c = threadIdx.x + (long)j * blockDim.x;
      if (c < chunks) d[c] = v[j];
    }
  }
}

// A block a row; a lane loads only the aligned vector at its chunk's start and takes the one
// after from the next lane (the warp's last lane loads its own), so each 16 bytes of the
// row is loaded once. Chunks at the row's ends take the shipped path.
__global__ void __launch_bounds__(256) row_shuffled(Args a) {
  const long chunks = (a.w + 15) / 16;
  const unsigned long long end = end_of(a);
  const unsigned lane = threadIdx.x & 31;
  for (long r = blockIdx.x; r < a.h; r += gridDim.x) {
    const unsigned char* row = a.src + r * a.sp;
    const unsigned long long base = (unsigned long long)row;
    const unsigned off = (unsigned)(base & 15);
    const unsigned long long a0 = base & ~15ull;
    uint4* d = (uint4*)(a.dst + r * a.dp);
    for (long c0 = threadIdx.x - lane; c0 < chunks; c0 += blockDim.x) {
      const long c = c0 + lane;
      // Aligned vector c of the row's span (from a0): the low half of chunk c's window.
      const unsigned long long p = a0 + (unsigned long long)c * 16;
      const bool inside = p >= (unsigned long long)a.src && p + 16 <= end;
      uint4 lo = inside && c <= chunks ? __ldg((const uint4*)p) : make_uint4(0, 0, 0, 0);
      uint4 hi;
      hi.x = __shfl_down_sync(0xffffffffu, lo.x, 1);
      hi.y = __shfl_down_sync(0xffffffffu, lo.y, 1);
      hi.z = __shfl_down_sync(0xffffffffu, lo.z, 1);
      hi.w = __shfl_down_sync(0xffffffffu, lo.w, 1);
      const bool whole = c * 16 + 16 <= a.w && p + 32 <= end;
      if (lane == 31 && whole && off) hi = __ldg((const uint4*)(p + 16));
      if (c >= chunks) continue;
      if (whole) d[c] = off ? tl_shifted(lo, hi, off) : lo;
      else d[c] = load_chunk(a, r, c, end);
    }
  }
}

// The ceiling: the same number of 16-byte chunks, aligned, no shift.
template <int U>
__global__ void __launch_bounds__(256) aligned(Args a) {
  const long total = a.h * a.dp / 16;
  const long stride = (long)gridDim.x * blockDim.x;
  const uint4* s = (const uint4*)a.dst;  // reads a second buffer, see main
  for (long i0 = (long)blockIdx.x * blockDim.x + threadIdx.x; i0 < total; i0 += stride * U) {
    uint4 v[U];
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (i0 + u * stride < total) v[u] = __ldg((const uint4*)a.src + i0 + u * stride);
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (i0 + u * stride < total) ((uint4*)a.dst)[i0 + u * stride] = v[u];
    (void)s;
  }
}

static unsigned char* flush_buf;
static const size_t FLUSH = 256ull << 20;

template <typename F>
float timed(F launch) {
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  for (int i = 0; i < 3; ++i) launch();
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  std::vector<float> ms;
  for (int i = 0; i < 20; ++i) {
    CHECK(cudaMemsetAsync(flush_buf, i, FLUSH));
    CHECK(cudaEventRecord(a));
    launch();
    CHECK(cudaEventRecord(b));
    CHECK(cudaEventSynchronize(b));
    float t;
    CHECK(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t * 1000);
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

int main(int argc, char** argv) {
  const long h = argc > 1 ? atol(argv[1]) : 4096, w = argc > 2 ? atol(argv[2]) : 8190;
  const long sp = w, dp = (w + 127) / 128 * 128;
  unsigned char *s, *d, *s2;
  CHECK(cudaMalloc(&s, h * sp + 64));
  CHECK(cudaMalloc(&s2, h * dp + 64));
  CHECK(cudaMalloc(&d, h * dp + 64));
  CHECK(cudaMalloc(&flush_buf, FLUSH));
  std::vector<unsigned char> hs(h * sp);
  for (size_t i = 0; i < hs.size(); ++i) hs[i] = (unsigned char)(i * 2654435761u >> 13);
  CHECK(cudaMemcpy(s, hs.data(), hs.size(), cudaMemcpyHostToDevice));
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  Args a{s, d, sp, dp, w, h};
  const double mb = 2.0 * h * w / 1e6;  // read + written
  auto check = [&](const char* name) {
    std::vector<unsigned char> hd(h * dp);
    CHECK(cudaMemcpy(hd.data(), d, hd.size(), cudaMemcpyDeviceToHost));
    long bad = 0;
    for (long r = 0; r < h; ++r)
      for (long c = 0; c < w; ++c) bad += hd[r * dp + c] != hs[r * sp + c];
    if (bad) printf("%s: %ld bytes wrong\n", name, bad);
  };
  auto report = [&](const char* name, float us) {
    printf("%-28s %7.2f us  %6.0f GB/s\n", name, us, mb * 1e3 / us);
  };
  printf("rows %ld x %ld bytes -> pitch %ld, %d SMs\n", h, w, dp, sms);
  // A copy into the zeroed destination: timed, then every byte checked.
  auto variant = [&](const char* name, auto launch) {
    CHECK(cudaMemset(d, 0, h * dp));
    report(name, timed(launch));
    check(name);
  };
  variant("shipped (block a row)", [&] { shipped<<<h, 256>>>(a); });
  // Rows of up to PER × threads chunks only (4096 rows of 8190 bytes); wider rows are
  // reported wrong.
  variant("row hoisted 512 thr x1", [&] { row_hoisted<1><<<h, 512>>>(a); });
  variant("row hoisted 256 thr x2", [&] { row_hoisted<2><<<h, 256>>>(a); });
  variant("row hoisted 1024 thr x1", [&] { row_hoisted<1><<<h, 1024>>>(a); });
  variant("row hoisted 128 thr x4", [&] { row_hoisted<4><<<h, 128>>>(a); });
  variant("row shuffled 256", [&] { row_shuffled<<<h, 256>>>(a); });
  Args al{s2, d, dp, dp, dp, h};
  report("aligned U=4 8 blocks/SM", timed([&] { aligned<4><<<sms * 8, 256>>>(al); }));
  report("aligned U=1 8 blocks/SM", timed([&] { aligned<1><<<sms * 8, 256>>>(al); }));
  report("cudaMemcpyAsync contiguous", timed([&] { CHECK(cudaMemcpyAsync(d, s, h * w, cudaMemcpyDeviceToDevice)); }));
  report("two shipped back to back", timed([&] { shipped<<<h, 256>>>(a); shipped<<<h, 256>>>(a); }));
  return 0;
}
