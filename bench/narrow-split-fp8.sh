#!/usr/bin/env bash
# fp8 with fast accumulation (the bf16 GEMM's refit on fp8 tiles): the refit's split of
# narrow tiles against the binary before it (.gpu/fp8_gemm_old), one launch a window and
# ten back to back, rounds interleaved, cuBLASLt fast beside them in the first round.
#   bash bench/narrow-split-fp8.sh [reps] [rounds]
set -uo pipefail
reps=${1:-30}
rounds=${2:-2}
G=.gpu
line() { "$@" 2>&1 | grep -E 'tflops|rror' | sed 's/ device=cuda:0//; s/ cached=[a-z]*//; s/ code=[a-z-]*//; s/ variant=[^ ]*//; s/compile_ms=[0-9.]* //; s/ regs=.*local_bytes=[0-9]*//' | tr '\n' ' '; echo; }
IFS=';' read -ra sizes <<< "${SIZES:-64 2048 4096;64 1024 8192;128 1024 4096;64 4096 4096;128 2112 7168}"
for round in $(seq "$rounds"); do
  for s in "${sizes[@]}"; do
    set -- $s
    for w in 1 10; do
      echo "old $s x$w: $(line $G/fp8_gemm_old --device cuda --m $1 --n $2 --k $3 --fast-accum --reps $reps --back-to-back $w)"
      echo "new $s x$w: $(line $G/fp8_gemm --device cuda --m $1 --n $2 --k $3 --fast-accum --reps $reps --back-to-back $w)"
      if [ "${PEERS:-1}" = 1 ] && [ "$round" = 1 ]; then
        echo "cuBLASLt $s x$w: $(python3 $G/peers30.py --back-to-back $w fp8 $1 $2 $3 --fast 2>&1 | grep -o '30 reps *[0-9.]* TFLOP/s' | tr -s ' ')"
      fi
    done
  done
done
