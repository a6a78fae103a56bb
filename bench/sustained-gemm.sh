#!/usr/bin/env bash
# Runs on the GPU machine (binaries staged in .gpu/, TileLang's tarball carried as .tl:
# bench/tilelang-tarball.sh): the bf16 NT GEMM under sustained load — about 1.6 s of launches
# back to back, L2 flushed before each — with the SM clock, the power and the clock-event
# reasons sampled every 20 ms (nvidia-smi), for ours (the default and the variants in
# VARIANTS), cuBLAS (bench/cublas_gemm_loop.py) and TileLang's kernel; then ncu's traffic
# counters of each at base clocks. Under
# such load the GPU runs at its power cap, so what a kernel spends in energy per GEMM decides
# its clock (docs/gpu-notes.md run 28).
#   bash bench/sustained-gemm.sh [N] [REPS]
set -uo pipefail
N=${1:-6144}; REPS=${2:-2000}
G=.gpu
# VARIANTS: our variants besides the default, "|"-separated (set but empty: the default alone).
VARIANTS=${VARIANTS-"|--stages 3"}
export TILELANG_CACHE_DIR=${TILELANG_CACHE_DIR:-/tmp/tlc}
tl=0
if [ -f .tl/tl-site.tar.xz ]; then
  mkdir -p /tmp/tl-site && tar xJf .tl/tl-site.tar.xz -C /tmp/tl-site && tl=1
  export PYTHONPATH=/tmp/tl-site${PYTHONPATH:+:$PYTHONPATH}
fi
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader
# shellcheck source=bench/sampled.sh
source "$(dirname "$0")/sampled.sh"
IFS='|' read -ra vs <<< "$VARIANTS"
[ ${#vs[@]} -eq 0 ] && vs=("")
for round in 1 2; do
  for v in "${vs[@]}"; do
    echo "-- ours ${v:-(default)}"
    # shellcheck disable=SC2086
    sampled sh -c "timeout 120 $G/gemm --device cuda --m $N --n $N --k $N --layout nt --dtype bf16 --reps $REPS $v 2>&1 | tail -n 1 | grep -oE 'tflops=[^ ]+'"
  done
  echo "-- cuBLAS"
  sampled sh -c "timeout 200 python3 bench/cublas_gemm_loop.py $N $REPS 2>&1 | grep tflops"
  if [ $tl = 1 ]; then
    echo "-- TileLang"
    sampled sh -c "timeout 200 python3 bench/tilelang_gemm_loop.py $N $REPS 2>&1 | grep tflops"
  fi
done
ncu=${NCU:-$(command -v ncu || echo /usr/local/cuda/bin/ncu)}
M="gpu__time_duration.sum,dram__bytes_read.sum,lts__t_sectors.sum,lts__t_sectors_srcunit_tex_op_read.sum,lts__t_sectors_srcunit_ltcfabric.sum,smsp__inst_executed.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum"
for v in "${vs[@]}"; do
  echo "== ncu (base clocks): ours ${v:-(default)}"
  # shellcheck disable=SC2086
  timeout 120 "$ncu" --clock-control base -k regex:tl_kernel -s 2 -c 1 --metrics $M $G/gemm --device cuda --m $N --n $N --k $N --layout nt --dtype bf16 --reps 3 $v 2>&1 | grep -E '^\s+(gpu__|dram__|lts__|smsp__|l1tex__)' | sed 's/  */ /g'
done
echo "== ncu (base clocks): cuBLAS"
timeout 200 "$ncu" --clock-control base -k regex:'nvjet|gemm|xmma' -s 2 -c 1 --metrics $M python3 bench/cublas_gemm_loop.py $N 3 2>&1 | grep -E '^\s+(gpu__|dram__|lts__|smsp__|l1tex__)' | sed 's/  */ /g'
if [ $tl = 1 ]; then
  echo "== ncu (base clocks): TileLang"
  timeout 200 "$ncu" --clock-control base -k regex:main_kernel -s 2 -c 1 --metrics $M python3 bench/tilelang_gemm_once.py $N $N $N 2>&1 | grep -E '^\s+(gpu__|dram__|lts__|smsp__|l1tex__)' | sed 's/  */ /g'
fi
