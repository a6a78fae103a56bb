#!/usr/bin/env bash
# The multi-GPU run (issue 16), from the repository root on a GPU machine with the `distributed`
# example staged in .gpu/ (../shared/tools/stage-gpu): for every rank count up to the GPUs (and
# 2 and 4 ranks sharing one GPU when there is only one), ours (bash scripts/dist-run.sh) and the
# peers (torchrun bench/dist_peers.py: NCCL + cuBLAS, torch symmetric memory) in the same run.
#   bash bench/dist-gpu-run.sh [ag-gemm|gemm-rs|all-reduce|all] [M N K]
# NCCL needs one GPU per rank, so on one GPU the peers run with one rank only.
set -uo pipefail
op="${1:-all}"
m="${2:-1024}"; n="${3:-3584}"; k="${4:-8192}"
export TILELANG_CACHE_DIR="${TILELANG_CACHE_DIR:-/tmp/tl-cache}"
export TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
ex=.gpu/examples/distributed
[ -x "$ex" ] || ex=target/release/examples/distributed
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
echo "== $gpus GPU(s)"; nvidia-smi topo -m 2>/dev/null | head -20
ops="$op"; [ "$op" = all ] && ops="ag-gemm gemm-rs all-reduce"
counts="2 4 8"; [ "$gpus" -le 1 ] && counts="2 4"
for o in $ops; do
  for r in $counts; do
    if [ "$gpus" -gt 1 ] && [ "$r" -gt "$gpus" ]; then continue; fi
    echo "== $o, $r ranks"
    bash scripts/dist-run.sh "$r" "$ex" --kernel "$o" --m "$m" --n "$n" --k "$k" --device cuda 2>&1 | grep -E "distributed |error" | tail -n 3
    peers=$r; [ "$gpus" -le 1 ] && peers=1
    torchrun --standalone --nproc_per_node "$peers" bench/dist_peers.py --op "$o" --m "$m" --n "$n" --k "$k" 2>&1 | grep -E "^dist_peers" | tail -n 8
  done
done
# The T.* all-gather on torch's symmetric memory (peer tables), beside NCCL, where the Python
# package is importable (python/tests/gpu-run.sh stage installs it) and there is a GPU per rank.
if python3 -c "import tilelang_rs, torch" 2>/dev/null; then
  for r in 2 4 8; do
    [ "$r" -gt "$gpus" ] && continue
    echo "== T.* all-gather on torch symmetric memory, $r ranks"
    torchrun --standalone --nproc_per_node "$r" python/tests/dist_torch.py 2>&1 | grep -E "^dist_torch|Error" | tail -n 3
  done
fi
