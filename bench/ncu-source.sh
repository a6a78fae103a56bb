#!/usr/bin/env bash
# Per-instruction stall samples of our Hopper GEMM (the default, persistent, and one block per
# tile) beside TileLang's at one size (GPU machine,
# `.gpu/gemm` staged, TileLang's tarball in `.tl` for its side), or of our attention forward
# beside cuDNN's (SDPA's cuDNN backend; `.gpu/flash_attention` staged): ncu's SourceCounters
# and WarpStateStats, then the source page as CSV (one row per SASS instruction, with the warp
# stall samples by reason), written to $OUT (or /tmp/ncu-source) for reading off the machine.
#   bash bench/ncu-source.sh [M N K]
#   bash bench/ncu-source.sh attn [B H S D] [--causal]
set -uo pipefail
G=.gpu
out="${OUT:-/tmp/ncu-source}"
mkdir -p "$out"
S="--section SourceCounters --section WarpStateStats --section SpeedOfLight"
dump() {  # name, then the command
  local name=$1; shift
  timeout 240 ncu --clock-control none --import-source no $S -o "/tmp/$name" -f "$@" \
    > "$out/$name.log" 2>&1 || echo "ncu failed for $name (see $name.log)"
  ncu --import "/tmp/$name.ncu-rep" --page source --csv --print-source sass \
    > "$out/$name.sass.csv" 2>> "$out/$name.log"
  ncu --import "/tmp/$name.ncu-rep" --page details > "$out/$name.details.txt" 2>> "$out/$name.log"
  echo "== $name: $(wc -l < "$out/$name.sass.csv") SASS rows"
  grep -E "Duration|Warp Cycles Per Issued|Issued Ipc|Compute \(SM\) Throughput" "$out/$name.details.txt" | sed 's/  */ /g'
}
if [ "${1:-}" = attn ]; then
  B=${2:-4}; H=${3:-16}; SEQ=${4:-4096}; D=${5:-128}; C=${6:-}
  dump ours-attn -k regex:tl_kernel -s 2 -c 1 $G/flash_attention --device cuda --batch $B \
    --heads $H --seq $SEQ --dim $D --dtype bf16 --reps 3 $C
  causal=False; [ -n "$C" ] && causal=True
  cat > /tmp/sdpa_once.py <<PY
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
q, k, v = (torch.randn($B, $H, $SEQ, $D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
    for _ in range(4):
        torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=$causal)
torch.cuda.synchronize()
PY
  dump cudnn-attn -k regex:"sdpa|fmha|fprop" -s 2 -c 1 python3 /tmp/sdpa_once.py
  exit 0
fi
M=${1:-4096}; N=${2:-4096}; K=${3:-4096}
dump ours -k regex:tl_kernel -s 2 -c 1 $G/gemm --device cuda --m $M --n $N --k $K --layout nt \
  --dtype bf16 --reps 3
dump ours-one-block-per-tile -k regex:tl_kernel -s 2 -c 1 $G/gemm --device cuda --m $M --n $N \
  --k $K --layout nt --dtype bf16 --reps 3 --no-persistent
if [ -f .tl/tl-site.tar.xz ]; then
  mkdir -p /tmp/tl-site && tar xJf .tl/tl-site.tar.xz -C /tmp/tl-site || { echo "TileLang tarball did not unpack"; exit 1; }
  PYTHONPATH=/tmp/tl-site dump tilelang -k regex:main_kernel -s 2 -c 1 python3 bench/tilelang_gemm_once.py \
    $M $N $K --source "$out/tilelang.cu"
fi
