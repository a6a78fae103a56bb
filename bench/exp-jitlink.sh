#!/usr/bin/env bash
# Runs on the GPU machine: the default kernels built three ways, cold cache each time —
#   cuda: CUDA C++ through NVRTC (NVVM + NVRTC's ptxas);
#   jl:   the same NVRTC PTX assembled by nvJitLink (TILELANG_NVRTC_PTX_VIA_JITLINK=1);
#   ptx:  the PTX printer's output assembled by nvJitLink (TILELANG_BACKEND=ptx).
# Separates what the PTX printer changes from what the assembler changes.
G=.gpu; export TILELANG_CACHE_DIR=/tmp/tlx
for rep in 1 2; do
for mode in cuda jl ptx; do
  case $mode in cuda) E="TILELANG_BACKEND=cuda";; jl) E="TILELANG_BACKEND=cuda TILELANG_NVRTC_PTX_VIA_JITLINK=1";; ptx) E="TILELANG_BACKEND=ptx";; esac
  echo "== $mode (round $rep)"
  for cfg in "4 16 4096 128" "8 16 2048 64"; do
    set -- $cfg
    for c in "" --causal; do
      env $E $G/flash_attention --device cuda --batch $1 --heads $2 --seq $3 --dim $4 --dtype bf16 $c --reps 30 2>&1 | tail -n 1
    done
  done
  env $E $G/gemm --device cuda --m 4096 --n 4096 --k 4096 --layout nt --dtype bf16 --reps 50 2>&1 | tail -n 1
  env $E $G/gemm --device cuda --m 8192 --n 8192 --k 8192 --layout nt --dtype bf16 --reps 50 2>&1 | tail -n 1
  rm -rf /tmp/tlx
done
done
