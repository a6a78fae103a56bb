#!/usr/bin/env bash
# Decode-sized GEMMs (M = 64): the refit's tiles against splits and other tile shapes, one
# launch a window and ten back to back (B in L2 after the first), cuBLAS beside them.
#   bash bench/decode-tiles.sh [reps]      (GPU machine; .gpu/ staged with gemm)
set -uo pipefail
reps=${1:-30}
G=.gpu
line() { "$@" 2>&1 | grep -E 'tflops|rror' | sed 's/ device=cuda:0//; s/ cached=[a-z]*//; s/ code=[a-z-]*//; s/ variant=[^ ]*//; s/compile_ms=[0-9.]* //' | tr '\n' ' '; echo; }
run() { # layout M N K label flags...
  local l=$1 m=$2 n=$3 k=$4 label=$5; shift 5
  for w in 1 10; do
    echo "$label x$w: $(line $G/gemm --device cuda --m $m --n $n --k $k --layout $l --dtype bf16 --reps $reps --back-to-back $w "$@")"
  done
}
for l in nn nt; do
  run $l 64 4096 4096 default
  run $l 64 4096 4096 "64x64 s2" --bm 64 --bn 64 --threads 128 --split-k 2
  run $l 64 4096 4096 "64x64 s4" --bm 64 --bn 64 --threads 128 --split-k 4
  run $l 64 4096 4096 "64x128 s4" --bm 64 --bn 128 --threads 128 --split-k 4
  run $l 64 4096 4096 "64x64 st6" --bm 64 --bn 64 --threads 128 --stages 6
done
run nt 64 4096 4096 "64x32 st8" --bm 64 --bn 32 --threads 128 --stages 8
run nt 64 4096 4096 "64x32 s2 st8" --bm 64 --bn 32 --threads 128 --stages 8 --split-k 2
for l in nn nt; do for w in 1 10; do
  echo "cuBLAS $l x$w: $(python3 $G/peers30.py --back-to-back $w gemm 64 4096 4096 --layout $l 2>&1 | grep -o '30 reps *[0-9.]* TFLOP/s' | tr -s ' ')"
done; done
