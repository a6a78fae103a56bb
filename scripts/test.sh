#!/usr/bin/env bash
# The whole test suite, from a fresh clone on Linux with Rust installed:
#   bash scripts/test.sh
# It installs what the tests need (the CUDA compiler libraries from PyPI wheels, unpacked under
# target/, so generated CUDA is compiled even without a GPU), then runs formatting, lints and
# every test. Nothing is installed system-wide.
set -euo pipefail
cd "$(dirname "$0")/.."

command -v cc >/dev/null || { echo "error: no C compiler (cc); install gcc or clang" >&2; exit 1; }

if [ -x scripts/install-cuda-tools.sh ] || [ -f scripts/install-cuda-tools.sh ]; then
  # Prints `export VAR=...` lines for the unpacked toolchain.
  eval "$(bash scripts/install-cuda-tools.sh)"
fi

cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
cargo test --workspace --release
