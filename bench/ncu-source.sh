#!/usr/bin/env bash
# Per-instruction stall samples of our Hopper GEMM (the default, persistent, and one block per
# tile) beside TileLang's at one size (GPU machine,
# `.gpu/gemm` staged, TileLang's tarball in `.tl` for its side): ncu's SourceCounters and
# WarpStateStats, then the source page as CSV (one row per SASS instruction, with the warp
# stall samples by reason), written to $OUT (or /tmp/ncu-source) for reading off the machine.
#   bash bench/ncu-source.sh [M N K]
set -uo pipefail
M=${1:-4096}; N=${2:-4096}; K=${3:-4096}
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
dump ours -k regex:tl_kernel -s 2 -c 1 $G/gemm --device cuda --m $M --n $N --k $K --layout nt \
  --dtype bf16 --reps 3
dump ours-one-block-per-tile -k regex:tl_kernel -s 2 -c 1 $G/gemm --device cuda --m $M --n $N \
  --k $K --layout nt --dtype bf16 --reps 3 --no-persistent
if [ -f .tl/tl-site.tar.xz ]; then
  mkdir -p /tmp/tl-site && tar xJf .tl/tl-site.tar.xz -C /tmp/tl-site || { echo "TileLang tarball did not unpack"; exit 1; }
  PYTHONPATH=/tmp/tl-site dump tilelang -k regex:main_kernel -s 2 -c 1 python3 bench/tilelang_gemm_once.py \
    $M $N $K --source "$out/tilelang.cu"
fi
