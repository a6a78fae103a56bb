// How fast a copy of odd-length rows into padded rows runs on a few SMs: the question
// docs/design/odd-rows-overlap.md leaves open (a staging that overlaps the GEMM must do its
// copy on the SMs the GEMM does not hold). Standalone, for nvcc on the GPU machine:
//
//   nvcc -O3 -arch=sm_90a -o /tmp/copy_sms_probe bench/copy_sms_probe.cu && /tmp/copy_sms_probe
//
// Rows of 4096 × 8190 bytes (a 4096×4095 bf16 operand) are copied to rows 8192 bytes apart.
// Consecutive threads take consecutive 16-byte chunks of a row (each load instruction of a
// warp reads 512 contiguous bytes); each thread takes its chunk in U rows, loading the two
// aligned vectors around each first (2U in flight), then funnel-shifts them into U stores.
// (A first form gave each thread U consecutive chunks of one row: its loads were 64 bytes
// apart across a warp and it moved 17 GB/s a block at most, gpu-notes run 36q; taking the
// vector after from the next lane by a shuffle instead of loading it moved no more, 36t.)
// Prints GB/s read for X blocks of T threads, and checks every byte of each variant's copy.
// The funnel shift is the runtime's staging kernel's own (`tl_shifted`, included from
// crates/runtime/src/pitched_shift.cuh).
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <vector>

#include "probe_check.cuh"  // CHECK

#include "../crates/runtime/src/pitched_shift.cuh"  // tl_shifted, as the runtime copies

// Rows whose chunks all have both aligned vectors inside the source (every row but the
// last's tail): the probe copies whole chunks only and leaves the last partial chunk of each
// row, which a real kernel reads byte by byte.
template <int U>
__global__ void copy_rows(const unsigned char* __restrict__ src, unsigned char* __restrict__ dst,
                          long src_pitch, long dst_pitch, long width, long height) {
  const int chunks = (int)(width / 16);   // whole chunks a row (511 of 8190 bytes)
  const int span = 512;                   // threads a row: consecutive lanes, consecutive chunks
  const int subs = blockDim.x / span;     // rows side by side in a block
  const int sub = threadIdx.x / span, c = threadIdx.x % span;
  if (c >= chunks) return;
  const unsigned long long end = (unsigned long long)src + (height - 1) * src_pitch + width;
  // A block takes subs × U rows a step; a thread the same chunk of U of them, all loads first.
  for (long r0 = ((long)blockIdx.x * subs + sub) * U; r0 < height;
       r0 += (long)gridDim.x * subs * U) {
    uint4 lo[U], hi[U];
    unsigned off[U];
#pragma unroll
    for (int i = 0; i < U; ++i) {
      const long r = r0 + i;
      const unsigned long long a = (unsigned long long)(src + r * src_pitch + c * 16);
      const unsigned long long a0 = a & ~15ull;
      off[i] = (unsigned)(a & 15);
      const bool in = r < height;
      lo[i] = in ? __ldg((const uint4*)a0) : make_uint4(0, 0, 0, 0);
      hi[i] = (in && off[i] && a0 + 32 <= end) ? __ldg((const uint4*)(a0 + 16)) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int i = 0; i < U; ++i) {
      if (r0 + i < height) {
        uint4* d = (uint4*)(dst + (r0 + i) * dst_pitch) + c;
        *d = off[i] ? tl_shifted(lo[i], hi[i], off[i]) : lo[i];
      }
    }
  }
}

typedef void (*CopyKernel)(const unsigned char*, unsigned char*, long, long, long, long);

float time_copy(CopyKernel k, const unsigned char* s, unsigned char* d, long sp, long dp, long w,
                long h, int blocks, int threads) {
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  for (int i = 0; i < 3; ++i) k<<<blocks, threads>>>(s, d, sp, dp, w, h);
  if (cudaGetLastError() != cudaSuccess) return -1.0f;  // e.g. too many registers for the block
  CHECK(cudaDeviceSynchronize());
  std::vector<float> ms;
  for (int i = 0; i < 15; ++i) {
    CHECK(cudaEventRecord(a));
    k<<<blocks, threads>>>(s, d, sp, dp, w, h);
    CHECK(cudaEventRecord(b));
    CHECK(cudaEventSynchronize(b));
    float t;
    CHECK(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

int main() {
  const long h = 4096, w = 8190, sp = 8190, dp = 8192;
  unsigned char *s, *d;
  CHECK(cudaMalloc(&s, h * sp + 64));
  CHECK(cudaMalloc(&d, h * dp + 64));
  std::vector<unsigned char> hs(h * sp);
  for (size_t i = 0; i < hs.size(); ++i) hs[i] = (unsigned char)(i * 2654435761u >> 13);
  CHECK(cudaMemcpy(s, hs.data(), hs.size(), cudaMemcpyHostToDevice));
  CHECK(cudaMemset(d, 0, h * dp));
  const double bytes = (double)h * (w / 16) * 16;
  struct Variant { const char* name; CopyKernel k; };
  const Variant variants[] = {{"U=4", copy_rows<4>}, {"U=8", copy_rows<8>}};
  for (const Variant& v : variants) {
    CHECK(cudaMemset(d, 0, h * dp));
    v.k<<<132, 512>>>(s, d, sp, dp, w, h);
    CHECK(cudaDeviceSynchronize());
    std::vector<unsigned char> hd(h * dp);
    CHECK(cudaMemcpy(hd.data(), d, hd.size(), cudaMemcpyDeviceToHost));
    long bad = 0;
    for (long r = 0; r < h; ++r)
      for (long c = 0; c < (w / 16) * 16; ++c) bad += hd[r * dp + c] != hs[r * sp + c];
    printf("%s: check %ld bytes wrong of %ld\n", v.name, bad, h * (w / 16) * 16);
    for (int threads : {512, 1024}) {
      for (int blocks : {8, 16, 24, 32, 48, 66, 132, 264}) {
        float t = time_copy(v.k, s, d, sp, dp, w, h, blocks, threads);
        if (t < 0) {
          printf("  %-12s %4d blocks x %4d threads: does not launch\n", v.name, blocks, threads);
          continue;
        }
        printf("  %-12s %4d blocks x %4d threads: %7.1f us %7.1f GB/s read (%5.1f a block)\n",
               v.name, blocks, threads, t * 1e3, bytes / t / 1e6, bytes / t / 1e6 / blocks);
      }
    }
  }
  return 0;
}
