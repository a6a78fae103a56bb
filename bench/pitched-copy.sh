#!/usr/bin/env bash
# GEMMs whose operands the runtime stages into pitched rows (odd K, odd N in NN), the build
# under test (.gpu/gemm) beside another (.gpu/gemm_old, e.g. main's), rounds interleaved,
# with the aligned 4096³ for the ratio; then compute-sanitizer on the staged path (gpu-notes
# run 39). GPU machine, `.gpu` staged by `../shared/tools/stage-gpu --example gemm`.
#   bash bench/pitched-copy.sh [reps] [rounds]
set -uo pipefail
reps=${1:-30}
rounds=${2:-2}
line() { timeout 120 "$@" 2>&1 | tail -n 1 | sed 's/device=.*tiles/tiles/'; }
for s in "4096 4096 4096 nn" "4096 4096 4096 nt" "4096 4095 4096 nn" "4096 4096 4095 nt" \
         "4095 4095 4095 nt" "4095 4095 4095 nn" "8192 8191 8192 nn" "8191 8191 8191 nt" \
         "1001 999 1003 nn"; do
  set -- $s
  args=(--device cuda --m "$1" --n "$2" --k "$3" --layout "$4" --dtype bf16 --reps "$reps")
  for round in $(seq "$rounds"); do
    [ -x .gpu/gemm_old ] && echo "old: $(line .gpu/gemm_old "${args[@]}")"
    echo "new: $(line .gpu/gemm "${args[@]}")"
  done
done
cs="${COMPUTE_SANITIZER:-$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)}"
for s in "1001 999 1003 nn" "300 257 1001 nt" "130 72 1001 nt"; do
  set -- $s
  out=$(timeout 150 "$cs" --tool memcheck --error-exitcode 86 .gpu/gemm --device cuda \
    --m "$1" --n "$2" --k "$3" --layout "$4" --dtype bf16 --reps 1 2>&1)
  echo "memcheck $s: rc=$? $(grep -E 'SUMMARY' <<< "$out" | tr -s ' =') $(grep -oE 'err=[^ ]+' <<< "$out" | tail -1)"
done
