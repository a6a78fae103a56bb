#!/usr/bin/env bash
# NN GEMMs whose B rows are not whole 16-byte units (N % 8 != 0): B read in place by row
# residue and realigned in shared memory (`gemm --realign-b`, kernels::gemm_realign) beside
# the default (the runtime copies B into padded rows before each launch) and NT (no copy),
# one launch a window; correctness at odd sizes; compute-sanitizer.
#   bash bench/realign-b.sh [reps] [rounds]     (GPU machine; .gpu/ staged with gemm)
#   SIZES="M N K;..." narrows the sizes; CHECKS=0 skips the checks and the sanitizer.
set -uo pipefail
reps=${1:-30}
rounds=${2:-1}
G=.gpu
line() { "$@" 2>&1 | grep -E 'tflops|rror' | sed 's/ device=cuda:0//; s/ cached=[a-z]*//; s/ code=[a-z-]*//; s/compile_ms=[0-9.]* //; s/ regs=.*local_bytes=[0-9]*//' | tr '\n' ' '; echo; }
if [ "${CHECKS:-1}" = 1 ]; then
  for s in "64 131 128" "72 257 200" "200 300 520" "1000 1001 1000" "16 50257 4096"; do
    set -- $s
    echo "check $s: $(line $G/gemm --device cuda --m $1 --n $2 --k $3 --layout nn --dtype bf16 --realign-b --reps 1)"
  done
  cs="${COMPUTE_SANITIZER:-$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)}"
  for tool in memcheck racecheck synccheck; do
    out=$(timeout 200 "$cs" --tool "$tool" --error-exitcode 86 $G/gemm --device cuda --m 72 --n 1001 --k 1000 \
      --layout nn --dtype bf16 --realign-b --reps 1 2>&1)
    echo "$tool realign-b 72x1001x1000: rc=$? $(grep -E 'SUMMARY|err=' <<< "$out" | sed 's/ device.*//' | tr -s ' =' | tr '\n' ' ')"
  done
fi
IFS=';' read -ra sizes <<< "${SIZES:-16 50257 4096;64 50257 4096;128 32001 4096;256 50257 4096;1024 50257 4096;64 4095 4096;4096 4095 4096}"
for round in $(seq "$rounds"); do
  for s in "${sizes[@]}"; do
    set -- $s
    echo "realign $s: $(line $G/gemm --device cuda --m $1 --n $2 --k $3 --layout nn --dtype bf16 --realign-b --reps $reps)"
    echo "default $s: $(line $G/gemm --device cuda --m $1 --n $2 --k $3 --layout nn --dtype bf16 --reps $reps)"
    [ "$round" = 1 ] && echo "nt      $s: $(line $G/gemm --device cuda --m $1 --n $2 --k $3 --layout nt --dtype bf16 --reps $reps)"
  done
done
