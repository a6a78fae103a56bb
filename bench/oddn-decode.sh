#!/usr/bin/env bash
# Decode-sized GEMMs whose N is odd (a vocabulary-sized output): the default (the runtime
# copies an NN B into padded rows first), the kernel's own copy (TILELANG_STAGE_IN_KERNEL=1),
# the aligned neighbour, NT (no copy), and cuBLAS, one launch a window.
#   bash bench/oddn-decode.sh [reps]     (GPU machine; .gpu/ staged with gemm)
set -uo pipefail
reps=${1:-30}
G=.gpu
line() { "$@" 2>&1 | grep -E 'tflops|rror' | sed 's/ device=cuda:0//; s/ cached=[a-z]*//; s/ code=[a-z-]*//; s/compile_ms=[0-9.]* //; s/ regs=.*local_bytes=[0-9]*//' | tr '\n' ' '; echo; }
IFS=';' read -ra sizes <<< "${SIZES:-64 50257 4096;128 32001 4096;16 50257 4096;64 4095 4096;1024 50257 4096}"
for s in "${sizes[@]}"; do
  set -- $s
  for l in nn nt; do
    echo "default $l $s: $(line $G/gemm --device cuda --m $1 --n $2 --k $3 --layout $l --dtype bf16 --reps $reps)"
    [ $l = nn ] && echo "in-kernel $l $s: $(TILELANG_STAGE_IN_KERNEL=1 line $G/gemm --device cuda --m $1 --n $2 --k $3 --layout $l --dtype bf16 --reps $reps)"
    echo "aligned $l $1 $(( $2 + 1 )) $3: $(line $G/gemm --device cuda --m $1 --n $(( $2 + 1 )) --k $3 --layout $l --dtype bf16 --reps $reps)"
    echo "cuBLAS $l $s: $(python3 $G/peers30.py gemm $1 $2 $3 --layout $l 2>&1 | grep -o '30 reps *[0-9.]* TFLOP/s' | tr -s ' ')"
  done
done
