#!/usr/bin/env bash
# Runs on the GPU machine (binaries staged in .gpu/): what ptxas options and tile choices do to
# the PTX backend's cold compile time and kernel speed. Each variant runs `compile_times` and
# the default attention and GEMM workloads, interleaved over two rounds, cold cache each time.
#   bash bench/exp-ptxas.sh ["-O1" ...]     (ptxas option sets to compare with the default -O3)
G=.gpu; export TILELANG_CACHE_DIR=/tmp/tlx TILELANG_BACKEND=ptx
sets=("" "$@")
for rep in 1 2; do
  for o in "${sets[@]}"; do
    export TILELANG_PTXAS_OPTIONS="$o"
    echo "== ptxas options [$o] (round $rep)"
    rm -rf /tmp/tlx
    $G/compile_times --device cuda 2>&1 | grep -v "^process" | sed -E 's/ \(lower.*hit=(true|false)\)//'
    for cfg in "4 16 4096 128" "8 16 2048 64"; do
      set -- $cfg
      for c in "" --causal; do
        $G/flash_attention --device cuda --batch $1 --heads $2 --seq $3 --dim $4 --dtype bf16 $c --reps 30 2>&1 | tail -n 1
      done
    done
    $G/flash_attention --device cuda --batch 4 --heads 16 --seq 4096 --dim 128 --dtype bf16 --causal --wgmma --bm 128 --bn 64 --threads 256 --stages 2 --reps 30 2>&1 | tail -n 1
    for n in 4096 8192; do
      $G/gemm --device cuda --m $n --n $n --k $n --layout nt --dtype bf16 --reps 50 2>&1 | tail -n 1
    done
    $G/flash_attention --device cuda --batch 1 --heads 16 --seq 4096 --dim 128 --dtype bf16 --no-wgmma --reps 30 2>&1 | tail -n 1
  done
done
