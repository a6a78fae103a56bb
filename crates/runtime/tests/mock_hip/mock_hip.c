/* A stand-in for ROCm's libamdhip64.so, for testing the runtime's HIP backend on machines
 * without ROCm or an AMD GPU (tests/hip_mock.rs builds it and points TILELANG_HIP_LIB at it).
 *
 * It implements exactly the HIP entry points the backend resolves, with the signatures of
 * hip_runtime_api.h, and checks what the real runtime checks and what a mistake on our side
 * would break: hipInit first, device ordinals, pointers inside live allocations of the current
 * device, memcpy directions, launch shapes, no `extra` argument, recorded events. "Device
 * memory" is anonymous host memory; everything is synchronous.
 *
 * Code objects: the real runtime reads kernel names and parameter sizes from the ELF's
 * metadata. The mock accepts an ELF magic followed by a text manifest instead:
 *     "\x7fELF\nmock-hip-code-object\nkernel NAME SIG\n...end\n"
 * where SIG has one letter per parameter: p (pointer, 8 bytes), i (int32), l (int64),
 * f (float), d (double). A launch copies each parameter's bytes through the kernelParams
 * array, as the runtime does, and records them with the grid and block; `tl_kernel_axpy`
 * (pppfi: x, y, out, alpha, N) is also run, on the elements its grid covers.
 *
 * A real AMDGPU code object (as clang links it) loads too: its kernels are the STT_FUNC symbols
 * of its .symtab that have a `<name>.kd` kernel descriptor. Their parameter layout lives in
 * msgpack metadata the mock does not read, so their launches record the grid and block only.
 *
 * Fills of 64 MiB or more (the cache-flush buffer, the 2 GiB tensors of the buffer-range test)
 * are checked and counted but not written, to keep the test's memory small; fresh allocations
 * are zero already.
 *
 * Test hooks: mock_hip_count(what) and mock_hip_last_launch(...). */
#include <elf.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

typedef int hipError_t;
typedef void *hipStream_t;

enum {
  OK = 0, INVALID_VALUE = 1, NOT_INITIALIZED = 3, INVALID_CONFIGURATION = 9,
  INVALID_MEMCPY_DIRECTION = 21, INVALID_DEVICE = 101, INVALID_IMAGE = 200,
  INVALID_HANDLE = 400, NOT_FOUND = 500, ILLEGAL_ADDRESS = 700
};

/* hipDeviceProp_tR0600, field for field (hip_runtime_api.h of ROCm 6.0 and later). */
typedef struct {
  char name[256];
  char uuid[16];
  char luid[8];
  unsigned int luidDeviceNodeMask;
  size_t totalGlobalMem;
  size_t sharedMemPerBlock;
  int regsPerBlock;
  int warpSize;
  size_t memPitch;
  int maxThreadsPerBlock;
  int maxThreadsDim[3];
  int maxGridSize[3];
  int clockRate;
  size_t totalConstMem;
  int major;
  int minor;
  size_t textureAlignment;
  size_t texturePitchAlignment;
  int deviceOverlap;
  int multiProcessorCount;
  int kernelExecTimeoutEnabled;
  int integrated;
  int canMapHostMemory;
  int computeMode;
  int maxTexture1D;
  int maxTexture1DMipmap;
  int maxTexture1DLinear;
  int maxTexture2D[2];
  int maxTexture2DMipmap[2];
  int maxTexture2DLinear[3];
  int maxTexture2DGather[2];
  int maxTexture3D[3];
  int maxTexture3DAlt[3];
  int maxTextureCubemap;
  int maxTexture1DLayered[2];
  int maxTexture2DLayered[3];
  int maxTextureCubemapLayered[2];
  int maxSurface1D;
  int maxSurface2D[2];
  int maxSurface3D[3];
  int maxSurface1DLayered[2];
  int maxSurface2DLayered[3];
  int maxSurfaceCubemap;
  int maxSurfaceCubemapLayered[2];
  size_t surfaceAlignment;
  int concurrentKernels;
  int ECCEnabled;
  int pciBusID;
  int pciDeviceID;
  int pciDomainID;
  int tccDriver;
  int asyncEngineCount;
  int unifiedAddressing;
  int memoryClockRate;
  int memoryBusWidth;
  int l2CacheSize;
  int persistingL2CacheMaxSize;
  int maxThreadsPerMultiProcessor;
  int streamPrioritiesSupported;
  int globalL1CacheSupported;
  int localL1CacheSupported;
  size_t sharedMemPerMultiprocessor;
  int regsPerMultiprocessor;
  int managedMemory;
  int isMultiGpuBoard;
  int multiGpuBoardGroupID;
  int hostNativeAtomicSupported;
  int singleToDoublePrecisionPerfRatio;
  int pageableMemoryAccess;
  int concurrentManagedAccess;
  int computePreemptionSupported;
  int canUseHostPointerForRegisteredMem;
  int cooperativeLaunch;
  int cooperativeMultiDeviceLaunch;
  size_t sharedMemPerBlockOptin;
  int pageableMemoryAccessUsesHostPageTables;
  int directManagedMemAccessFromHost;
  int maxBlocksPerMultiProcessor;
  int accessPolicyMaxWindowSize;
  size_t reservedSharedMemPerBlock;
  int hostRegisterSupported;
  int sparseHipArraySupported;
  int hostRegisterReadOnlySupported;
  int timelineSemaphoreInteropSupported;
  int memoryPoolsSupported;
  int gpuDirectRDMASupported;
  unsigned int gpuDirectRDMAFlushWritesOptions;
  int gpuDirectRDMAWritesOrdering;
  unsigned int memoryPoolSupportedHandleTypes;
  int deferredMappingHipArraySupported;
  int ipcEventSupported;
  int clusterLaunch;
  int unifiedFunctionPointers;
  int reserved[63];
  int hipReserved[32];
  char gcnArchName[256];
  size_t maxSharedMemoryPerMultiProcessor;
  int clockInstructionRate;
  unsigned int arch; /* hipDeviceArch_t: 17 one-bit fields */
  unsigned int *hdpMemFlushCntl;
  unsigned int *hdpRegFlushCntl;
  int cooperativeMultiDeviceUnmatchedFunc;
  int cooperativeMultiDeviceUnmatchedGridDim;
  int cooperativeMultiDeviceUnmatchedBlockDim;
  int cooperativeMultiDeviceUnmatchedSharedMem;
  int isLargeBar;
  int asicRevision;
} hipDeviceProp_tR0600;

/* The numbers ROCm's header gives on x86-64 Linux; the Rust side asserts the same. */
_Static_assert(sizeof(hipDeviceProp_tR0600) == 1472, "hipDeviceProp_tR0600 is 1472 bytes");
_Static_assert(offsetof(hipDeviceProp_tR0600, totalGlobalMem) == 288, "totalGlobalMem");
_Static_assert(offsetof(hipDeviceProp_tR0600, multiProcessorCount) == 388, "multiProcessorCount");
_Static_assert(offsetof(hipDeviceProp_tR0600, l2CacheSize) == 616, "l2CacheSize");
_Static_assert(offsetof(hipDeviceProp_tR0600, gcnArchName) == 1160, "gcnArchName");

/* ---- state ------------------------------------------------------------------------------ */

#define MAX_DEVICES 8
static int inited = 0;
static int ndev = -1;
static char archs[MAX_DEVICES][64];
static __thread int current = 0;

static long long n_launch, n_big_fill, n_event_record, n_event_create, n_event_destroy,
    n_module_load, n_module_unload, n_alloc, n_free, n_sync, n_set_device, max_fill_bytes;

#define MAX_ALLOCS 4096
static struct { uintptr_t base; size_t bytes; size_t mapped; int dev; } allocs[MAX_ALLOCS];

static void discover(void) {
  if (ndev >= 0) return;
  const char *env = getenv("MOCK_HIP_ARCHS");
  if (!env || !*env) env = "gfx950:sramecc+:xnack-";
  char buf[512];
  snprintf(buf, sizeof buf, "%s", env);
  ndev = 0;
  for (char *tok = strtok(buf, ";"); tok && ndev < MAX_DEVICES; tok = strtok(NULL, ";"))
    snprintf(archs[ndev++], sizeof archs[0], "%s", tok);
}

/* The allocation of the current device holding [p, p + bytes), or -1. */
static int find_alloc(uintptr_t p, size_t bytes) {
  for (int i = 0; i < MAX_ALLOCS; i++)
    if (allocs[i].base && p >= allocs[i].base && p + bytes <= allocs[i].base + allocs[i].bytes)
      return allocs[i].dev == current ? i : -1;
  return -1;
}

#define NEED_INIT() do { if (!inited) return NOT_INITIALIZED; } while (0)

/* ---- init and devices ------------------------------------------------------------------- */

hipError_t hipInit(unsigned int flags) {
  if (flags != 0) return INVALID_VALUE;
  discover();
  inited = 1;
  return OK;
}

hipError_t hipGetDeviceCount(int *count) {
  NEED_INIT();
  if (!count) return INVALID_VALUE;
  *count = ndev;
  return OK;
}

hipError_t hipRuntimeGetVersion(int *v) {
  if (!v) return INVALID_VALUE;
  *v = 60443484;
  return OK;
}

hipError_t hipSetDevice(int d) {
  NEED_INIT();
  if (d < 0 || d >= ndev) return INVALID_DEVICE;
  current = d;
  n_set_device++;
  return OK;
}

hipError_t hipGetDevicePropertiesR0600(hipDeviceProp_tR0600 *p, int d) {
  NEED_INIT();
  if (!p) return INVALID_VALUE;
  if (d < 0 || d >= ndev) return INVALID_DEVICE;
  memset(p, 0, sizeof *p);
  const char *a = archs[d];
  int gfx950 = strncmp(a, "gfx950", 6) == 0, gfx942 = strncmp(a, "gfx942", 6) == 0;
  snprintf(p->name, sizeof p->name, "%s",
           gfx950 ? "AMD Instinct MI355X (mock)" : gfx942 ? "AMD Instinct MI300X (mock)"
                                                        : "AMD Instinct MI210 (mock)");
  snprintf(p->gcnArchName, sizeof p->gcnArchName, "%s", a);
  p->totalGlobalMem = (size_t)1 << 34;
  p->sharedMemPerBlock = gfx950 ? 163840 : 65536;
  p->warpSize = 64;
  p->maxThreadsPerBlock = 1024;
  p->maxThreadsDim[0] = p->maxThreadsDim[1] = p->maxThreadsDim[2] = 1024;
  p->maxGridSize[0] = 2147483647;
  p->maxGridSize[1] = p->maxGridSize[2] = 65536;
  p->multiProcessorCount = gfx950 ? 256 : gfx942 ? 304 : 104;
  p->l2CacheSize = 4 << 20;
  p->major = 9;
  p->minor = 4;
  p->asicRevision = 1;
  return OK;
}

static const char *err_name(hipError_t e) {
  switch (e) {
    case OK: return "hipSuccess";
    case INVALID_VALUE: return "hipErrorInvalidValue";
    case NOT_INITIALIZED: return "hipErrorNotInitialized";
    case INVALID_CONFIGURATION: return "hipErrorInvalidConfiguration";
    case INVALID_MEMCPY_DIRECTION: return "hipErrorInvalidMemcpyDirection";
    case INVALID_DEVICE: return "hipErrorInvalidDevice";
    case INVALID_IMAGE: return "hipErrorInvalidImage";
    case INVALID_HANDLE: return "hipErrorInvalidHandle";
    case NOT_FOUND: return "hipErrorNotFound";
    case ILLEGAL_ADDRESS: return "hipErrorIllegalAddress";
    default: return "hipErrorUnknown";
  }
}
const char *hipGetErrorName(hipError_t e) { return err_name(e); }
const char *hipGetErrorString(hipError_t e) {
  switch (e) {
    case INVALID_VALUE: return "invalid argument";
    case NOT_FOUND: return "named symbol not found";
    case INVALID_IMAGE: return "device kernel image is invalid";
    default: return err_name(e);
  }
}

hipError_t hipDeviceSynchronize(void) {
  NEED_INIT();
  n_sync++;
  return OK;
}

/* ---- memory ----------------------------------------------------------------------------- */

hipError_t hipMalloc(void **ptr, size_t size) {
  NEED_INIT();
  if (!ptr || size == 0) return INVALID_VALUE;
  size_t mapped = (size + 4095) & ~(size_t)4095;
  void *p = mmap(NULL, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                 -1, 0);
  if (p == MAP_FAILED) return 2; /* hipErrorOutOfMemory */
  for (int i = 0; i < MAX_ALLOCS; i++)
    if (!allocs[i].base) {
      allocs[i].base = (uintptr_t)p;
      allocs[i].bytes = size;
      allocs[i].mapped = mapped;
      allocs[i].dev = current;
      *ptr = p;
      n_alloc++;
      return OK;
    }
  munmap(p, mapped);
  return 2;
}

hipError_t hipFree(void *ptr) {
  NEED_INIT();
  if (!ptr) return OK;
  for (int i = 0; i < MAX_ALLOCS; i++)
    if (allocs[i].base == (uintptr_t)ptr) {
      munmap(ptr, allocs[i].mapped);
      allocs[i].base = 0;
      n_free++;
      return OK;
    }
  return INVALID_VALUE;
}

hipError_t hipMemGetInfo(size_t *free_b, size_t *total) {
  NEED_INIT();
  if (!free_b || !total) return INVALID_VALUE;
  *total = (size_t)1 << 34;
  *free_b = (size_t)1 << 33;
  return OK;
}

hipError_t hipMemcpy(void *dst, const void *src, size_t n, int kind) {
  NEED_INIT();
  if (n == 0) return OK;
  if (!dst || !src) return INVALID_VALUE;
  switch (kind) {
    case 1: if (find_alloc((uintptr_t)dst, n) < 0) return INVALID_VALUE; break;
    case 2: if (find_alloc((uintptr_t)src, n) < 0) return INVALID_VALUE; break;
    case 3:
      if (find_alloc((uintptr_t)dst, n) < 0 || find_alloc((uintptr_t)src, n) < 0)
        return INVALID_VALUE;
      break;
    default: return INVALID_MEMCPY_DIRECTION;
  }
  memmove(dst, src, n);
  return OK;
}

#define BIG_FILL ((size_t)64 << 20)

static int big_fill(size_t bytes) {
  if ((long long)bytes > max_fill_bytes) max_fill_bytes = (long long)bytes;
  if (bytes >= BIG_FILL) {
    n_big_fill++;
    return 1;
  }
  return 0;
}

hipError_t hipMemset(void *dst, int value, size_t n) {
  NEED_INIT();
  if (n == 0) return OK;
  if (find_alloc((uintptr_t)dst, n) < 0) return INVALID_VALUE;
  if (!big_fill(n)) memset(dst, value, n);
  return OK;
}

hipError_t hipMemsetD16(void *dst, unsigned short value, size_t count) {
  NEED_INIT();
  if (count == 0) return OK;
  if (find_alloc((uintptr_t)dst, count * 2) < 0) return INVALID_VALUE;
  if (!big_fill(count * 2))
    for (size_t i = 0; i < count; i++) memcpy((char *)dst + 2 * i, &value, 2);
  return OK;
}

hipError_t hipMemsetD32(void *dst, int value, size_t count) {
  NEED_INIT();
  if (count == 0) return OK;
  if (find_alloc((uintptr_t)dst, count * 4) < 0) return INVALID_VALUE;
  if (!big_fill(count * 4))
    for (size_t i = 0; i < count; i++) memcpy((char *)dst + 4 * i, &value, 4);
  return OK;
}

/* ---- modules and launches --------------------------------------------------------------- */

#define MAX_KERNELS 16
struct module;
struct func { char name[128]; char sig[32]; struct module *mod; };
struct module { int loaded; int nk; struct func k[MAX_KERNELS]; };

static const char MARKER[] = "\x7f" "ELF\nmock-hip-code-object\n";

#ifndef EM_AMDGPU
#define EM_AMDGPU 224
#endif

static int has_symbol(const Elf64_Sym *syms, size_t n, const char *strtab, size_t strsz,
                      const char *name, int type) {
  for (size_t i = 0; i < n; i++)
    if (syms[i].st_name < strsz && ELF64_ST_TYPE(syms[i].st_info) == type &&
        strcmp(strtab + syms[i].st_name, name) == 0)
      return 1;
  return 0;
}

/* The kernels of a real AMDGPU ELF: functions with a kernel descriptor. */
static hipError_t load_real_elf(struct module *m, const unsigned char *img) {
  const Elf64_Ehdr *eh = (const Elf64_Ehdr *)img;
  if (eh->e_ident[EI_CLASS] != ELFCLASS64 || eh->e_machine != EM_AMDGPU ||
      eh->e_shentsize != sizeof(Elf64_Shdr) || eh->e_shoff == 0)
    return INVALID_IMAGE;
  const Elf64_Shdr *sh = (const Elf64_Shdr *)(img + eh->e_shoff);
  for (int i = 0; i < eh->e_shnum; i++) {
    if (sh[i].sh_type != SHT_SYMTAB || sh[i].sh_link >= eh->e_shnum) continue;
    const Elf64_Sym *syms = (const Elf64_Sym *)(img + sh[i].sh_offset);
    size_t n = sh[i].sh_size / sizeof(Elf64_Sym);
    const char *strtab = (const char *)img + sh[sh[i].sh_link].sh_offset;
    size_t strsz = sh[sh[i].sh_link].sh_size;
    for (size_t j = 0; j < n && m->nk < MAX_KERNELS; j++) {
      if (ELF64_ST_TYPE(syms[j].st_info) != STT_FUNC || syms[j].st_name >= strsz) continue;
      const char *name = strtab + syms[j].st_name;
      char kd[160];
      snprintf(kd, sizeof kd, "%s.kd", name);
      if (!has_symbol(syms, n, strtab, strsz, kd, STT_OBJECT)) continue;
      snprintf(m->k[m->nk].name, sizeof m->k[0].name, "%s", name);
      m->k[m->nk].sig[0] = 0; /* unknown: nothing is read at launch */
      m->k[m->nk].mod = m;
      m->nk++;
    }
  }
  return m->nk > 0 ? OK : INVALID_IMAGE;
}

hipError_t hipModuleLoadData(struct module **out, const void *image) {
  NEED_INIT();
  if (!out || !image) return INVALID_VALUE;
  if ((uintptr_t)image % 8) return INVALID_VALUE; /* ELF images are 8-byte aligned */
  const char *s = image;
  if (memcmp(s, "\x7f" "ELF", 4) != 0) return INVALID_IMAGE;
  struct module *m = calloc(1, sizeof *m);
  if (!m) return 2;
  if (strncmp(s, MARKER, sizeof MARKER - 1) != 0) {
    hipError_t rc = load_real_elf(m, image);
    if (rc != OK) {
      free(m);
      return rc;
    }
    m->loaded = 1;
    *out = m;
    n_module_load++;
    return OK;
  }
  s += sizeof MARKER - 1;
  for (;;) {
    char name[128], sig[32];
    int used = 0;
    if (strncmp(s, "end\n", 4) == 0) break;
    if (m->nk >= MAX_KERNELS || sscanf(s, "kernel %127s %31s\n%n", name, sig, &used) != 2 ||
        used == 0) {
      free(m);
      return INVALID_IMAGE;
    }
    snprintf(m->k[m->nk].name, sizeof m->k[0].name, "%s", name);
    snprintf(m->k[m->nk].sig, sizeof m->k[0].sig, "%s", sig);
    m->k[m->nk].mod = m;
    m->nk++;
    s += used;
  }
  m->loaded = 1;
  *out = m;
  n_module_load++;
  return OK;
}

hipError_t hipModuleGetFunction(struct func **out, struct module *m, const char *name) {
  NEED_INIT();
  if (!out || !m || !name || !m->loaded) return INVALID_VALUE;
  for (int i = 0; i < m->nk; i++)
    if (strcmp(m->k[i].name, name) == 0) {
      *out = &m->k[i];
      return OK;
    }
  return NOT_FOUND;
}

hipError_t hipModuleUnload(struct module *m) {
  NEED_INIT();
  if (!m || !m->loaded) return INVALID_HANDLE;
  m->loaded = 0; /* kept allocated, so a launch after unload is caught, not a use-after-free */
  n_module_unload++;
  return OK;
}

static struct {
  int valid;
  char name[128];
  unsigned grid[3], block[3], shared;
  int null_stream;
  unsigned char params[256];
  int nparams;
} last;

static size_t param_size(char c) {
  switch (c) {
    case 'p': case 'l': case 'd': return 8;
    case 'i': case 'f': return 4;
    default: return 0;
  }
}

hipError_t hipModuleLaunchKernel(struct func *f, unsigned gx, unsigned gy, unsigned gz,
                                 unsigned bx, unsigned by, unsigned bz, unsigned shared,
                                 hipStream_t stream, void **params, void **extra) {
  NEED_INIT();
  if (!f || !f->mod || !f->mod->loaded) return INVALID_HANDLE;
  if (extra != NULL || params == NULL) return INVALID_VALUE;
  if (gx == 0 || gy == 0 || gz == 0 || bx == 0 || by == 0 || bz == 0 ||
      (unsigned long long)bx * by * bz > 1024 || (unsigned long long)gx * bx > 0xffffffffULL)
    return INVALID_CONFIGURATION;
  /* Read every parameter through its pointer, as the runtime does. */
  size_t off = 0;
  for (const char *c = f->sig; *c; c++) {
    size_t n = param_size(*c);
    if (n == 0 || off + n > sizeof last.params) return INVALID_VALUE;
    memcpy(last.params + off, params[c - f->sig], n);
    if (*c == 'p') {
      uint64_t p;
      memcpy(&p, params[c - f->sig], 8);
      if (find_alloc((uintptr_t)p, 1) < 0) return ILLEGAL_ADDRESS;
    }
    off += n;
  }
  last.valid = 1;
  snprintf(last.name, sizeof last.name, "%s", f->name);
  last.grid[0] = gx; last.grid[1] = gy; last.grid[2] = gz;
  last.block[0] = bx; last.block[1] = by; last.block[2] = bz;
  last.shared = shared;
  last.null_stream = stream == NULL;
  last.nparams = (int)off;
  n_launch++;
  if (strcmp(f->name, "tl_kernel_axpy") == 0 && strcmp(f->sig, "pppfi") == 0) {
    float *x, *y, *out, alpha;
    int32_t n;
    memcpy(&x, params[0], 8);
    memcpy(&y, params[1], 8);
    memcpy(&out, params[2], 8);
    memcpy(&alpha, params[3], 4);
    memcpy(&n, params[4], 4);
    unsigned long long covered = (unsigned long long)gx * bx;
    unsigned long long todo = n < 0 ? 0 : (unsigned long long)n;
    if (covered < todo) todo = covered;
    if (todo > 0 && (find_alloc((uintptr_t)x, todo * 4) < 0 ||
                     find_alloc((uintptr_t)y, todo * 4) < 0 ||
                     find_alloc((uintptr_t)out, todo * 4) < 0))
      return ILLEGAL_ADDRESS;
    for (unsigned long long i = 0; i < todo; i++) out[i] = alpha * x[i] + y[i];
  }
  return OK;
}

/* ---- events ----------------------------------------------------------------------------- */

struct event { double t; int recorded; };

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

hipError_t hipEventCreate(struct event **e) {
  NEED_INIT();
  if (!e) return INVALID_VALUE;
  *e = calloc(1, sizeof **e);
  if (!*e) return 2;
  n_event_create++;
  return OK;
}

hipError_t hipEventRecord(struct event *e, hipStream_t stream) {
  NEED_INIT();
  if (!e || stream != NULL) return INVALID_HANDLE;
  e->t = now_s();
  e->recorded = 1;
  n_event_record++;
  return OK;
}

hipError_t hipEventSynchronize(struct event *e) {
  NEED_INIT();
  return e ? OK : INVALID_HANDLE;
}

hipError_t hipEventElapsedTime(float *ms, struct event *a, struct event *b) {
  NEED_INIT();
  if (!ms || !a || !b || !a->recorded || !b->recorded) return INVALID_HANDLE;
  *ms = (float)((b->t - a->t) * 1e3);
  return OK;
}

hipError_t hipEventDestroy(struct event *e) {
  NEED_INIT();
  if (!e) return INVALID_HANDLE;
  free(e);
  n_event_destroy++;
  return OK;
}

/* ---- test hooks ------------------------------------------------------------------------- */

long long mock_hip_count(const char *what) {
  if (!strcmp(what, "launch")) return n_launch;
  if (!strcmp(what, "big_fill")) return n_big_fill;
  if (!strcmp(what, "max_fill_bytes")) return max_fill_bytes;
  if (!strcmp(what, "event_record")) return n_event_record;
  if (!strcmp(what, "event_create")) return n_event_create;
  if (!strcmp(what, "event_destroy")) return n_event_destroy;
  if (!strcmp(what, "module_load")) return n_module_load;
  if (!strcmp(what, "module_unload")) return n_module_unload;
  if (!strcmp(what, "alloc")) return n_alloc;
  if (!strcmp(what, "free")) return n_free;
  if (!strcmp(what, "sync")) return n_sync;
  if (!strcmp(what, "set_device")) return n_set_device;
  return -1;
}

/* The last launch: returns the number of parameter bytes (or -1 when there was none). */
int mock_hip_last_launch(char *name, int name_cap, unsigned *grid, unsigned *block,
                         unsigned *shared, int *null_stream, unsigned char *params,
                         int params_cap) {
  if (!last.valid) return -1;
  snprintf(name, (size_t)name_cap, "%s", last.name);
  memcpy(grid, last.grid, sizeof last.grid);
  memcpy(block, last.block, sizeof last.block);
  *shared = last.shared;
  *null_stream = last.null_stream;
  int n = last.nparams < params_cap ? last.nparams : params_cap;
  memcpy(params, last.params, (size_t)n);
  return last.nparams;
}
