#!/usr/bin/env bash
# Attention with FlashAttention-4's lazy rescale (AttnConfig::rescale_threshold; the default
# for non-causal d128 on Hopper) beside the rescale every step
# (TILELANG_ATTN_RESCALE_THRESHOLD=off) and cuDNN timed alike (bench/peers30.py), d128 and
# d64, causal and not, rounds interleaved (gpu-notes run 39). GPU machine, `.gpu` staged by
# `../shared/tools/stage-gpu --example flash_attention`.
#   bash bench/attn-lazy-rescale.sh [reps] [rounds] [lazy thresholds]
set -uo pipefail
G=.gpu
reps=${1:-30}
rounds=${2:-2}
ths=${3:-"8"}
line() { timeout 120 "$@" 2>&1 | tail -n 1 | sed 's/device=.*//; s/^flash_attention //'; }
for d in 128 64; do
  for s in "4 16 4096" "2 32 8192"; do
    set -- $s
    for c in "" "--causal"; do
      args=(--device cuda --batch "$1" --heads "$2" --seq "$3" --dim "$d" --dtype bf16 --reps "$reps" $c)
      for round in $(seq "$rounds"); do
        echo "every step: $(TILELANG_ATTN_RESCALE_THRESHOLD=off line $G/flash_attention "${args[@]}")"
        for th in $ths; do
          echo "lazy $th:     $(TILELANG_ATTN_RESCALE_THRESHOLD=$th line $G/flash_attention "${args[@]}")"
        done
      done
      timeout 200 python3 $G/peers30.py attn "$1" "$2" "$3" "$d" $c 2>&1 | tail -n 1
    done
  done
done
cs="${COMPUTE_SANITIZER:-$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)}"
# The d128 defaults (lazy; causal with the pinned wait), causal and not. Session 41 ran the
# non-causal one only (39e); the causal default landed without its sanitizer run.
for c in "" "--causal"; do
  for tool in memcheck racecheck synccheck; do
    out=$(timeout 200 "$cs" --tool "$tool" --error-exitcode 86 $G/flash_attention --device cuda \
      --batch 1 --heads 3 --seq 1000 --dim 128 --dtype bf16 --reps 1 $c 2>&1)
    echo "$tool d128 1x3x1000 $c (the default): rc=$? $(grep -E 'SUMMARY' <<< "$out" | tr -s ' =')"
  done
done
