#!/usr/bin/env bash
# The refit's split of narrow tiles (few-row GEMMs whose narrowest tiles leave half the SMs
# idle) against the binary before it (.gpu/gemm_old), one launch a window and ten back to
# back, rounds interleaved, cuBLAS beside them in the first round.
#   bash bench/narrow-split.sh [reps] [rounds]   (GPU machine; .gpu/ staged with gemm and gemm_old)
#   SIZES="L M N K;..." narrows the shapes; PEERS=0 skips cuBLAS.
set -uo pipefail
reps=${1:-30}
rounds=${2:-2}
G=.gpu
line() { "$@" 2>&1 | grep -E 'tflops|rror' | sed 's/ device=cuda:0//; s/ cached=[a-z]*//; s/ code=[a-z-]*//; s/ variant=[^ ]*//; s/compile_ms=[0-9.]* //; s/ regs=.*local_bytes=[0-9]*//' | tr '\n' ' '; echo; }
IFS=';' read -ra sizes <<< "${SIZES:-nn 64 4096 4096;nn 64 2048 4096;nn 128 2048 4096;nn 32 4096 4096;nt 64 2048 4096;nt 128 1024 4096;tn 64 4096 4096;nt 64 1024 8192;nn 64 2048 8192;nn 256 1024 4096;nt 32 2048 2048}"
for round in $(seq "$rounds"); do
  for s in "${sizes[@]}"; do
    set -- $s
    for w in 1 10; do
      echo "old $s x$w: $(line $G/gemm_old --device cuda --m $2 --n $3 --k $4 --layout $1 --dtype bf16 --reps $reps --back-to-back $w)"
      echo "new $s x$w: $(line $G/gemm --device cuda --m $2 --n $3 --k $4 --layout $1 --dtype bf16 --reps $reps --back-to-back $w)"
      if [ "${PEERS:-1}" = 1 ] && [ "$round" = 1 ] && [ "$1" != tn ]; then
        echo "cuBLAS $s x$w: $(python3 $G/peers30.py --back-to-back $w gemm $2 $3 $4 --layout $1 2>&1 | grep -o '30 reps *[0-9.]* TFLOP/s' | tr -s ' ')"
      fi
    done
  done
done
