#!/usr/bin/env bash
# The refit's split of narrow tiles (few-row GEMMs whose narrowest tiles leave half the SMs
# idle) against the binary before it, one launch a window and ten back to back, rounds
# interleaved, the cuBLAS peer beside them in the first round.
#   bash bench/narrow-split.sh [reps] [rounds]   (GPU machine; .gpu/ staged with gemm and
#                                                 main's build as gemm_old)
#   FP8=1: fp8 e4m3 with fast accumulation (fp8_gemm and fp8_gemm_old; cuBLASLt fast).
#   SIZES="L M N K;..." narrows the shapes (L: nt, nn or tn; fp8 is NT); PEERS=0 skips the peer.
set -uo pipefail
reps=${1:-30}
rounds=${2:-2}
G=.gpu
line() { "$@" 2>&1 | grep -E 'tflops|rror' | sed 's/ device=cuda:0//; s/ cached=[a-z]*//; s/ code=[a-z-]*//; s/ variant=[^ ]*//; s/compile_ms=[0-9.]* //; s/ regs=.*local_bytes=[0-9]*//' | tr '\n' ' '; echo; }
if [ "${FP8:-0}" = 1 ]; then
  ex=fp8_gemm
  default_sizes="nt 64 2048 4096;nt 64 1024 8192;nt 128 1024 4096;nt 64 4096 4096;nt 128 2112 7168"
else
  ex=gemm
  default_sizes="nn 64 4096 4096;nn 64 2048 4096;nn 128 2048 4096;nn 32 4096 4096;nt 64 2048 4096;nt 128 1024 4096;tn 64 4096 4096;nt 64 1024 8192;nn 64 2048 8192;nn 256 1024 4096;nt 32 2048 2048"
fi
flags() { if [ "$ex" = fp8_gemm ]; then echo "--fast-accum"; else echo "--layout $1 --dtype bf16"; fi; }
peer() { if [ "$ex" = fp8_gemm ]; then echo "fp8 $2 $3 $4 --fast"; else echo "gemm $2 $3 $4 --layout $1"; fi; }
IFS=';' read -ra sizes <<< "${SIZES:-$default_sizes}"
for round in $(seq "$rounds"); do
  for s in "${sizes[@]}"; do
    set -- $s
    for w in 1 10; do
      for b in old new; do
        bin=$G/$ex; [ $b = old ] && bin=$G/${ex}_old
        echo "$b $s x$w: $(line $bin --device cuda --m $2 --n $3 --k $4 $(flags $1) --reps $reps --back-to-back $w)"
      done
      if [ "${PEERS:-1}" = 1 ] && [ "$round" = 1 ] && [ "$1" != tn ]; then
        echo "peer $s x$w: $(python3 $G/peers30.py --back-to-back $w $(peer "$@") 2>&1 | grep -o '30 reps *[0-9.]* TFLOP/s' | tr -s ' ')"
      fi
    done
  done
done
