#!/usr/bin/env bash
# Runs on the GPU machine (binaries staged in .gpu/): bf16 attention forward under sustained
# load — REPS launches back to back, L2 flushed before each — ours (the flash_attention
# example) against cuDNN (bench/cudnn_attn_loop.py), with the SM clock, the power and the
# clock-event reasons sampled every 20 ms, as bench/sustained-gemm.sh does for the GEMM.
#   bash bench/sustained-attn.sh B H S D CAUSAL REPS
set -uo pipefail
B=${1:-4}; H=${2:-16}; S=${3:-4096}; D=${4:-128}; C=${5:-0}; REPS=${6:-1800}
G=.gpu
export TILELANG_CACHE_DIR=${TILELANG_CACHE_DIR:-/tmp/tlc}
causal=""; [ "$C" = 1 ] && causal="--causal"
# shellcheck source=bench/sampled.sh
source "$(dirname "$0")/sampled.sh"
echo "== attention B$B H$H S$S D$D causal=$C, $REPS launches"
for round in 1 2; do
  echo "-- ours"
  # shellcheck disable=SC2086
  sampled sh -c "timeout 200 $G/flash_attention --device cuda --batch $B --heads $H --seq $S --dim $D --dtype bf16 --reps $REPS $causal 2>&1 | tail -n 1 | grep -oE 'tflops=[^ ]+'"
  echo "-- cuDNN"
  sampled sh -c "timeout 200 python3 bench/cudnn_attn_loop.py $B $H $S $D $C $REPS 2>&1 | grep tflops"
done
