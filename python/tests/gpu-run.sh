#!/usr/bin/env bash
# The Python package on a CUDA GPU: the `gpu` tests (torch tensors, torch's current stream,
# torch.compile with the custom op, the profiler) and the benchmark beside torch.
#
# 1. Here (the development machine), after ../shared/tools/stage-gpu if the Rust examples
#    are to be compared too (stage-gpu empties .gpu/):
#      bash python/tests/gpu-run.sh stage
#    builds the wheel with maturin (release, abi3) into .gpu/wheels/. It needs
#    target/py-venv (made by scripts/test-python.sh) or maturin on PATH.
# 2. On the GPU machine (torch, numpy and pytest installed there; nothing is downloaded),
#    from the repository root with .gpu/ carried:
#      bash python/tests/gpu-run.sh [tests|calls|bench|all]      (default all)
#    installs the wheel into /tmp/tl-py (pip --target, --no-index) and runs
#    `pytest python/tests -m gpu` (a missing GPU or torch fails, it does not skip), then
#    python/bench/gpu_bench.py, then, when .gpu/gemm and .gpu/flash_attention are there, the
#    same tiles from Rust. QUICK=1 benchmarks one size each.
set -uo pipefail
cd "$(dirname "$0")/../.."
root="$(pwd)"
what="${1:-all}"
wheels="$root/.gpu/wheels"

if [ "$what" = stage ]; then
  set -e
  maturin="$root/target/py-venv/bin/maturin"
  [ -x "$maturin" ] || maturin="$(command -v maturin || true)"
  if [ -z "$maturin" ]; then
    echo "gpu-run: no maturin: run scripts/test-python.sh once (it makes target/py-venv)" >&2
    exit 1
  fi
  rm -rf "$wheels"
  mkdir -p "$wheels"
  (cd python && "$maturin" build --release -o "$wheels")
  ls -la "$wheels"
  exit 0
fi

python="${PYTHON:-python3}"
export PIP_ROOT_USER_ACTION=ignore PIP_DISABLE_PIP_VERSION_CHECK=1
site=/tmp/tl-py
wheel="$(ls "$wheels"/tilelang_rs-*.whl 2>/dev/null | head -n 1)"
if [ -z "$wheel" ]; then
  echo "gpu-run: no wheel in $wheels: run 'bash python/tests/gpu-run.sh stage' on the build machine and carry .gpu" >&2
  exit 1
fi
rm -rf "$site"
"$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" \
  "$wheel" || exit 1
export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export TILELANG_CACHE_DIR="${TILELANG_CACHE_DIR:-/tmp/tl-cache}"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
"$python" -c 'import tilelang_rs, torch; print("tilelang_rs", tilelang_rs.__version__, "from", tilelang_rs.__file__); print("torch", torch.__version__, torch.cuda.get_device_name())' || exit 1

rc=0
if [ "$what" = tests ] || [ "$what" = all ]; then
  echo "== pytest -m gpu"
  TILELANG_REQUIRE_GPU=1 "$python" -m pytest python/tests -m gpu -q -p no:cacheprovider \
    -o addopts="" || rc=1
  echo "== pytest, the CPU tests with this torch (CPU tensors, the custom op on the CPU)"
  "$python" -m pytest python/tests/test_torch.py -m "not gpu" -q -p no:cacheprovider || rc=1
fi
if [ "$what" = calls ] || [ "$what" = all ]; then
  echo "== python/bench/call_breakdown.py (host time of a call, layer by layer)"
  "$python" python/bench/call_breakdown.py || rc=1
fi
if [ "$what" = bench ] || [ "$what" = all ]; then
  echo "== python/bench/gpu_bench.py"
  "$python" python/bench/gpu_bench.py ${QUICK:+--quick} || rc=1
  if [ -x .gpu/gemm ] && [ -x .gpu/flash_attention ]; then
    # The README GEMM's 32-deep k tile is mma.sync (wgmma needs 64); attention takes the
    # compiler's choice in both (wgmma on sm_90a).
    echo "== the same tiles from Rust (.gpu/gemm, .gpu/flash_attention)"
    for n in 4096 8192; do
      .gpu/gemm --device cuda --m $n --n $n --k $n --layout nn --dtype f16 --bm 128 --bn 128 \
        --bk 32 --stages 3 --threads 128 --no-wgmma --reps 50 2>&1 | tail -n 1
    done
    for c in "" --causal; do
      .gpu/flash_attention --device cuda --batch 4 --heads 16 --seq 4096 --dim 128 --dtype f16 \
        --bm 128 --bn 64 --stages 2 --threads 256 --reps 30 $c 2>&1 | tail -n 1
      .gpu/flash_attention --device cuda --batch 8 --heads 16 --seq 2048 --dim 64 --dtype f16 \
        --bm 128 --bn 64 --stages 2 --threads 256 --reps 30 $c 2>&1 | tail -n 1
    done
  fi
fi
exit $rc
