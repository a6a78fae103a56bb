#!/usr/bin/env bash
# Runs on the GPU machine (binaries staged in .gpu/): the PTX backend against the CUDA C++ one.
#   bash bench/ptx-run.sh [check|compile|perf|all]
# check: every example at odd sizes with TILELANG_BACKEND=ptx (plus the wgmma tiles of
# `gpu-run.sh hopper`); compile: cold compile times per backend; perf: the default GEMM and
# attention kernels per backend, interleaved, with the peers once.
set -uo pipefail
what="${1:-all}"
G=.gpu
export TILELANG_CACHE_DIR="${TILELANG_CACHE_DIR:-/tmp/tl-cache}"
if [ "$what" = check ] || [ "$what" = all ]; then
  TILELANG_BACKEND=ptx bash bench/gpu-run.sh check
  fails=0
  chk() { echo "\$ $*"; TILELANG_BACKEND=ptx "$@" > /tmp/chk.out 2>&1; rc=$?; tail -n 1 /tmp/chk.out; [ $rc = 0 ] || { fails=$((fails+1)); echo "FAILED (exit $rc)"; tail -n 5 /tmp/chk.out; }; }
  for cfg in "64 64 128 2" "128 128 256 2"; do
    set -- $cfg
    for c in "" --causal; do
      chk $G/flash_attention --device cuda --batch 1 --heads 2 --seq 777 --dim 128 --dtype bf16 --wgmma --bm $1 --bn $2 --threads $3 --stages $4 $c
    done
  done
  for l in nn tn; do
    chk $G/gemm --device cuda --m 1000 --n 999 --k 1003 --layout $l --dtype bf16 --wgmma --bm 128 --bn 128 --bk 64 --threads 256 --stages 3
  done
  chk $G/gemm --device cuda --m 1000 --n 999 --k 1003 --layout nt --dtype bf16 --wgmma --overlap --bm 128 --bn 128 --bk 64 --threads 256 --stages 4
  chk $G/gemm --device cuda --m 1000 --n 999 --k 1003 --layout nt --dtype bf16 --persistent 7 --panel 4
  chk $G/gemm --device cuda --m 1000 --n 999 --k 1003 --layout nn --dtype f16 --no-wgmma --persistent 7
  for c in "" --causal; do
    chk $G/flash_attention --device cuda --batch 1 --heads 2 --seq 777 --dim 128 --dtype bf16 --no-wgmma $c
  done
  echo "ptx extra correctness failures: $fails"
fi
if [ "$what" = compile ] || [ "$what" = all ]; then
  for b in cuda ptx cuda ptx; do
    echo "== compile_times TILELANG_BACKEND=$b"
    TILELANG_BACKEND=$b $G/compile_times --device cuda 2>&1 | grep -v "^process"
  done
fi
if [ "$what" = perf ] || [ "$what" = all ]; then
  for rep in 1 2; do
    for b in cuda ptx; do
      echo "== defaults, TILELANG_BACKEND=$b (round $rep)"
      for cfg in "4 16 4096 128" "8 16 2048 64"; do
        set -- $cfg
        for c in "" --causal; do
          TILELANG_BACKEND=$b $G/flash_attention --device cuda --batch $1 --heads $2 --seq $3 --dim $4 --dtype bf16 $c --reps 30 2>&1 | tail -n 1
        done
      done
      for n in 4096 8192; do
        TILELANG_BACKEND=$b $G/gemm --device cuda --m $n --n $n --k $n --layout nt --dtype bf16 --reps 50 2>&1 | tail -n 1
        TILELANG_BACKEND=$b $G/gemm --device cuda --m $n --n $n --k $n --layout nt --dtype bf16 --no-wgmma --reps 50 2>&1 | tail -n 1
      done
    done
  done
  for cfg in "4 16 4096 128" "8 16 2048 64"; do
    set -- $cfg
    for c in "" --causal; do python3 $G/torch_peers.py attn $1 $2 $3 $4 $c; done
  done
  python3 $G/torch_peers.py gemm 4096 4096 4096 --layout nt --dtype bf16
  python3 $G/torch_peers.py gemm 8192 8192 8192 --layout nt --dtype bf16
fi
