#!/usr/bin/env bash
# The whole test suite, from a fresh clone on Linux with Rust installed:
#   bash scripts/test.sh
# It installs what the tests need (the CUDA compiler libraries from PyPI wheels, unpacked under
# target/, so generated CUDA is compiled even without a GPU), then runs formatting, lints and
# every test, then the Python package's tests (scripts/test-python.sh: the wheel built with
# maturin into a virtualenv under target/py-venv, pytest on numpy arrays; torch's tests run on
# the GPU machine). Nothing is installed system-wide, except clang and lld for the AMD tests
# (scripts/install-amd-tools.sh: `apt-get install clang-22 lld-22` when run as root and no
# clang >= 20 with the AMDGPU target is found).
set -euo pipefail
cd "$(dirname "$0")/.."

command -v cc >/dev/null || { echo "error: no C compiler (cc); install gcc or clang" >&2; exit 1; }

if [ -x scripts/install-cuda-tools.sh ] || [ -f scripts/install-cuda-tools.sh ]; then
  # Prints `export VAR=...` lines for the unpacked toolchain.
  eval "$(bash scripts/install-cuda-tools.sh)"
fi

# clang >= 20 with the amdgcn target and ld.lld for the AMD compile tests (installed with
# apt-get as root when missing); prints TILELANG_CLANG and TILELANG_REQUIRE_CLANG=1 when there
# is one, so those tests fail instead of skipping. Without one it says why, and they skip.
amd_env="$(bash scripts/install-amd-tools.sh)"
eval "$amd_env"

# pycute (pure Python, from the nvidia-cutlass wheel) for the layout differential test; prints
# TILELANG_PYCUTE and TILELANG_REQUIRE_PYCUTE=1 when it is unpacked, else the test skips.
eval "$(bash scripts/install-pycute.sh)"

cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
cargo test --workspace --release
# The Python package: its wheel built and installed in target/py-venv, then pytest.
bash scripts/test-python.sh
