#!/usr/bin/env bash
# Emit the kernels whose cold compile time issue 5 bounds (the defaults on sm_90a) with the
# staged examples, then time their NVRTC phases (bench/nvrtc_phases.py).
#   bash bench/compile-phases.sh [G=.gpu] [REPS=6]
set -euo pipefail
G="${G:-.gpu}"
dir=$(mktemp -d)
em() {
  local name=$1; shift
  "$G/$1" "${@:2}" --emit "$dir/$name" > /dev/null 2>&1 || true
  cp "$dir/$name"/*sm_90a.cu "$dir/$name.cu"
}
em attn_d128_causal flash_attention --dtype bf16 --dim 128 --causal --wgmma --bm 128 --bn 128 --stages 2 --threads 256
em attn_d128 flash_attention --dtype bf16 --dim 128 --wgmma --bm 128 --bn 64 --stages 2 --threads 256
em attn_d64_causal flash_attention --dtype bf16 --dim 64 --causal --wgmma --bm 64 --bn 64 --stages 2 --threads 128
em attn_d64 flash_attention --dtype bf16 --dim 64 --wgmma --bm 128 --bn 128 --stages 2 --threads 256
em attn_d128_mma_sync flash_attention --dtype bf16 --dim 128 --no-wgmma --bm 128 --bn 64 --stages 2 --threads 256
em gemm_nt_wgmma gemm --dtype bf16 --layout nt --wgmma --bm 128 --bn 128 --bk 64 --stages 3 --threads 256 --panel 8
em gemm_nt_mma_sync gemm --dtype bf16 --layout nt --no-wgmma --bm 128 --bn 128 --bk 32 --stages 3 --threads 128
em softmax softmax --dtype bf16 --rows 8192 --cols 8192
REPS="${REPS:-6}" python3 "$(dirname "$0")/nvrtc_phases.py" "$dir"/*.cu
rm -rf "$dir"
