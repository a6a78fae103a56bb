#!/usr/bin/env bash
# The odd-K residue probe (bench/oddk_residue_probe.cu) beside the shipped GEMM at the same
# sizes: does reading an odd-K A in place, each row residue from its own aligned column with
# B's rows shifted to match, beat copying A into padded rows first? NT's B is first copied
# transposed (nt-*), which is what NT would pay.
#   bash bench/oddk-residue.sh [reps] [rounds]      (GPU machine; .gpu/ staged with gemm)
set -uo pipefail
reps=${1:-30}
rounds=${2:-2}
G=.gpu
here=$(dirname "$(readlink -f "$0")")
nv=(nvcc -O3 -gencode arch=compute_90a,code=sm_90a -std=c++17 -w)
"${nv[@]}" -o /tmp/oddk "$here/oddk_residue_probe.cu" -lcuda || exit 1
"${nv[@]}" -DPROBE_SLAB=1 -o /tmp/oddk_slab "$here/oddk_residue_probe.cu" -lcuda || exit 1
probe() { case "$5" in *slab) /tmp/oddk_slab "$@" ;; *) /tmp/oddk "$@" ;; esac; }
line() { "$@" 2>&1 | grep -E 'tflops|error|Error' | tr '\n' ' '; echo; }
# Correctness first: every row shift (K mod 8), NN and NT, both forms.
for k in 4096 4095 4097 4093 4092 4090 1001; do
  for v in ring slab nt-ring nt-slab; do probe 1024 1024 "$k" 3 "$v"; done
done
for round in $(seq "$rounds"); do
  for k in 4096 4095; do
    for v in ring slab nt-ring nt-slab; do probe 4096 4096 "$k" "$reps" "$v"; done
    for l in nn nt; do
      echo "shipped $l 4096x4096x$k: $(line $G/gemm --device cuda --m 4096 --n 4096 --k $k --layout $l --dtype bf16 --reps $reps)"
    done
  done
  for v in ring slab nt-slab; do probe 8192 8192 8191 "$reps" "$v"; done
  for l in nn nt; do
    echo "shipped $l 8192x8192x8191: $(line $G/gemm --device cuda --m 8192 --n 8192 --k 8191 --layout $l --dtype bf16 --reps $reps)"
  done
done
