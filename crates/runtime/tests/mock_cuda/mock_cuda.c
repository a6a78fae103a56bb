/* A stand-in for libcuda.so.1, for testing the runtime's CUDA backend on machines without a
 * GPU (tests/mock_driver.rs builds it and runs the self-test against it).
 *
 * "Device memory" is host memory; everything is synchronous. Modules must be ELF images (as
 * NVRTC's cubins are); launching runs a C model of the few kernels the runtime's self-test uses
 * (tl_rand, tl_kernel_axpy, tl_kernel_reverse), reading their parameters the way the real
 * driver would (one pointer per parameter, to a value of the parameter's type). It checks what
 * the real driver checks and what a packing mistake would break: pointers must lie inside live
 * allocations, dynamic shared memory over 48 KiB needs the function's limit raised, grid and
 * block sizes must be in range. Every other driver function (symbols.txt) is a stub that
 * returns CUDA_ERROR_NOT_SUPPORTED, so cudarc's loader finds all the symbols it expects. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;

enum {
  OK = 0, INVALID_VALUE = 1, OUT_OF_MEMORY = 2, INVALID_IMAGE = 200, INVALID_CONTEXT = 201,
  INVALID_HANDLE = 400, NOT_FOUND = 500, ILLEGAL_ADDRESS = 700, NOT_SUPPORTED = 801
};

struct ctx { int dummy; };
struct stream { int dummy; };
struct module { int loaded; };
struct func { char name[128]; int max_dyn_smem; };
struct event { double t; };

static struct ctx the_ctx;
static struct ctx *current = NULL;

/* Live allocations, to validate kernel pointers. */
#define MAX_ALLOCS 4096
static struct { uintptr_t base; size_t bytes; } allocs[MAX_ALLOCS];

static int in_alloc(uintptr_t p, size_t bytes) {
  for (int i = 0; i < MAX_ALLOCS; i++)
    if (allocs[i].base && p >= allocs[i].base && p + bytes <= allocs[i].base + allocs[i].bytes)
      return 1;
  return 0;
}

CUresult cuInit(unsigned flags) { return flags == 0 ? OK : INVALID_VALUE; }
CUresult cuDriverGetVersion(int *v) { *v = 13000; return OK; }
CUresult cuDeviceGetCount(int *c) { *c = 1; return OK; }
CUresult cuDeviceGet(CUdevice *d, int ordinal) {
  if (ordinal != 0) return 101;
  *d = 0;
  return OK;
}
CUresult cuDeviceGetName(char *name, int len, CUdevice d) {
  (void)d;
  snprintf(name, (size_t)len, "tilelang mock GPU");
  return OK;
}
CUresult cuDeviceGetAttribute(int *v, int a, CUdevice d) {
  (void)d;
  switch (a) {
    case 1: *v = 1024; break;             /* max threads per block */
    case 8: *v = 49152; break;            /* shared memory per block */
    case 16: *v = 4; break;               /* multiprocessors */
    case 38: *v = 1 << 20; break;         /* L2 bytes */
    case 75: *v = 9; break;               /* compute capability */
    case 76: *v = 0; break;
    case 97: *v = 232448; break;          /* shared memory per block, opt-in */
    default: *v = 0; break;
  }
  return OK;
}
CUresult cuDeviceTotalMem_v2(size_t *b, CUdevice d) { (void)d; *b = (size_t)1 << 30; return OK; }
CUresult cuDevicePrimaryCtxRetain(struct ctx **c, CUdevice d) { (void)d; *c = &the_ctx; return OK; }
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d) { (void)d; return OK; }
CUresult cuCtxGetCurrent(struct ctx **c) { *c = current; return OK; }
CUresult cuCtxSetCurrent(struct ctx *c) { current = c; return OK; }
CUresult cuCtxSynchronize(void) { return OK; }

CUresult cuStreamCreate(struct stream **s, unsigned flags) {
  (void)flags;
  if (!current) return INVALID_CONTEXT;
  *s = calloc(1, sizeof(struct stream));
  return OK;
}
CUresult cuStreamSynchronize(struct stream *s) { (void)s; return OK; }
CUresult cuStreamDestroy_v2(struct stream *s) { free(s); return OK; }

CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n) {
  if (!current) return INVALID_CONTEXT;
  if (n == 0) return INVALID_VALUE;
  void *m = malloc(n);
  if (!m) return OUT_OF_MEMORY;
  memset(m, 0xCD, n); /* garbage, as fresh device memory may hold */
  for (int i = 0; i < MAX_ALLOCS; i++)
    if (!allocs[i].base) {
      allocs[i].base = (uintptr_t)m;
      allocs[i].bytes = n;
      *p = (CUdeviceptr)(uintptr_t)m;
      return OK;
    }
  free(m);
  return OUT_OF_MEMORY;
}
CUresult cuMemFree_v2(CUdeviceptr p) {
  for (int i = 0; i < MAX_ALLOCS; i++)
    if (allocs[i].base == (uintptr_t)p) {
      free((void *)allocs[i].base);
      allocs[i].base = 0;
      return OK;
    }
  return INVALID_VALUE;
}
CUresult cuMemGetInfo_v2(size_t *f, size_t *t) { *f = (size_t)1 << 29; *t = (size_t)1 << 30; return OK; }

CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, struct stream *s) {
  (void)s;
  if (!in_alloc((uintptr_t)dst, n)) return INVALID_VALUE;
  memcpy((void *)(uintptr_t)dst, src, n);
  return OK;
}
CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, struct stream *s) {
  (void)s;
  if (!in_alloc((uintptr_t)src, n)) return INVALID_VALUE;
  memcpy(dst, (void *)(uintptr_t)src, n);
  return OK;
}
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, struct stream *s) {
  (void)s;
  if (!in_alloc((uintptr_t)dst, n) || !in_alloc((uintptr_t)src, n)) return INVALID_VALUE;
  memmove((void *)(uintptr_t)dst, (void *)(uintptr_t)src, n);
  return OK;
}
CUresult cuMemsetD8Async(CUdeviceptr p, unsigned char v, size_t n, struct stream *s) {
  (void)s;
  if (!in_alloc((uintptr_t)p, n)) return INVALID_VALUE;
  memset((void *)(uintptr_t)p, v, n);
  return OK;
}
CUresult cuMemsetD16Async(CUdeviceptr p, unsigned short v, size_t n, struct stream *s) {
  (void)s;
  if (p % 2 || !in_alloc((uintptr_t)p, 2 * n)) return INVALID_VALUE;
  for (size_t i = 0; i < n; i++) ((unsigned short *)(uintptr_t)p)[i] = v;
  return OK;
}
CUresult cuMemsetD32Async(CUdeviceptr p, unsigned v, size_t n, struct stream *s) {
  (void)s;
  if (p % 4 || !in_alloc((uintptr_t)p, 4 * n)) return INVALID_VALUE;
  for (size_t i = 0; i < n; i++) ((unsigned *)(uintptr_t)p)[i] = v;
  return OK;
}
CUresult cuMemsetD2D32Async(CUdeviceptr p, size_t pitch, unsigned v, size_t w, size_t h,
                            struct stream *s) {
  (void)s;
  if (p % 4 || pitch % 4 || pitch < 4 * w || h == 0) return INVALID_VALUE;
  if (!in_alloc((uintptr_t)p, pitch * (h - 1) + 4 * w)) return INVALID_VALUE;
  for (size_t r = 0; r < h; r++)
    for (size_t c = 0; c < w; c++) ((unsigned *)(uintptr_t)(p + r * pitch))[c] = v;
  return OK;
}

CUresult cuModuleLoadData(struct module **m, const void *image) {
  if (!current) return INVALID_CONTEXT;
  if (memcmp(image, "\x7f" "ELF", 4) != 0) return INVALID_IMAGE;
  *m = calloc(1, sizeof(struct module));
  (*m)->loaded = 1;
  return OK;
}
CUresult cuModuleUnload(struct module *m) { free(m); return OK; }
CUresult cuModuleGetFunction(struct func **f, struct module *m, const char *name) {
  if (!m || !m->loaded) return INVALID_HANDLE;
  if (strcmp(name, "tl_rand") && strcmp(name, "tl_kernel_axpy") && strcmp(name, "tl_kernel_reverse"))
    return NOT_FOUND;
  *f = calloc(1, sizeof(struct func));
  snprintf((*f)->name, sizeof((*f)->name), "%s", name);
  (*f)->max_dyn_smem = 49152;
  return OK;
}
CUresult cuFuncGetAttribute(int *v, int a, struct func *f) {
  switch (a) {
    case 0: *v = 1024; break;
    case 4: *v = 32; break;
    case 5: case 6: *v = 90; break;
    case 8: *v = f->max_dyn_smem; break;
    default: *v = 0; break;
  }
  return OK;
}
CUresult cuFuncSetAttribute(struct func *f, int a, int v) {
  if (a == 8) {
    if (v < 0 || v > 232448) return INVALID_VALUE;
    f->max_dyn_smem = v;
    return OK;
  }
  return OK;
}

/* The kernels, as C models. */
typedef unsigned long long u64;
static u64 mix(u64 z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}
static double u01(u64 key, u64 ctr) {
  return (double)(mix(key + ctr * 0x9E3779B97F4A7C15ULL) >> 11) * (1.0 / 9007199254740992.0);
}
static unsigned short f32_to_bf16(float f) {
  unsigned x;
  memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((x >> 16) | 0x40u);
  return (unsigned short)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}
static unsigned short f32_to_f16(float f) {
  _Float16 h = (_Float16)f;
  unsigned short b;
  memcpy(&b, &h, 2);
  return b;
}

static CUresult run_rand(void **p, u64 threads) {
  void *out = *(void **)p[0];
  u64 n = *(u64 *)p[1], key = *(u64 *)p[2];
  int mode = *(int *)p[3];
  double a = *(double *)p[4], b = *(double *)p[5];
  int dt = *(int *)p[6];
  size_t elem = dt == 1 ? 8 : dt == 0 ? 4 : 2;
  if (dt < 0 || dt > 3 || mode < 0 || mode > 1) return INVALID_VALUE;
  if (!in_alloc((uintptr_t)out, n * elem)) return ILLEGAL_ADDRESS;
  (void)threads;
  for (u64 i = 0; i < n; i++) {
    double v;
    if (mode == 0) {
      v = a + (b - a) * u01(key, i);
    } else {
      double u1 = 1.0 - u01(key, 2 * i), u2 = u01(key, 2 * i + 1);
      v = a + b * (sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
    }
    switch (dt) {
      case 0: ((float *)out)[i] = (float)v; break;
      case 1: ((double *)out)[i] = v; break;
      case 2: ((unsigned short *)out)[i] = f32_to_f16((float)v); break;
      default: ((unsigned short *)out)[i] = f32_to_bf16((float)v); break;
    }
  }
  return OK;
}

static CUresult run_axpy(void **p, u64 threads) {
  const float *x = *(const float **)p[0], *y = *(const float **)p[1];
  float *out = *(float **)p[2];
  float alpha = *(float *)p[3];
  int n = *(int *)p[4];
  if (n < 0) return INVALID_VALUE;
  size_t bytes = (size_t)n * 4;
  if (n > 0 && (!in_alloc((uintptr_t)x, bytes) || !in_alloc((uintptr_t)y, bytes) ||
                !in_alloc((uintptr_t)out, bytes)))
    return ILLEGAL_ADDRESS;
  for (u64 i = 0; i < threads && i < (u64)n; i++) out[i] = alpha * x[i] + y[i];
  return OK;
}

static CUresult run_reverse(void **p, unsigned blocks, unsigned smem) {
  const float *x = *(const float **)p[0];
  float *out = *(float **)p[1];
  int n = *(int *)p[2];
  const int C = 16384;
  if (smem < (unsigned)C * 4) return ILLEGAL_ADDRESS; /* the kernel would overrun its smem */
  if (!in_alloc((uintptr_t)x, (size_t)blocks * C * 4) || !in_alloc((uintptr_t)out, (size_t)blocks * C * 4) ||
      (u64)n < (u64)blocks * C)
    return ILLEGAL_ADDRESS;
  for (unsigned b = 0; b < blocks; b++)
    for (int j = 0; j < C; j++) out[(size_t)b * C + j] = x[(size_t)b * C + C - 1 - j];
  return OK;
}

CUresult cuLaunchKernel(struct func *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                        unsigned by, unsigned bz, unsigned smem, struct stream *s, void **params,
                        void **extra) {
  (void)s;
  (void)extra;
  if (!current) return INVALID_CONTEXT;
  if (!f || !params) return INVALID_VALUE;
  if (gx == 0 || gy == 0 || gz == 0 || gy > 65535 || gz > 65535) return INVALID_VALUE;
  if (bx * by * bz == 0 || bx * by * bz > 1024) return INVALID_VALUE;
  if (smem > 49152 && (int)smem > f->max_dyn_smem) return INVALID_VALUE;
  u64 threads = (u64)gx * gy * gz * bx * by * bz;
  if (!strcmp(f->name, "tl_rand")) return run_rand(params, threads);
  if (!strcmp(f->name, "tl_kernel_axpy")) {
    if (bx != 256) return INVALID_VALUE; /* __launch_bounds__(256) */
    return run_axpy(params, threads);
  }
  if (!strcmp(f->name, "tl_kernel_reverse")) return run_reverse(params, gx, smem);
  return NOT_FOUND;
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}
CUresult cuEventCreate(struct event **e, unsigned flags) {
  (void)flags;
  *e = calloc(1, sizeof(struct event));
  return OK;
}
CUresult cuEventRecord(struct event *e, struct stream *s) { (void)s; e->t = now_ms(); return OK; }
CUresult cuEventSynchronize(struct event *e) { (void)e; return OK; }
CUresult cuEventQuery(struct event *e) { (void)e; return OK; }
CUresult cuEventElapsedTime(float *ms, struct event *a, struct event *b) {
  *ms = (float)(b->t - a->t);
  return OK;
}
CUresult cuEventDestroy_v2(struct event *e) { free(e); return OK; }

CUresult cuGetErrorName(CUresult r, const char **s) {
  switch (r) {
    case OK: *s = "CUDA_SUCCESS"; break;
    case INVALID_VALUE: *s = "CUDA_ERROR_INVALID_VALUE"; break;
    case ILLEGAL_ADDRESS: *s = "CUDA_ERROR_ILLEGAL_ADDRESS"; break;
    case NOT_FOUND: *s = "CUDA_ERROR_NOT_FOUND"; break;
    default: *s = "CUDA_ERROR_UNKNOWN"; break;
  }
  return OK;
}
CUresult cuGetErrorString(CUresult r, const char **s) {
  (void)r;
  *s = "(mock driver)";
  return OK;
}
