// Odd-K GEMM (NN, bf16) read in place: a timing and correctness probe for issue 14.
//
// TMA reads only rows whose stride is whole 16-byte units, so the runtime copies an odd-K A
// (M x K, K-major) into padded rows before the GEMM. Rows 8 apart are 16·K bytes apart, a
// multiple of 16, so each row residue s (rows 8q + s) is a tensor TMA can read: its own map,
// based at the first column c_s >= -7 where the row's address is 16-byte aligned (c_s < 0
// reads the previous row's tail, which meets zero rows of B). A box can only start at such
// an aligned column, so residue s reads k windows [c_s + 64t, c_s + 64t + 64): each residue
// its own shift. B (K x N, N contiguous) is MN-major in shared memory, where k is the row, so
// the shift moves the wgmma's B descriptor by c_s + 8 rows of 128 bytes into a slab of 72
// rows (a stage of 64 rows [64t - 8, 64t + 56) and the next stage's first 8; a guard after
// the ring repeats stage 0's first 8). Each consumer warpgroup's 64 rows share one residue,
// so a block's 128 rows are rows 8q + s of two residues; C is written through a 3-d map
// (n, s, q). Not a kernel the compiler makes: it measures whether the scheme pays.
//
//   nvcc -O3 -gencode arch=compute_90a,code=sm_90a -o /tmp/oddk bench/oddk_residue_probe.cu -lcuda
//   (add -DPROBE_SLAB=1 for the slab variants)
//   /tmp/oddk M N K [reps] [ring|slab|nt-ring|nt-slab] [baseoff]
#ifdef __CUDACC_RTC__
// Only a syntax check of the device code through NVRTC (no host headers there).
#include <cuda_bf16.h>
typedef unsigned long long uint64_t;
typedef unsigned int uint32_t;
struct alignas(64) CUtensorMap { unsigned long long opaque[16]; };
#else
#include <cuda.h>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <vector>
#include <random>
#include <algorithm>
#include <string>
#include "probe_check.cuh"
#endif

constexpr int STAGES = 4;
constexpr int RING_ROWS = STAGES * 64 + 8;       // per 64-column chunk of B
constexpr int CHUNK_BYTES = RING_ROWS * 128;     // 33792
constexpr int A_STAGE = 2 * 8192;                // two consumers' 64 x 64 tiles
constexpr int A_BYTES = STAGES * A_STAGE;        // 65536
constexpr int B_BYTES = 4 * CHUNK_BYTES;         // 135168
constexpr int SCRATCH = 2 * 8192;                // a 64 x 64 quarter a consumer
constexpr int SMEM = A_BYTES + B_BYTES + SCRATCH + 128;

struct AMaps { CUtensorMap m[8]; };
struct Shifts { int off[8]; };

__device__ __forceinline__ uint32_t sa(const void* p) { return (uint32_t)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void mbar_init(uint64_t* b, int n) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(sa(b)), "r"(n) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(uint64_t* b, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(sa(b)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* b) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(sa(b)) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t* b, uint32_t parity) {
  asm volatile("{\n.reg .pred p;\nW:\nmbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n@!p bra W;\n}\n"
               ::"r"(sa(b)), "r"(parity) : "memory");
}
__device__ __forceinline__ void tma_load(void* dst, const CUtensorMap* m, uint64_t* bar, int c0, int c1) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
               ::"r"(sa(dst)), "l"(m), "r"(c0), "r"(c1), "r"(sa(bar)) : "memory");
}
__device__ __forceinline__ void tma_store3(const CUtensorMap* m, const void* src, int c0, int c1, int c2) {
  asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%1, %2, %3}], [%4];"
               ::"l"(m), "r"(c0), "r"(c1), "r"(c2), "r"(sa(src)) : "memory");
}
__device__ __forceinline__ uint64_t desc(const void* p, uint32_t lbo, int baseoff) {
  uint64_t a = sa(p);
  uint64_t d = ((a & 0x3FFFF) >> 4) | ((uint64_t)((lbo >> 4) & 0x3FFF) << 16) | ((uint64_t)(1024 >> 4) << 32) | (1ull << 62);
  if (baseoff) d |= (uint64_t)((a >> 7) & 7) << 49;
  return d;
}
__device__ __forceinline__ void wgmma_m64n256k16(float* d, uint64_t da, uint64_t db) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\nwgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, %128, %129, p, 1, 1, 0, 1;\n}\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
               : "l"(da), "l"(db), "r"(1));
}


// One k step of a consumer warpgroup: four m64n256k16 over its 64-row A tile (K-major) and B
// from row `b_rows` of its stage (MN-major, 64-column blocks `lbo` bytes apart), then the
// stage released by each warp.
__device__ __forceinline__ void k_step(float* acc, unsigned char* a_tile, unsigned char* b_rows,
                                       uint32_t lbo, int baseoff, uint64_t* empty, int lane) {
#pragma unroll
  for (int i = 0; i < 128; ++i) asm volatile("" : "+f"(acc[i])::"memory");
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
  for (int j = 0; j < 4; ++j)
    wgmma_m64n256k16(acc, desc(a_tile + 32 * j, 16, 0), desc(b_rows + 16 * j * 128, lbo, baseoff));
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
  asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
#pragma unroll
  for (int i = 0; i < 128; ++i) asm volatile("" : "+f"(acc[i])::"memory");
  __syncwarp();
  if (lane == 0) mbar_arrive(empty);
}

// The stages' barriers (full: the producer's arrival and the TMA bytes; empty: one arrival
// per consumer warp), then this block's rounds of the persistent tile loop.
__device__ __forceinline__ int setup(uint64_t* full, uint64_t* empty, int stages, int tiles) {
  if (threadIdx.x == 0) {
    for (int s = 0; s < stages; ++s) { mbar_init(&full[s], 1); mbar_init(&empty[s], 8); }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  return (tiles - (int)blockIdx.x + gridDim.x - 1) / gridDim.x;
}

// The shipped kernel's tile order: groups of 16 row tiles, columns outermost in a group.
__device__ __forceinline__ void place(int round, int tiles_m, int tiles_n, int& bx, int& by) {
  int tile = blockIdx.x + round * gridDim.x;
  int group = tile / (16 * tiles_n);
  int rows = min(tiles_m - group * 16, 16);
  int idx = tile % (16 * tiles_n);
  bx = idx / rows;
  by = group * 16 + idx % rows;
}

// C rows 8q + s of one consumer's 64 x 256 accumulator, in four 64-column quarters through
// its 8 KiB of scratch and a 3-d map (n, s, q) of C.
__device__ __forceinline__ void epilogue(float* acc, unsigned char* myscr, const CUtensorMap* cmap, int bx, int s,
                                         int q0, int w, int lt, int wp, int lane) {
#pragma unroll
  for (int qt = 0; qt < 4; ++qt) {
    if (lt == 0) asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
    asm volatile("bar.sync %0, 128;" ::"r"(1 + w) : "memory");
#pragma unroll
    for (int i = 0; i < 8; ++i) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = wp * 16 + (lane >> 2) + 8 * h;
        const int col = 8 * i + 2 * (lane & 3);
        __nv_bfloat162 v = __floats2bfloat162_rn(acc[32 * qt + 4 * i + 2 * h], acc[32 * qt + 4 * i + 2 * h + 1]);
        const int byte = row * 128 + ((((col >> 3) ^ (row & 7))) << 4) + (col & 7) * 2;
        *(__nv_bfloat162*)(myscr + byte) = v;
      }
    }
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    asm volatile("bar.sync %0, 128;" ::"r"(1 + w) : "memory");
    if (lt == 0) {
      tma_store3(cmap, myscr, bx * 256 + 64 * qt, s, q0);
      asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    }
  }
}

#if !PROBE_SLAB  // one kernel a binary: NVRTC 13.0 crashes on both in one module
__global__ void __launch_bounds__(384, 1)
oddk(const __grid_constant__ AMaps am, const __grid_constant__ CUtensorMap bmap,
     const __grid_constant__ CUtensorMap bguard, const __grid_constant__ CUtensorMap cmap,
     Shifts sh, int tiles_m, int tiles_n, int T, int baseoff) {
  extern __shared__ __align__(1024) unsigned char sm[];
  unsigned char* A_s = sm;
  unsigned char* B_s = sm + A_BYTES;
  unsigned char* scr = sm + A_BYTES + B_BYTES;
  uint64_t* full = (uint64_t*)(sm + A_BYTES + B_BYTES + SCRATCH);
  uint64_t* empty = full + STAGES;
  const int tid = threadIdx.x;
  const int rounds = setup(full, empty, STAGES, tiles_m * tiles_n);
  if (tid >= 256) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 56;");
    if (tid == 256) {
      int g = 0;
      auto load_b = [&](int st, int col0, int row0) {
        for (int c = 0; c < 4; ++c) {
          tma_load(B_s + c * CHUNK_BYTES + st * 8192, &bmap, &full[st], col0 + 64 * c, row0);
          if (st == 0) tma_load(B_s + c * CHUNK_BYTES + STAGES * 8192, &bguard, &full[st], col0 + 64 * c, row0);
        }
      };
      for (int r = 0; r < rounds; ++r) {
        int bx, by;
        place(r, tiles_m, tiles_n, bx, by);
        const int rg = by & 3, q0 = (by >> 2) * 64;
        for (int t = 0; t < T; ++t, ++g) {
          const int st = g & (STAGES - 1);
          mbar_wait(&empty[st], ((g / STAGES) + 1) & 1);
          mbar_expect_tx(&full[st], A_STAGE + 32768 + (st == 0 ? 4096 : 0));
          for (int w = 0; w < 2; ++w) tma_load(A_s + st * A_STAGE + w * 8192, &am.m[2 * rg + w], &full[st], 64 * t, q0);
          load_b(st, bx * 256, 64 * t - 8);
        }
      }
      // The last step reads 8 rows of the stage after it: give it zeros (rows -8..-1).
      const int st = g & (STAGES - 1);
      mbar_wait(&empty[st], ((g / STAGES) + 1) & 1);
      mbar_expect_tx(&full[st], 32768 + (st == 0 ? 4096 : 0));
      load_b(st, 0, -8);
    }
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 224;");
    const int w = tid >> 7, lt = tid & 127, wp = lt >> 5, lane = lt & 31;
    unsigned char* myscr = scr + w * 8192;
    int g = 0;
    for (int r = 0; r < rounds; ++r) {
      int bx, by;
      place(r, tiles_m, tiles_n, bx, by);
      const int s = 2 * (by & 3) + w, q0 = (by >> 2) * 64;
      const int off = sh.off[s];
      float acc[128];
#pragma unroll
      for (int i = 0; i < 128; ++i) acc[i] = 0.f;
      for (int t = 0; t < T; ++t, ++g) {
        const int st = g & (STAGES - 1);
        mbar_wait(&full[st], (g / STAGES) & 1);
        mbar_wait(&full[(g + 1) & (STAGES - 1)], ((g + 1) / STAGES) & 1);
        k_step(acc, A_s + st * A_STAGE + w * 8192, B_s + st * 8192 + off * 128, CHUNK_BYTES, baseoff,
               &empty[st], lane);
      }
      epilogue(acc, myscr, &cmap, bx, s, q0, w, lt, wp, lane);
    }
    if (lt == 0) asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
  }
}


#else
// The simpler form: one residue a block (128 rows 8q + s), B in 72-row stages [64t - 8,
// 64t + 64) so no step reads past its own stage, three stages (four do not fit beside the
// epilogue's scratch).
constexpr int S3 = 3;
constexpr int SLAB_CHUNK = 72 * 128;                // 9216, 9 KiB-aligned steps
constexpr int SLAB_A = 16384, SLAB_B = 4 * SLAB_CHUNK;
constexpr int SLAB_SMEM = S3 * (SLAB_A + SLAB_B) + SCRATCH + 128;

__global__ void __launch_bounds__(384, 1)
oddk_slab(const __grid_constant__ AMaps am, const __grid_constant__ CUtensorMap bmap,
          const __grid_constant__ CUtensorMap cmap, Shifts sh, int tiles_m, int tiles_n, int T) {
  extern __shared__ __align__(1024) unsigned char sm[];
  unsigned char* A_s = sm;
  unsigned char* B_s = sm + S3 * SLAB_A;
  unsigned char* scr = sm + S3 * (SLAB_A + SLAB_B);
  uint64_t* full = (uint64_t*)(scr + SCRATCH);
  uint64_t* empty = full + S3;
  const int tid = threadIdx.x;
  const int rounds = setup(full, empty, S3, tiles_m * tiles_n);
  if (tid >= 256) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 56;");
    if (tid == 256) {
      int g = 0;
      for (int r = 0; r < rounds; ++r) {
        int bx, by;
        place(r, tiles_m, tiles_n, bx, by);
        const int s = by & 7, q0 = (by >> 3) * 128;
        for (int t = 0; t < T; ++t, ++g) {
          const int st = g % S3;
          mbar_wait(&empty[st], ((g / S3) + 1) & 1);
          mbar_expect_tx(&full[st], SLAB_A + SLAB_B);
          tma_load(A_s + st * SLAB_A, &am.m[s], &full[st], 64 * t, q0);
          for (int c = 0; c < 4; ++c)
            tma_load(B_s + st * SLAB_B + c * SLAB_CHUNK, &bmap, &full[st], bx * 256 + 64 * c, 64 * t - 8);
        }
      }
    }
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 224;");
    const int w = tid >> 7, lt = tid & 127, wp = lt >> 5, lane = lt & 31;
    unsigned char* myscr = scr + w * 8192;
    int g = 0;
    for (int r = 0; r < rounds; ++r) {
      int bx, by;
      place(r, tiles_m, tiles_n, bx, by);
      const int s = by & 7, q0 = (by >> 3) * 128 + 64 * w;
      const int off = sh.off[s];
      float acc[128];
#pragma unroll
      for (int i = 0; i < 128; ++i) acc[i] = 0.f;
      for (int t = 0; t < T; ++t, ++g) {
        const int st = g % S3;
        mbar_wait(&full[st], (g / S3) & 1);
        k_step(acc, A_s + st * SLAB_A + w * 8192, B_s + st * SLAB_B + off * 128, SLAB_CHUNK, 0,
               &empty[st], lane);
      }
      epilogue(acc, myscr, &cmap, bx, s, q0, w, lt, wp, lane);
    }
    if (lt == 0) asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
  }
}

#endif

// NT's B (N x K, odd K) written transposed (K x N): B then reads as NN's does.
__global__ void transpose_bf16(const unsigned short* __restrict__ src, unsigned short* __restrict__ dst, int N, int K) {
  __shared__ unsigned short tile[64][66];
  const int k0 = blockIdx.x * 64, n0 = blockIdx.y * 64;
  for (int i = threadIdx.x; i < 4096; i += 256) {
    const int n = i / 64, k = i % 64;
    tile[k][n] = (k0 + k < K) ? src[(size_t)(n0 + n) * K + k0 + k] : (unsigned short)0;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < 512; i += 256) {
    const int k = i / 8, v = i % 8;
    if (k0 + k >= K) continue;
    uint4 val;
    unsigned int* w = &val.x;
    for (int e = 0; e < 4; ++e) w[e] = (unsigned int)tile[k][8 * v + 2 * e] | ((unsigned int)tile[k][8 * v + 2 * e + 1] << 16);
    *(uint4*)&dst[(size_t)(k0 + k) * N + n0 + 8 * v] = val;
  }
}

#ifndef __CUDACC_RTC__
typedef CUresult (*EncodeFn)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                             const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                             CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
static EncodeFn encode_fn() {
  void* f = nullptr;
  cudaDriverEntryPointQueryResult q;
  CHECK(cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &f, cudaEnableDefault, &q));
  return (EncodeFn)f;
}
static void encode(CUtensorMap* m, void* base, int rank, const cuuint64_t* dims, const cuuint64_t* strides,
                   const cuuint32_t* box) {
  cuuint32_t es[3] = {1, 1, 1};
  CUresult r = encode_fn()(m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, rank, base, dims, strides, box, es,
                           CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                           CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) { fprintf(stderr, "cuTensorMapEncodeTiled failed (%d)\n", (int)r); exit(1); }
}

int main(int argc, char** argv) {
  const int M = argc > 1 ? atoi(argv[1]) : 4096, N = argc > 2 ? atoi(argv[2]) : 4096;
  const int K = argc > 3 ? atoi(argv[3]) : 4095, reps = argc > 4 ? atoi(argv[4]) : 30;
  const std::string variant = argc > 5 ? argv[5] : "ring";   // ring | slab | nt-ring | nt-slab
  const int baseoff = argc > 6 ? atoi(argv[6]) : 0;
  const bool slab = variant.find("slab") != std::string::npos, nt = variant.rfind("nt-", 0) == 0;
  if (M % 1024 || N % 256 || K < 16) { fprintf(stderr, "M must be a multiple of 1024, N of 256\n"); return 1; }
  std::vector<__nv_bfloat16> ha((size_t)M * K), hb((size_t)K * N);   // hb: K x N (NN) or N x K (NT)
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (auto& x : ha) x = __float2bfloat16(u(rng));
  for (auto& x : hb) x = __float2bfloat16(u(rng));
  __nv_bfloat16 *a, *b, *bt = nullptr, *c;
  CHECK(cudaMalloc(&a, ha.size() * 2));
  CHECK(cudaMalloc(&b, hb.size() * 2));
  CHECK(cudaMalloc(&c, (size_t)M * N * 2));
  if (nt) CHECK(cudaMalloc(&bt, hb.size() * 2));
  CHECK(cudaMemcpy(a, ha.data(), ha.size() * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(b, hb.data(), hb.size() * 2, cudaMemcpyHostToDevice));
  // Residue maps of A: residue s from column c_s, the first column >= -7 where row s is
  // 16-byte aligned (0 for s = 0, whose row 0 has nothing before it).
  AMaps am;
  Shifts sh;
  int cmin = 0;
  for (int s = 0; s < 8; ++s) {
    int d = (int)((8 - (long long)s * K % 8) % 8);
    int cs = (s == 0 || d == 0) ? 0 : d - 8;
    cmin = std::min(cmin, cs);
    sh.off[s] = cs + 8;
    cuuint64_t dims[2] = {(cuuint64_t)(K - cs), (cuuint64_t)((M - s + 7) / 8)};
    cuuint64_t strides[1] = {(cuuint64_t)8 * K * 2};
    cuuint32_t box[2] = {64, (cuuint32_t)(slab ? 128 : 64)};
    encode(&am.m[s], a + (long long)s * K + cs, 2, dims, strides, box);
  }
  CUtensorMap bmap, bguard, cmap;
  {
    cuuint64_t dims[2] = {(cuuint64_t)N, (cuuint64_t)K};
    cuuint64_t strides[1] = {(cuuint64_t)N * 2};
    cuuint32_t box[2] = {64, (cuuint32_t)(slab ? 72 : 64)}, gbox[2] = {64, 8};
    encode(&bmap, nt ? bt : b, 2, dims, strides, box);
    encode(&bguard, nt ? bt : b, 2, dims, strides, gbox);
    cuuint64_t cd[3] = {(cuuint64_t)N, 8, (cuuint64_t)M / 8};
    cuuint64_t cs[2] = {(cuuint64_t)N * 2, (cuuint64_t)N * 16};
    cuuint32_t cb[3] = {64, 1, 64};
    encode(&cmap, c, 3, cd, cs, cb);
  }
  // ring: the last step reads 8 rows of the stage after it, which must lie past K (the next
  // tile's zeros). slab: each window lies in its own stage.
  const int T = slab ? (K - cmin + 63) / 64 : (K + 8 + 63) / 64;
  const int tiles_m = M / 128, tiles_n = N / 256, grid = std::min(132, tiles_m * tiles_n);
#if PROBE_SLAB
  if (!slab) { fprintf(stderr, "this binary runs the slab variants (built with -DPROBE_SLAB=1)\n"); return 1; }
  CHECK(cudaFuncSetAttribute(oddk_slab, cudaFuncAttributeMaxDynamicSharedMemorySize, SLAB_SMEM));
#else
  if (slab) { fprintf(stderr, "this binary runs the ring variants (build with -DPROBE_SLAB=1 for slab)\n"); return 1; }
  CHECK(cudaFuncSetAttribute(oddk, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM));
#endif
  size_t flush_bytes = 512ull << 20;
  void* flush;
  CHECK(cudaMalloc(&flush, flush_bytes));
  cudaEvent_t e0, e1, e2;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  CHECK(cudaEventCreate(&e2));
  std::vector<float> ms, copy_ms;
  for (int i = 0; i < reps + 3; ++i) {
    CHECK(cudaMemsetAsync(flush, i, flush_bytes));
    CHECK(cudaEventRecord(e0));
    if (nt) transpose_bf16<<<dim3((K + 63) / 64, N / 64), 256>>>((const unsigned short*)b, (unsigned short*)bt, N, K);
    CHECK(cudaEventRecord(e1));
#if PROBE_SLAB
    oddk_slab<<<grid, 384, SLAB_SMEM>>>(am, bmap, cmap, sh, tiles_m, tiles_n, T);
#else
    oddk<<<grid, 384, SMEM>>>(am, bmap, bguard, cmap, sh, tiles_m, tiles_n, T, baseoff);
#endif
    CHECK(cudaEventRecord(e2));
    CHECK(cudaEventSynchronize(e2));
    CHECK(cudaGetLastError());
    float t, tc;
    CHECK(cudaEventElapsedTime(&t, e0, e2));
    CHECK(cudaEventElapsedTime(&tc, e0, e1));
    if (i >= 3) { ms.push_back(t); copy_ms.push_back(tc); }
  }
  double mean = 0, copy_mean = 0;
  for (size_t i = 0; i < ms.size(); ++i) { mean += ms[i]; copy_mean += copy_ms[i]; }
  mean /= ms.size();
  copy_mean /= ms.size();
  std::sort(ms.begin(), ms.end());
  std::vector<__nv_bfloat16> hc((size_t)M * N);
  CHECK(cudaMemcpy(hc.data(), c, hc.size() * 2, cudaMemcpyDeviceToHost));
  // Sampled check against an f64 dot product, every residue and the first and last rows.
  double num = 0, den = 0, worst = 0;
  std::uniform_int_distribution<int> rm(0, M - 1), rn(0, N - 1);
  for (int i = 0; i < 4096; ++i) {
    int m = i < 16 ? (i < 8 ? i : M - 16 + i) : rm(rng), n = rn(rng);
    double ref = 0;
    for (int k = 0; k < K; ++k) {
      const float bv = __bfloat162float(nt ? hb[(size_t)n * K + k] : hb[(size_t)k * N + n]);
      ref += (double)__bfloat162float(ha[(size_t)m * K + k]) * (double)bv;
    }
    double got = __bfloat162float(hc[(size_t)m * N + n]);
    num += (got - ref) * (got - ref);
    den += ref * ref;
    worst = std::max(worst, fabs(got - ref));
  }
  const double flops = 2.0 * M * N * K;
  printf("oddk %s %dx%dx%d T=%d cmin=%d baseoff=%d: mean %.1f us (%.1f TFLOP/s; transposing copy %.1f us), best %.1f us, rel err %.2e, worst abs %.3f\n",
         variant.c_str(), M, N, K, T, cmin, baseoff, mean * 1e3, flops / (mean * 1e-3) / 1e12, copy_mean * 1e3,
         ms[0] * 1e3, sqrt(num / den), worst);
  return 0;
}
#endif
