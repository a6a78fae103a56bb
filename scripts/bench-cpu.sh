#!/usr/bin/env bash
# CPU benchmark with its peers in the same run (numpy matmul, memcpy bandwidth).
#   bash scripts/bench-cpu.sh [-- extra args for the bench]
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -c "import numpy" 2>/dev/null || python3 -m pip install --quiet --user numpy
cargo run --release --example bench_cpu -- "$@"
