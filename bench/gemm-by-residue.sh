#!/usr/bin/env bash
# The NN GEMM that reads an odd-K A in place by row residue (`gemm --by-residue`,
# kernels::gemm_residue) beside the copy-first GEMM (`--no-by-residue`: A copied into padded
# rows before each launch), rounds interleaved; correctness at odd sizes; compute-sanitizer.
#   bash bench/gemm-by-residue.sh [reps] [rounds]     (GPU machine; .gpu/ staged with gemm)
#   SIZES="M N K;M N K" narrows the timed sizes; CHECKS=0 skips the checks and sanitizer.
set -uo pipefail
reps=${1:-30}
rounds=${2:-2}
G=.gpu
line() { "$@" 2>&1 | grep -E 'tflops|rror' | sed 's/ device=cuda:0//; s/ cached=[a-z]*//' | tr '\n' ' '; echo; }
checks=${CHECKS:-1}
IFS=';' read -ra sizes <<< "${SIZES:-4096 4096 4095;8192 8192 8191;4096 4096 4096}"
if [ "$checks" = 1 ]; then
  for s in "1000 1024 1001" "64 256 97" "4096 4096 4090" "136 520 4093" "4096 4096 4096"; do
    set -- $s
    echo "check $s: $(line $G/gemm --device cuda --m $1 --n $2 --k $3 --layout nn --dtype bf16 --by-residue --reps 1)"
  done
fi
for round in $(seq "$rounds"); do
  for s in "${sizes[@]}"; do
    set -- $s
    echo "residue $s: $(line $G/gemm --device cuda --m $1 --n $2 --k $3 --layout nn --dtype bf16 --by-residue --reps $reps)"
    echo "copy    $s: $(line $G/gemm --device cuda --m $1 --n $2 --k $3 --layout nn --dtype bf16 --no-by-residue --reps $reps)"
  done
done
[ "$checks" = 1 ] || exit 0
cs="${COMPUTE_SANITIZER:-$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)}"
for tool in memcheck racecheck synccheck; do
  out=$(timeout 200 "$cs" --tool "$tool" --error-exitcode 86 $G/gemm --device cuda --m 264 --n 512 --k 1001 \
    --layout nn --dtype bf16 --by-residue --reps 1 2>&1)
  echo "$tool by-residue 264x512x1001: rc=$? $(grep -E 'SUMMARY|err=' <<< "$out" | sed 's/ device.*//' | tr -s ' =' | tr '\n' ' ')"
done
