#!/usr/bin/env bash
# Hardware counters of our Hopper GEMM beside cuBLAS's at one size, under ncu (GPU machine,
# binaries staged in .gpu/): the kernels' names (cuBLAS's says its tile and cluster shape),
# durations, and the SpeedOfLight / compute / memory / warp-state sections; TileLang's kernel too
# where its tarball (.tl) was carried.
#   bash bench/ncu-gemm.sh [M N K]
set -uo pipefail
M=${1:-4096}; N=${2:-4096}; K=${3:-4096}
G=.gpu
S="--section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section WarpStateStats --section LaunchStats --section Occupancy"
cat > /tmp/cublas_gemm.py <<PY
import torch
a = torch.randn($M, $K, device="cuda", dtype=torch.bfloat16)
b = torch.randn($N, $K, device="cuda", dtype=torch.bfloat16)
for _ in range(3):
    c = a @ b.t()
torch.cuda.synchronize()
PY
echo "== cuBLAS ${M}x${N}x${K} nt"
timeout 200 ncu --clock-control none -k regex:'gemm|xmma|sm90|cutlass' -s 2 -c 1 $S python3 /tmp/cublas_gemm.py 2>&1 | grep -v "^==PROF==" | grep -v "^    ---" | sed 's/  */ /g' | head -150
echo "== ours ${M}x${N}x${K} nt"
timeout 200 ncu --clock-control none -k regex:tl_kernel -s 2 -c 1 $S $G/gemm --device cuda --m $M --n $N --k $K --layout nt --dtype bf16 --reps 3 2>&1 | grep -v "^==PROF==" | grep -v "^    ---" | sed 's/  */ /g' | head -150
# TileLang's kernel of the same shape, where its tarball was carried (.tl: bench/tilelang-tarball.sh).
if [ -f .tl/tl-site.tar.xz ]; then
  mkdir -p /tmp/tl-site && tar xJf .tl/tl-site.tar.xz -C /tmp/tl-site || { echo "TileLang tarball did not unpack"; exit 1; }
  echo "== TileLang ${M}x${N}x${K} nt"
  PYTHONPATH=/tmp/tl-site timeout 200 ncu --clock-control none -k regex:main_kernel -s 2 -c 1 $S python3 bench/tilelang_gemm_once.py $M $N $K 2>&1 | grep -v "^==PROF==" | grep -v "^    ---" | grep -v "TileLang:" | sed 's/  */ /g' | head -150
fi
