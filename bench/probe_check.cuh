// CHECK(call): a CUDA runtime call that must succeed, else the probe prints where and exits.
// Shared by the standalone nvcc probes in bench/ (copy_sms_probe.cu, copy_full_probe.cu).
#pragma once
#include <cstdio>
#include <cstdlib>

#define CHECK(x)                                                                     \
  do {                                                                               \
    cudaError_t e_ = (x);                                                            \
    if (e_ != cudaSuccess) {                                                         \
      fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_));    \
      exit(1);                                                                       \
    }                                                                                \
  } while (0)
