#!/usr/bin/env bash
# The GEMM's own copy of odd rows (TILELANG_STAGE_IN_KERNEL=1) beside the runtime's copies
# before the launch, at odd K and odd N (gpu-notes run 38j), then compute-sanitizer on the
# kernel's copy (38k). GPU machine, `.gpu/gemm` staged by `../shared/tools/stage-gpu
# --example gemm`. Knobs of the kernel's copy (TILELANG_STAGE_LEAD, _BATCH, _GROUP, _DEPTH)
# pass through from the environment.
#   bash bench/stage-in-kernel.sh [reps]
set -uo pipefail
G=.gpu/gemm
reps=${1:-20}
line() { timeout 120 "$@" 2>&1 | tail -n 1 | sed 's/device=.*tiles/tiles/'; }
for s in "4096 4095 4096 nn" "4096 4096 4095 nt" "4095 4095 4095 nt" "4095 4095 4095 nn" \
         "8192 8191 8192 nn" "8191 8191 8191 nt" "1001 999 1003 nn" "1001 999 1003 nt" \
         "300 257 1001 nn" "130 72 1001 nt"; do
  set -- $s
  args=(--device cuda --m "$1" --n "$2" --k "$3" --layout "$4" --dtype bf16 --reps "$reps")
  echo "runtime:  $(line $G "${args[@]}")"
  echo "inkernel: $(TILELANG_STAGE_IN_KERNEL=1 line $G "${args[@]}")"
done
cs="${COMPUTE_SANITIZER:-$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)}"
for s in "1001 999 1003 nn" "1001 999 1003 nt" "300 257 1001 nn" "130 72 1001 nt"; do
  set -- $s
  for tool in memcheck racecheck synccheck; do
    out=$(TILELANG_STAGE_IN_KERNEL=1 timeout 150 "$cs" --tool "$tool" --error-exitcode 86 \
      $G --device cuda --m "$1" --n "$2" --k "$3" --layout "$4" --dtype bf16 --reps 1 2>&1)
    echo "$tool $s: rc=$? $(grep -E 'SUMMARY' <<< "$out" | tr -s ' =')"
  done
done
