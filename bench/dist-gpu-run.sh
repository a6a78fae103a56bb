#!/usr/bin/env bash
# The multi-GPU run (issue 16), from the repository root on a GPU machine with the `distributed`
# example staged in .gpu/ (../shared/tools/stage-gpu --example distributed) and, for the T.*
# interop check, the wheel in .gpu/wheels (bash python/tests/gpu-run.sh stage). Ours and the
# peers (torchrun bench/dist_peers.py: NCCL, cuBLAS, torch symmetric memory) in the same run.
#
#   bash bench/dist-gpu-run.sh [PHASE...]      (default: smoke fault torch perf sweep)
#
#   smoke  every kernel, small shapes, on 2 and all GPUs, and 2 ranks sharing one GPU
#   perf   AG+GEMM and GEMM+RS at tensor-parallel shapes of a large transformer (M = 8192
#          tokens, hidden 8192, MLP 28672, sharded over the ranks) beside NCCL+cuBLAS and
#          torch's fused symmetric-memory ops
#   sweep  all-gather bus bandwidth 4 KiB..256 MiB per rank and all-reduce latency
#          8 KiB..1 MiB, beside NCCL (and torch's one-shot all-reduce)
#   p2p    the distributed copies' bandwidth, 4 KiB..256 MiB per rank, on a pair and to all
#          peers at once: the all-gather pushed or pulled, by blocks or by warps
#          (--transfer), and moved by the copy engines (all-gather-ce), beside NCCL's
#          send/recv and all-gather; P2P_SIZES overrides the sizes (bytes)
#   ce     the copy engines' all-gather alone: checked at an odd size (every call, back to
#          back) on 2 and all GPUs and 2 ranks sharing one GPU, timed at 16 and 256 MiB
#   b2b    calls queued back to back with no host barrier between (the kernels' entry
#          handshake orders each against the peers' previous call): the all-gather at small
#          and large messages, AG+GEMM and GEMM+RS at one perf shape each, on all GPUs, beside
#          NCCL (+cuBLAS) timed in the same run
#   moe    the MoE all-to-all (dispatch, identity expert, combine, gather; every token must
#          come back): 4096 tokens x 7168 hidden, top-8 of 256 experts, on 2 and all GPUs,
#          a token sent per choice and (--dedup) once per destination rank, each beside
#          NCCL's all_to_all_single moving the same rows per peer
#   fault  one rank leaves mid-run; the others must fail with a clear error, none hang
#   torch  the T.* all-gather on torch's symmetric memory (peer tables) beside NCCL
#
# Every step has a time limit (STEP_LIMIT seconds, default 120) and the whole run stops
# starting steps after DEADLINE seconds (default 540), so one hang cannot eat the machine.
set -uo pipefail
cd "$(dirname "$0")/.."
export TILELANG_CACHE_DIR="${TILELANG_CACHE_DIR:-/tmp/tl-cache}"
export TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
export TILELANG_DIST_TIMEOUT="${TILELANG_DIST_TIMEOUT:-20}"
step_limit="${STEP_LIMIT:-120}"
deadline="${DEADLINE:-540}"
start=$(date +%s)
ex=.gpu/distributed
[ -x "$ex" ] || ex=target/release/examples/distributed
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
phases="${*:-smoke fault torch perf sweep}"

left() { [ $(( $(date +%s) - start )) -lt "$deadline" ]; }
# Every step's whole output goes to $logs/NN-name.log; the summary shows its result lines.
logs="${DIST_LOGS:-${OUT:-/tmp}/dist-logs}"
mkdir -p "$logs"
n_step=0
# step NAME COMMAND...: run with the step limit, say how it ended.
step() {
  local name="$1"; shift
  if ! left; then echo "== SKIPPED (deadline) $name"; return; fi
  n_step=$((n_step + 1))
  local log
  log="$logs/$(printf %02d "$n_step")-$(echo "$name" | tr -c 'A-Za-z0-9\n-' _).log"
  local t0
  t0=$(date +%s)
  timeout -k 5 "$step_limit" "$@" > "$log" 2>&1
  local rc=$?
  echo "== $name: rc=$rc in $(( $(date +%s) - t0 )) s"
  grep -E "^(\[rank [0-9]+\] )?(distributed |dist_peers|dist_torch|error|check FAILED)|Error|panicked" "$log" | head -n 12
  if [ "$rc" -ne 0 ]; then tail -n 8 "$log"; fi
}
# ours R ARGS...: our kernels, one process per rank; peers R ARGS...: NCCL, cuBLAS, torch.
ours() { local r="$1"; shift; step "$name" bash scripts/dist-run.sh "$r" "$ex" --device cuda "$@"; }
peers() { local r="$1"; shift; step "$name" torchrun --standalone --nproc_per_node "$r" bench/dist_peers.py "$@"; }

echo "== $gpus GPU(s), phases: $phases"
nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader
nvidia-smi topo -m 2>/dev/null | head -12
all=$gpus; [ "$all" -gt 8 ] && all=8

for phase in $phases; do
  case "$phase" in
  smoke)
    for k in ${SMOKE_KERNELS:-all-gather all-reduce all-reduce-two-shot ag-gemm gemm-rs}; do
      for r in $(printf '%s\n' 2 "$all" | sort -un); do
        [ "$r" -le "$gpus" ] || continue
        name="smoke $k $r ranks"; ours "$r" --kernel "$k" --m 200 --n 1000 --k 520 --reps 5 --check-rows 0 --check-every --back-to-back 10
      done
    done
    # Sizes every tensor's rows take as 16-byte units: the TMA, warp-specialized variant.
    for k in ag-gemm gemm-rs; do
      for ws in "" --no-ws; do
        name="smoke $k aligned $ws $all ranks"; ours "$all" --kernel "$k" --m 512 --n 1024 --k 512 --reps 5 --check-rows 0 --check-every --back-to-back 10 $ws
      done
    done
    name="smoke gemm-rs bf16 partials aligned $all ranks"; ours "$all" --kernel gemm-rs --m 512 --n 1024 --k 512 --reps 5 --check-rows 0 --check-every --partials bf16
    # Two processes on one GPU: the protocol without NVLink.
    step "smoke ag-gemm 2 ranks on one GPU" env CUDA_VISIBLE_DEVICES=0 bash scripts/dist-run.sh 2 "$ex" --device cuda --kernel ag-gemm --m 200 --n 1000 --k 520 --reps 5 --check-rows 0
    step "smoke all-gather 4 ranks on one GPU" env CUDA_VISIBLE_DEVICES=0 bash scripts/dist-run.sh 4 "$ex" --device cuda --kernel all-gather --n 100000 --reps 5
    ;;
  perf)
    # Column-parallel (AG+GEMM): per rank A [8192/R, 8192], B [N/R, 8192].
    # Row-parallel (GEMM+RS): per rank A [8192, K/R] (R row blocks of 8192/R), B [8192, K/R].
    # PERF_KERNELS and PERF_RANKS pick (default: both kernels, 8/4/2 ranks where there are
    # GPUs), TILES sets our GEMM tiles (BMxBNxBK:STAGES:THREADS), PERF_WS=1 adds runs without
    # the producer warpgroup (--no-ws), PERF_OUT=bf16 adds AG+GEMM runs with a bf16 C (the
    # peers' output type; ours is f32 by default), PERF_PANEL=N adds runs rasterized in panels
    # of N row tiles (the default: 8)
    # (--panel). GEMM+RS also runs with bf16 partials.
    for r in ${PERF_RANKS:-$(for v in 8 4 2; do [ "$v" -le "$gpus" ] && echo "$v"; done)}; do
      m=$((8192 / r))
      for kern in ${PERF_KERNELS:-ag-gemm gemm-rs}; do
        for big in 8192 28672; do
          if [ "$kern" = ag-gemm ]; then
            name="perf ag-gemm ours R=$r N=$big"; ours "$r" --kernel ag-gemm --m "$m" --n $((big / r)) --k 8192 --check-rows 16 ${TILES:+--tiles "$TILES"}
            if [ -n "${PERF_PANEL:-}" ]; then name="perf ag-gemm ours panel $PERF_PANEL R=$r N=$big"; ours "$r" --kernel ag-gemm --m "$m" --n $((big / r)) --k 8192 --check-rows 16 --panel "$PERF_PANEL" ${TILES:+--tiles "$TILES"}; fi
            if [ -n "${PERF_WS:-}" ]; then name="perf ag-gemm ours no-ws R=$r N=$big"; ours "$r" --kernel ag-gemm --m "$m" --n $((big / r)) --k 8192 --check-rows 16 --no-ws ${TILES:+--tiles "$TILES"}; fi
            if [ -n "${PERF_OUT:-}" ]; then name="perf ag-gemm ours out $PERF_OUT R=$r N=$big"; ours "$r" --kernel ag-gemm --m "$m" --n $((big / r)) --k 8192 --check-rows 16 --out "$PERF_OUT" ${TILES:+--tiles "$TILES"}; fi
            name="perf ag-gemm peers R=$r N=$big"; peers "$r" --op ag-gemm --shape "$m,$((big / r)),8192"
          else
            name="perf gemm-rs ours R=$r K=$big"; ours "$r" --kernel gemm-rs --m "$m" --n 8192 --k $((big / r)) --check-rows 8 ${TILES:+--tiles "$TILES"}
            name="perf gemm-rs ours bf16 partials R=$r K=$big"; ours "$r" --kernel gemm-rs --m "$m" --n 8192 --k $((big / r)) --check-rows 8 --partials bf16 ${TILES:+--tiles "$TILES"}
            if [ -n "${PERF_PANEL:-}" ]; then name="perf gemm-rs ours bf16 partials panel $PERF_PANEL R=$r K=$big"; ours "$r" --kernel gemm-rs --m "$m" --n 8192 --k $((big / r)) --check-rows 8 --partials bf16 --panel "$PERF_PANEL" ${TILES:+--tiles "$TILES"}; fi
            if [ -n "${PERF_WS:-}" ]; then name="perf gemm-rs ours bf16 partials no-ws R=$r K=$big"; ours "$r" --kernel gemm-rs --m "$m" --n 8192 --k $((big / r)) --check-rows 8 --partials bf16 --no-ws ${TILES:+--tiles "$TILES"}; fi
            name="perf gemm-rs peers R=$r K=$big"; peers "$r" --op gemm-rs --shape "$m,8192,$((big / r))"
          fi
        done
      done
    done
    ;;
  sweep)
    for r in $(for v in 2 4 8; do [ "$v" -le "$gpus" ] && echo "$v"; done); do
      for bytes in 4096 65536 1048576 16777216 268435456; do
        name="sweep all-gather ours R=$r bytes=$bytes"; ours "$r" --kernel all-gather --n $((bytes / 4)) --reps 20 --check-rows 0 --call-timeout 10
      done
      name="sweep all-gather nccl R=$r"; peers "$r" --op all-gather --sweep 1024,16384,262144,4194304,67108864
      for bytes in 8192 65536 262144 1048576; do
        name="sweep all-reduce ours R=$r bytes=$bytes"; ours "$r" --kernel all-reduce --n $((bytes / 4)) --reps 50 --call-timeout 10
        name="sweep all-reduce-two-shot ours R=$r bytes=$bytes"; ours "$r" --kernel all-reduce-two-shot --n $((bytes / 4)) --reps 50 --call-timeout 10
      done
      name="sweep all-reduce nccl R=$r"; peers "$r" --op all-reduce --sweep 2048,16384,65536,262144 --reps 50
    done
    ;;
  p2p)
    sizes="${P2P_SIZES:-4096 65536 1048576 16777216 268435456}"
    floats=$(for b in $sizes; do echo $((b / 4)); done | paste -sd,)
    for r in $(printf '%s\n' 2 "$all" | sort -un); do
      [ "$r" -le "$gpus" ] || continue
      # Each way checked first at an odd size, every call and 5 back to back.
      for t in put-block put-warp get-block get-warp; do
        name="p2p check $t R=$r"; ours "$r" --kernel all-gather --transfer "$t" --n 100003 --reps 5 --check-rows 0 --check-every --back-to-back 5
      done
      name="p2p check copy engines R=$r"; ours "$r" --kernel all-gather-ce --n 100003 --reps 5 --check-rows 0 --check-every --back-to-back 5
      for bytes in $sizes; do
        for t in put-block put-warp get-block get-warp; do
          name="p2p $t R=$r bytes=$bytes"; ours "$r" --kernel all-gather --transfer "$t" --n $((bytes / 4)) --reps 20 --check-rows 0 --call-timeout 10
        done
        name="p2p copy-engines R=$r bytes=$bytes"; ours "$r" --kernel all-gather-ce --n $((bytes / 4)) --reps 20 --check-rows 0 --call-timeout 10
      done
      name="p2p nccl send-recv R=$r"; peers "$r" --op sendrecv --sweep "$floats"
      name="p2p nccl all-gather R=$r"; peers "$r" --op all-gather --sweep "$floats"
    done
    step "p2p copy engines 2 ranks on one GPU" env CUDA_VISIBLE_DEVICES=0 bash scripts/dist-run.sh 2 "$ex" --device cuda --kernel all-gather-ce --n 100003 --reps 5 --check-rows 0 --check-every --back-to-back 5
    ;;
  ce)
    # The copy engines alone (the p2p phase's copy-engine rows): checked every call and back
    # to back at an odd size, then timed at 16 and 256 MiB per rank.
    for r in $(printf '%s\n' 2 "$all" | sort -un); do
      [ "$r" -le "$gpus" ] || continue
      name="ce check R=$r"; ours "$r" --kernel all-gather-ce --n 100003 --reps 5 --check-rows 0 --check-every --back-to-back 5
      for bytes in 16777216 268435456; do
        name="ce R=$r bytes=$bytes"; ours "$r" --kernel all-gather-ce --n $((bytes / 4)) --reps 20 --check-rows 0 --call-timeout 10
      done
    done
    step "ce 2 ranks on one GPU" env CUDA_VISIBLE_DEVICES=0 bash scripts/dist-run.sh 2 "$ex" --device cuda --kernel all-gather-ce --n 100003 --reps 5 --check-rows 0 --check-every --back-to-back 5
    ;;
  b2b)
    r=$all; m=$((8192 / r))
    for bytes in 4096 1048576 16777216; do
      name="b2b all-gather ours R=$r bytes=$bytes"; ours "$r" --kernel all-gather --n $((bytes / 4)) --reps 20 --back-to-back 50 --check-rows 0 --call-timeout 10
    done
    name="b2b all-gather nccl R=$r"; peers "$r" --op all-gather --sweep 1024,262144,4194304
    name="b2b ag-gemm ours R=$r N=8192"; ours "$r" --kernel ag-gemm --m "$m" --n $((8192 / r)) --k 8192 --check-rows 16 --back-to-back 20
    name="b2b ag-gemm peers R=$r N=8192"; peers "$r" --op ag-gemm --shape "$m,$((8192 / r)),8192"
    name="b2b gemm-rs ours R=$r K=8192"; ours "$r" --kernel gemm-rs --m "$m" --n 8192 --k $((8192 / r)) --check-rows 8 --back-to-back 20
    name="b2b gemm-rs peers R=$r K=8192"; peers "$r" --op gemm-rs --shape "$m,8192,$((8192 / r))"
    ;;
  moe)
    for r in $(printf '%s\n' 2 "$all" | sort -un); do
      [ "$r" -le "$gpus" ] || continue
      name="moe ours R=$r"; ours "$r" --kernel moe --m 4096 --k 7168 --topk 8 --experts 256 --reps 10 --call-timeout 20
      name="moe nccl all-to-all R=$r"; peers "$r" --op all-to-all --shape "$((4096 * 8 / r)),1,7168" --reps 10
      # Once per destination rank: with this routing every token reaches every rank, so 4096
      # rows per peer instead of 4096·8/R (NCCL timed moving as many).
      name="moe ours dedup R=$r"; ours "$r" --kernel moe --dedup --m 4096 --k 7168 --topk 8 --experts 256 --reps 10 --call-timeout 20
      name="moe nccl all-to-all dedup rows R=$r"; peers "$r" --op all-to-all --shape "4096,1,7168" --reps 10
    done
    ;;
  fault)
    # Rank 1 leaves after the host barrier of call 4, so the others' kernels wait on it. No
    # dist-run.sh here (it stops every rank as soon as one fails): each rank runs to its own
    # end, and each must end, with an error that names the problem, well within the limit.
    if left; then
      echo "== fault: rank 1 of $all leaves before call 4"
      port=$((29600 + RANDOM % 1000))
      pids=()
      for ((r = 0; r < all; r++)); do
        RANK=$r WORLD_SIZE=$all LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
          timeout -k 5 90 "$ex" --device cuda --kernel all-gather --n 1048576 --reps 10 \
          --kill-rank 1 --kill-at 4 --call-timeout 5 > "/tmp/fault.$r" 2>&1 &
        pids+=($!)
      done
      t0=$(date +%s)
      for ((r = 0; r < all; r++)); do
        wait "${pids[$r]}"; rc=$?
        echo "-- fault rank $r: rc=$rc after $(( $(date +%s) - t0 )) s: $(tail -n 2 /tmp/fault.$r | tr '\n' ' ')"
      done
    fi
    ;;
  torch)
    if python3 -c "import sys; sys.exit(0)" && ls .gpu/wheels/tilelang_rs-*.whl >/dev/null 2>&1; then
      rm -rf /tmp/tl-py
      python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/tl-py .gpu/wheels/tilelang_rs-*.whl
      for r in $(printf '%s\n' 2 "$all" | sort -un); do
        [ "$r" -le "$gpus" ] || continue
        step "torch T.* all-gather R=$r" env PYTHONPATH=/tmp/tl-py torchrun --standalone --nproc_per_node "$r" python/tests/dist_torch.py
      done
    else
      echo "== torch: no wheel in .gpu/wheels"
    fi
    ;;
  *) echo "unknown phase $phase" ;;
  esac
done
echo "== done in $(( $(date +%s) - start )) s"
