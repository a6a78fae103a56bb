#!/usr/bin/env bash
# Runs on the GPU machine, from the repository root, with the binaries staged in .gpu/
# (../shared/tools/stage-gpu). Checks every example on the GPU at odd sizes, then times the
# kernels the issues name against their peers (torch / cuBLAS / FA2) in the same run.
#   bash bench/gpu-run.sh [check|compile|perf|attn|wgmma|hopper|tma|ws|odd|pingpong|fp8|fp8-sweep|softmax-long|overlap|overlap-regs|jit|three-wg|tilelang-attn|attn-d128|py-vs-rust|fair|fair-fp8|sanitize|big|tilelang|all]
# `sanitize` runs every example at odd sizes under compute-sanitizer (memcheck, racecheck,
# synccheck, initcheck) and exits non-zero on any report (not part of `all`).
# `big` checks tensors of more than 2^31 elements (64-bit offsets) and the largest symbolic size
# (not part of `all`; about 30 GB of GPU memory and 60 GB of host memory for the references).
set -uo pipefail
what="${1:-all}"
# TUNE=--tune autotunes the GEMM and attention tiles (results cached under TILELANG_CACHE_DIR).
TUNE="${TUNE:-}"
G=.gpu
export TILELANG_CACHE_DIR="${TILELANG_CACHE_DIR:-/tmp/tl-cache}"
out="${OUT:-/tmp}"
log() { echo "== $*"; }
run() { echo "\$ $*"; "$@" 2>&1 | tail -n 3; }
# One checked run: its last line, and on failure its exit status and tail; counts `fails`.
chk() { echo "\$ $*"; "$@" > /tmp/chk.out 2>&1; rc=$?; tail -n 1 /tmp/chk.out; [ $rc = 0 ] || { fails=$((fails+1)); echo "FAILED (exit $rc)"; tail -n 5 /tmp/chk.out; }; }
# `chk` of the bf16 GEMM example in the NT, NN and TN layouts with the code path $1 and the
# options after it (T, the time limit, set by the section).
gemm_layouts() { local be=$1; shift; for l in nt nn tn; do TILELANG_BACKEND=$be chk ${T:-} $G/gemm --device cuda "$@" --layout $l --dtype bf16; done; }

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
python3 -c 'import torch; print("torch", torch.__version__, torch.cuda.get_device_name())'

if [ "$what" = big ]; then
  # More than 2^31 elements: elementwise on [65537, 32769] (2^31 + 98305 elements, tiles
  # partial at the right edge), softmax and rmsnorm on rows of 32768 and 32771 columns (the
  # register-row kernel and the chunked one), each in both NVIDIA code paths; then a 1-D
  # elementwise of the largest symbolic size, 2^31 - 2^24, in blocks of 1000 that overhang the
  # end, and the refusal of one element more. Each run checks its output against a host
  # reference; any failure (or a passing run past the largest size) makes the exit non-zero.
  fails=0
  chk() { echo "\$ $*"; "$@" > /tmp/big.out 2>&1; rc=$?; tail -n 1 /tmp/big.out; [ $rc = 0 ] || { fails=$((fails+1)); echo "FAILED (exit $rc)"; tail -n 5 /tmp/big.out; }; }
  for be in ${BIG_BACKENDS:-ptx cuda}; do
    log "more than 2^31 elements (TILELANG_BACKEND=$be)"
    export TILELANG_BACKEND=$be
    chk $G/elementwise --device cuda --rows 65537 --n 32769 --dtype bf16 --reps 3
    chk $G/softmax --device cuda --rows 65537 --cols 32768 --dtype bf16 --reps 3
    chk $G/rmsnorm --device cuda --rows 65537 --cols 32768 --dtype bf16 --reps 3
    chk $G/softmax --device cuda --rows 65531 --cols 32771 --dtype bf16 --chunk 4096 --block-rows 1 --reps 3
    chk $G/elementwise --device cuda --n 2130706432 --dtype bf16 --block 1000 --reps 3
  done
  unset TILELANG_BACKEND
  echo "\$ elementwise --n 2130706433 (one past the largest size: must be refused)"
  if $G/elementwise --device cuda --n 2130706433 --dtype bf16 --reps 1 > /tmp/big.out 2>&1; then
    fails=$((fails+1)); echo "FAILED: ran past the largest symbolic size"
  else
    grep -m1 "2^31 - 2^24" /tmp/big.out || { fails=$((fails+1)); echo "FAILED: no size message"; tail -n 3 /tmp/big.out; }
  fi
  echo "big-size failures: $fails"
  [ "$fails" = 0 ] || exit 1
fi

if [ "$what" = sanitize ]; then
  # Every example at odd sizes (tails in every dimension), under each compute-sanitizer tool,
  # each command in its own process; both NVIDIA code paths (PTX through nvJitLink and CUDA C++
  # through NVRTC) unless SANITIZE_BACKENDS says otherwise. A run fails when the sanitizer or
  # the example exits non-zero, when any SUMMARY line counts an error, hazard or warning, or
  # when there is no summary at all (the tool did not run). Logs: $out/sanitize-*.log.
  cs="${COMPUTE_SANITIZER:-$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)}"
  [ -x "$cs" ] || { echo "error: compute-sanitizer not found (set COMPUTE_SANITIZER)"; exit 2; }
  "$cs" --version | tail -n 1
  tools="${SANITIZE_TOOLS:-memcheck racecheck synccheck initcheck}"
  backends="${SANITIZE_BACKENDS:-ptx cuda}"
  cmds=(
    "gemm --m 257 --n 129 --k 65 --layout nn --dtype bf16"
    "gemm --m 257 --n 129 --k 65 --layout nt --dtype bf16"
    "gemm --m 257 --n 129 --k 65 --layout tn --dtype bf16"
    "gemm --m 131 --n 67 --k 99 --layout nt --dtype f16 --out-dtype f32 --no-wgmma"
    "gemm --m 131 --n 67 --k 99 --layout nn --dtype bf16 --no-wgmma --bm 64 --bn 64 --bk 32 --stages 3"
    "gemm --m 97 --n 75 --k 33 --dtype f32"
    "gemm --m 300 --n 200 --k 70 --layout nt --dtype bf16 --persistent --panel 2"
    "gemm --m 200 --n 136 --k 130 --layout nt --dtype bf16 --wgmma --overlap --bm 128 --bn 128 --bk 64 --threads 256 --stages 3"
    "gemm --m 300 --n 257 --k 1001 --layout nt --dtype bf16"
    "gemm --m 257 --n 136 --k 4104 --layout nt --dtype bf16"
    "gemm --m 200 --n 999 --k 2100 --layout nn --dtype bf16"
    "fp8_gemm --m 300 --n 256 --k 1001 --scaling tensor"
    "elementwise --n 100003 --dtype bf16"
    "elementwise --n 4099 --dtype f32 --block 1000"
    "softmax --rows 37 --cols 3001 --dtype bf16"
    "softmax --rows 13 --cols 1003 --dtype f32 --chunk 256 --block-rows 4"
    "rmsnorm --rows 37 --cols 3001 --dtype bf16"
    "rmsnorm --rows 13 --cols 20001 --dtype f32"
    "flash_attention --batch 1 --heads 2 --seq 129 --dim 64 --dtype bf16"
    "flash_attention --batch 1 --heads 2 --seq 129 --dim 64 --dtype bf16 --causal"
    "flash_attention --batch 1 --heads 1 --seq 77 --dim 128 --dtype bf16 --causal"
    "flash_attention --batch 1 --heads 1 --seq 77 --dim 128 --dtype bf16 --no-wgmma"
    "flash_attention --batch 1 --heads 2 --seq 45 --dim 32 --dtype f32 --causal"
  )
  mkdir -p "$out"
  fails=0; runs=0
  for be in $backends; do
    for tool in $tools; do
      log "compute-sanitizer --tool $tool (TILELANG_BACKEND=$be)"
      i=0
      for c in "${cmds[@]}"; do
        i=$((i+1))
        l="$out/sanitize-$be-$tool-$i.log"
        # A fresh cache per backend, so every kernel is built by this backend.
        TILELANG_BACKEND=$be TILELANG_CACHE_DIR="/tmp/tl-sanitize-$be" \
          "$cs" --tool "$tool" --error-exitcode 86 --print-limit 50 $G/$c --device cuda --reps 1 > "$l" 2>&1
        rc=$?
        runs=$((runs+1))
        bad=""
        [ $rc = 0 ] || bad="exit $rc"
        grep -q "SUMMARY:" "$l" || bad="${bad:+$bad, }no sanitizer summary"
        if grep -E "SUMMARY:" "$l" | grep -qE "SUMMARY: *[1-9]|[(,] *[1-9][0-9]* (error|warning|hazard)"; then
          bad="${bad:+$bad, }reports"
        fi
        if [ -n "$bad" ]; then
          fails=$((fails+1))
          echo "FAILED ($bad): $c   [$l]"
          grep -E "=========" "$l" | head -n 20
        else
          echo "ok: $c   ($(grep -E "SUMMARY:" "$l" | sed 's/=* *//' | tr '\n' ' '))"
        fi
      done
    done
  done
  echo "sanitize: $runs runs, $fails failed"
  [ $fails = 0 ] && exit 0 || exit 1
fi



if [ "$what" = check ] || [ "$what" = all ]; then
  log "runtime smoke"
  run $G/cuda_smoke
  log "correctness at odd sizes (each line: the example's summary; exit status checked)"
  fails=0
  chk() { echo "\$ $*"; "$@" > /tmp/chk.out 2>&1; rc=$?; tail -n 2 /tmp/chk.out; [ $rc = 0 ] || { fails=$((fails+1)); echo "FAILED (exit $rc)"; }; }
  for l in nn nt tn; do
    chk $G/gemm --device cuda --m 1000 --n 999 --k 1003 --layout $l --dtype bf16
    chk $G/gemm --device cuda --m 257 --n 129 --k 65 --layout $l --dtype f16 --out-dtype f32
  done
  chk $G/gemm --device cuda --m 333 --n 301 --k 211 --dtype f32
  chk $G/elementwise --device cuda --n 1000003 --dtype bf16
  chk $G/softmax --device cuda --rows 1000 --cols 3001 --dtype bf16
  chk $G/softmax --device cuda --rows 77 --cols 20000 --dtype f32
  chk $G/rmsnorm --device cuda --rows 1000 --cols 3001 --dtype bf16
  chk $G/rmsnorm --device cuda --rows 33 --cols 17000 --dtype f32
  chk $G/softmax --device cuda --rows 100 --cols 4096 --dtype bf16 --chunk 1024
  for c in "" --causal; do
    chk $G/flash_attention --device cuda --batch 2 --heads 3 --seq 1000 --dim 64 --dtype bf16 $c
    chk $G/flash_attention --device cuda --batch 1 --heads 2 --seq 777 --dim 128 --dtype bf16 $c
  done
  echo "correctness failures: $fails"
fi

if [ "$what" = compile ] || [ "$what" = all ]; then
  log "compile times (fresh cache, in one process)"
  $G/compile_times --device cuda
fi

if [ "$what" = perf ] || [ "$what" = all ]; then
  log "peers: copy bandwidth"
  python3 $G/torch_peers.py copy
  log "softmax / rmsnorm bf16"
  for shape in "8192 8192" "16384 4096"; do
    set -- $shape
    for k in softmax rmsnorm; do
      rm -rf /tmp/tl-cold; TILELANG_CACHE_DIR=/tmp/tl-cold $G/$k --device cuda --rows $1 --cols $2 --dtype bf16 --reps 100 2>&1 | tail -n 1
      TILELANG_CACHE_DIR=/tmp/tl-cold $G/$k --device cuda --rows $1 --cols $2 --dtype bf16 --reps 100 2>&1 | tail -n 1
      python3 $G/torch_peers.py $k $1 $2
    done
  done
  log "gemm bf16 nt"
  for n in 4096 8192; do
    $G/gemm --device cuda --m $n --n $n --k $n --layout nt --dtype bf16 --reps 50 $TUNE 2>&1 | tail -n 40
    python3 $G/torch_peers.py gemm $n $n $n --layout nt --dtype bf16
  done
fi

if [ "$what" = wgmma ]; then
  # Hopper warpgroup-MMA GEMM (opt-in; verified in the simulator and compiled in CI): first
  # correctness at odd sizes, each in its own process (a fault cannot poison the others), then
  # a few tile shapes against cuBLAS.
  log "wgmma gemm: correctness at odd sizes"
  fails=0
  for cfg in "64 128 128 3 64" "128 128 256 3 64" "128 256 256 3 64" "128 256 256 2 128"; do
    set -- $cfg
    echo "\$ gemm --wgmma --bm $1 --bn $2 --threads $3 --stages $4 --bk $5 (1000x999x1003, 257x129x65)"
    for shape in "1000 999 1003" "257 129 65"; do
      set -- $cfg $shape
      $G/gemm --device cuda --layout nt --dtype bf16 --wgmma --bm $1 --bn $2 --threads $3 \
        --stages $4 --bk $5 --m $6 --n $7 --k $8 > /tmp/chk.out 2>&1; rc=$?
      tail -n 1 /tmp/chk.out; [ $rc = 0 ] || { fails=$((fails+1)); echo "FAILED (exit $rc)"; tail -n 5 /tmp/chk.out; }
    done
  done
  echo "wgmma correctness failures: $fails"
  log "wgmma gemm: speed against cuBLAS"
  for n in 4096 8192; do
    for cfg in "128 256 256 3 64" "128 256 256 4 64" "128 128 256 4 64" "128 256 256 2 128" \
               "128 256 256 3 64 --panel 8"; do
      set -- $cfg
      $G/gemm --device cuda --m $n --n $n --k $n --layout nt --dtype bf16 --wgmma \
        --bm $1 --bn $2 --threads $3 --stages $4 --bk $5 ${6:-} ${7:-} --reps 50 2>&1 | tail -n 1
    done
    python3 $G/torch_peers.py gemm $n $n $n --layout nt --dtype bf16
  done
  log "gemm tuned with the wgmma tiles in the space (after the checks above pass)"
  if [ "$fails" = 0 ]; then
    for n in 4096 8192; do
      $G/gemm --device cuda --m $n --n $n --k $n --layout nt --dtype bf16 \
        --reps 50 --tune 2>&1 | grep -E "wgmma: true|^best|^gemm" | sort -t' ' -k1,1 | tail -n 12
    done
  else
    echo "skipped: wgmma correctness failures"
  fi
fi

if [ "$what" = hopper ]; then
  # Hopper paths that are new since the last run: wgmma attention (P from registers, V
  # MN-major) and the wgmma NN gemm (MN-major B). Correctness first, each in its own process.
  log "wgmma attention and NN gemm: correctness at odd sizes"
  fails=0
  for cfg in "64 64 128 2" "128 128 256 2" "128 64 256 3"; do
    set -- $cfg
    for c in "" --causal; do
      chk $G/flash_attention --device cuda --batch 2 --heads 3 --seq 1000 --dim 64 --dtype bf16 --wgmma --bm $1 --bn $2 --threads $3 --stages $4 $c
      chk $G/flash_attention --device cuda --batch 1 --heads 2 --seq 777 --dim 128 --dtype bf16 --wgmma --bm $1 --bn $2 --threads $3 --stages $4 $c
    done
  done
  for l in nn tn; do
    chk $G/gemm --device cuda --m 1000 --n 999 --k 1003 --layout $l --dtype bf16 --wgmma --bm 128 --bn 128 --bk 64 --threads 256 --stages 3
    chk $G/gemm --device cuda --m 257 --n 129 --k 65 --layout $l --dtype f16 --out-dtype f32 --wgmma --bm 64 --bn 128 --bk 64 --threads 128 --stages 2
  done
  # Overlapped wgmma (wait_group 1 across k steps; stages refilled one iteration later).
  for l in nt nn tn; do
    for st in 3 4; do
      chk $G/gemm --device cuda --m 1000 --n 999 --k 1003 --layout $l --dtype bf16 --wgmma --overlap --bm 128 --bn 128 --bk 64 --threads 256 --stages $st
    done
  done
  chk $G/gemm --device cuda --m 257 --n 129 --k 650 --layout nt --dtype f16 --out-dtype f32 --wgmma --overlap --bm 128 --bn 256 --bk 64 --threads 256 --stages 4
  echo "hopper correctness failures: $fails"
  log "defaults on this GPU (wgmma where it applies), not tuned; then overlapped tiles"
  for n in 4096 8192; do
    $G/gemm --device cuda --m $n --n $n --k $n --layout nt --dtype bf16 --reps 50 2>&1 | tail -n 1
    if [ "$fails" = 0 ]; then
      for cfg in "128 128 3" "128 128 4" "128 256 4"; do
        set -- $cfg
        $G/gemm --device cuda --m $n --n $n --k $n --layout nt --dtype bf16 --wgmma --overlap --bm $1 --bn $2 --bk 64 --threads 256 --stages $3 --panel 8 --reps 50 2>&1 | tail -n 1
      done
    fi
  done
  for l in nn tn; do
    $G/gemm --device cuda --m 8192 --n 8192 --k 8192 --layout $l --dtype bf16 --reps 50 2>&1 | tail -n 1
  done
  python3 $G/torch_peers.py gemm 4096 4096 4096 --layout nt --dtype bf16
  python3 $G/torch_peers.py gemm 8192 8192 8192 --layout nt --dtype bf16
  if [ "$fails" = 0 ]; then
    log "attention fwd bf16 tuned (mma.sync and wgmma tiles)"
    for cfg in "4 16 4096 128" "8 16 2048 64"; do
      set -- $cfg
      for c in "" --causal; do
        $G/flash_attention --device cuda --batch $1 --heads $2 --seq $3 --dim $4 --dtype bf16 $c --reps 30 2>&1 | tail -n 1
        $G/flash_attention --device cuda --batch $1 --heads $2 --seq $3 --dim $4 --dtype bf16 $c --reps 30 --tune 2>&1 | grep -E "wgmma: true|^best|^flash"
        python3 $G/torch_peers.py attn $1 $2 $3 $4 $c
      done
    done
  else
    echo "skipped: wgmma correctness failures"
  fi
  log "compile times (fresh cache, in one process)"
  $G/compile_times --device cuda
fi

if [ "$what" = tma ]; then
  # Hopper GEMM with TMA loads and mbarrier pipelines (the default on sm_90; TILELANG_TMA=0
  # keeps cp.async): correctness at odd sizes first, each in its own process, then speed with
  # and without TMA beside cuBLAS, at aligned sizes and at sizes that break the tile.
  log "tma gemm: correctness at odd sizes"
  fails=0
  for l in nt nn tn; do
    chk $G/gemm --device cuda --m 1000 --n 999 --k 1000 --layout $l --dtype bf16
    chk $G/gemm --device cuda --m 257 --n 129 --k 72 --layout $l --dtype f16 --out-dtype f32
    chk $G/gemm --device cuda --m 1000 --n 999 --k 1000 --layout $l --dtype bf16 --wgmma --overlap --bm 128 --bn 128 --bk 64 --threads 256 --stages 4
    chk $G/gemm --device cuda --m 777 --n 1001 --k 4104 --layout $l --dtype bf16 --wgmma --bm 128 --bn 256 --bk 64 --threads 256 --stages 3
    TILELANG_BACKEND=cuda chk $G/gemm --device cuda --m 1000 --n 999 --k 1000 --layout $l --dtype bf16
  done
  chk $G/gemm --device cuda --m 333 --n 301 --k 216 --dtype f32
  echo "tma correctness failures: $fails"
  log "tma gemm: speed (ours with TMA, ours with cp.async, cuBLAS)"
  for shape in "4096 4096 4096" "8192 8192 8192" "4096 8192 2048" "6144 6144 6144" "4097 4095 4104" "4096 4096 4104" "4095 4095 4095"; do
    set -- $shape
    for l in nt nn; do
      $G/gemm --device cuda --m $1 --n $2 --k $3 --layout $l --dtype bf16 --reps 30 2>&1 | tail -n 1
      TILELANG_TMA=0 $G/gemm --device cuda --m $1 --n $2 --k $3 --layout $l --dtype bf16 --reps 30 2>&1 | tail -n 1 | sed 's/^/[cp.async] /'
      python3 $G/torch_peers.py gemm $1 $2 $3 --layout $l --dtype bf16
    done
  done
fi

if [ "$what" = odd ]; then
  # Where sizes that are not multiples of the tile lose their time: each odd dimension alone
  # (M, N, K), the K whose rows are an odd number of 16-byte units (4104), and all together;
  # TILELANG_TMA_PITCH_ALIGN=128 stages inputs whose rows are not whole 128-byte lines too.
  # Then the kernel's own duration under ncu (the rest of the time is the pitched stagings).
  T="timeout ${WS_TIMEOUT:-120}"
  log "odd sizes: correctness (pitched stagings of 1, 2 and 4-byte aligned rows; odd-N epilogues)"
  fails=0
  for be in ptx cuda; do
    gemm_layouts $be --m 1001 --n 999 --k 1003
    TILELANG_TMA_PITCH_ALIGN=128 gemm_layouts $be --m 777 --n 1000 --k 4104
    TILELANG_BACKEND=$be chk $T $G/gemm --device cuda --m 300 --n 257 --k 1001 --layout nt --dtype f16 --out-dtype f32
    TILELANG_BACKEND=$be chk $T $G/fp8_gemm --device cuda --m 1000 --n 1000 --k 1001 --scaling tensor
  done
  echo "odd correctness failures: $fails"
  log "odd sizes: one dimension at a time (TFLOP/s, variant)"
  for shape in ${ODD_SHAPES:-4096,4096,4096 4095,4096,4096 4096,4095,4096 4096,4096,4095 4095,4095,4095 4096,4096,4104 4097,4095,4104}; do
    set -- ${shape//,/ }
    for l in nt nn; do
      $T $G/gemm --device cuda --m $1 --n $2 --k $3 --layout $l --dtype bf16 --reps 30 2>&1 | tail -n 1 | sed 's/^/[default] /'
      TILELANG_TMA_PITCH_ALIGN=128 $T $G/gemm --device cuda --m $1 --n $2 --k $3 --layout $l --dtype bf16 --reps 30 2>&1 | tail -n 1 | sed 's/^/[pitch128] /'
    done
    python3 $G/torch_peers.py gemm $1 $2 $3 --layout nt --dtype bf16
  done
fi

if [ "$what" = odd-ncu ]; then
  # The L2 promotion of the tensor maps (TILELANG_TMA_L2), then the GEMM kernel's own duration
  # and memory traffic under ncu, at the sizes whose rows are not whole 128-byte lines.
  T="timeout ${WS_TIMEOUT:-120}"
  for shape in ${ODD_L2:-4096,4096,4104 4096,4096,4096}; do
    set -- ${shape//,/ }
    for l2 in 0 64 128 256; do
      TILELANG_TMA_L2=$l2 $T $G/gemm --device cuda --m $1 --n $2 --k $3 --layout nt --dtype bf16 --reps 30 2>&1 | tail -n 1 | sed "s/^/[l2=$l2] /"
    done
  done
  ncu --version | tail -n 1
  for shape in ${ODD_NCU:-4096,4096,4096,nt 4096,4096,4104,nt 4096,4096,4104,nn 4096,4096,4095,nt}; do
    set -- ${shape//,/ }
    echo "\$ ncu gemm $1 $2 $3 $4"
    $T ncu --clock-control none -c 3 --metrics gpu__time_duration.sum,dram__bytes_read.sum,lts__t_sectors.sum,lts__t_requests.sum,lts__t_sector_hit_rate.pct \
      $G/gemm --device cuda --m $1 --n $2 --k $3 --layout $4 --dtype bf16 --reps 2 > /tmp/ncu.out 2>&1
    echo "exit $?"; grep -v "^==PROF==" /tmp/ncu.out | grep -E "^  [a-z_]|duration|dram|lts|==ERR|==WARN" | tail -n 14
  done
fi

if [ "$what" = kfit ]; then
  # The per-tile fixed cost of the Hopper GEMM: 4096x4096xK for several K, ours (default,
  # persistent, not persistent) and cuBLAS; time against K is a line whose intercept is what
  # every tile pays besides its k steps (prologue, epilogue, launch).
  T="timeout ${WS_TIMEOUT:-120}"
  for k in ${KFIT_K:-1024 2048 4096 8192}; do
    for mode in "" --persistent --no-persistent; do
      $T $G/gemm --device cuda --m 4096 --n 4096 --k $k --layout nt --dtype bf16 --reps 30 $mode 2>&1 | tail -n 1 | sed "s/^/[${mode:-default}] /"
    done
    python3 $G/torch_peers.py gemm 4096 4096 $k --layout nt --dtype bf16
  done
  if [ -n "${KFIT_NCU:-}" ] && command -v ncu > /dev/null; then
    for mode in --persistent --no-persistent; do
      echo "\$ ncu gemm 4096 4096 $KFIT_NCU $mode"
      $T ncu --clock-control none -k regex:tl_kernel -s 1 -c 1 --metrics gpu__time_duration.sum,dram__bytes_read.sum,lts__t_sector_hit_rate.pct,lts__t_requests.sum,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,smsp__warp_issue_stalled_long_scoreboard_per_warp_active.pct,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum \
        $G/gemm --device cuda --m 4096 --n 4096 --k $KFIT_NCU --layout nt --dtype bf16 --reps 2 $mode 2>&1 | grep -E "^ +[a-z_]+__|tl_kernel|==ERR" | sed 's/  */ /g'
    done
  fi
fi

if [ "$what" = pingpong ]; then
  # Warp-specialized attention with its two consumer warpgroups taking turns at the tensor
  # cores (FA3's ping-pong, TILELANG_PINGPONG=1; off by default) against the default
  # (unspecialized) kernel and cuDNN / FA2. Correctness first, in both code paths.
  T="timeout ${WS_TIMEOUT:-120}"
  fails=0
  for be in ptx cuda; do
    for c in "" --causal; do
      TILELANG_BACKEND=$be TILELANG_WS=1 TILELANG_PINGPONG=1 chk $T $G/flash_attention --device cuda --batch 1 --heads 2 --seq 1000 --dim 128 --dtype bf16 $c
      TILELANG_BACKEND=$be TILELANG_WS=1 TILELANG_PINGPONG=1 chk $T $G/flash_attention --device cuda --batch 2 --heads 3 --seq 777 --dim 64 --dtype bf16 $c
    done
  done
  echo "ping-pong correctness failures: $fails"
  if [ "$fails" = 0 ]; then
    # The fp8 GEMMs (promotion after each k tile: one warpgroup promotes while the other's
    # wgmma runs) and the bf16 GEMM, with and without turns.
    for be in ptx cuda; do
      for sc in tensor blocks; do
        TILELANG_BACKEND=$be TILELANG_PINGPONG=1 chk $T $G/fp8_gemm --device cuda --m 1000 --n 999 --k 4100 --scaling $sc
      done
      TILELANG_BACKEND=$be TILELANG_PINGPONG=1 chk $T $G/gemm --device cuda --m 1000 --n 999 --k 3000 --layout nt --dtype bf16
    done
    echo "ping-pong correctness failures (gemms): $fails"
    for shape in ${PP_GEMM:-8192,8192,8192 4096,4096,4096}; do
      set -- ${shape//,/ }
      for sc in tensor blocks; do
        for pp in 1 0; do
          TILELANG_PINGPONG=$pp $T $G/fp8_gemm --device cuda --m $1 --n $2 --k $3 --scaling $sc --reps 30 2>&1 | tail -n 1 | sed "s/^/[pingpong=$pp] /"
        done
      done
      python3 bench/fp8_peers.py tensor $1 $2 $3
      for pp in 1 0; do
        TILELANG_PINGPONG=$pp $T $G/gemm --device cuda --m $1 --n $2 --k $3 --layout nt --dtype bf16 --reps 30 2>&1 | tail -n 1 | sed "s/^/[pingpong=$pp] /"
      done
    done
    for cfg in ${PP_ATTN:-4,16,4096,128 8,16,2048,64 2,32,8192,128}; do
      set -- ${cfg//,/ }
      for c in "" --causal; do
        TILELANG_WS=1 TILELANG_PINGPONG=1 $T $G/flash_attention --device cuda --batch $1 --heads $2 --seq $3 --dim $4 --dtype bf16 $c --reps 30 2>&1 | tail -n 1 | sed 's/^/[ws+pingpong] /'
        TILELANG_WS=1 $T $G/flash_attention --device cuda --batch $1 --heads $2 --seq $3 --dim $4 --dtype bf16 $c --reps 30 2>&1 | tail -n 1 | sed 's/^/[ws] /'
        $T $G/flash_attention --device cuda --batch $1 --heads $2 --seq $3 --dim $4 --dtype bf16 $c --reps 30 2>&1 | tail -n 1 | sed 's/^/[default] /'
        python3 $G/torch_peers.py attn $1 $2 $3 $4 $c
      done
    done
  fi
fi

if [ "$what" = overlap ]; then
  # FlashAttention-3's overlap inside a warpgroup (--overlap-pv: P·V of key tile j-1 runs on
  # the tensor cores under tile j's softmax), unspecialized, with a producer warpgroup
  # (TILELANG_WS=1) and with ping-pong turns too, against the default and cuDNN / FA2.
  # Correctness first, at odd sizes in both code paths. Then the GEMM's register split
  # (TILELANG_WS_PRODUCER_REGS=24: TileLang's 24/240 against our 40/232).
  T="timeout ${WS_TIMEOUT:-120}"
  fails=0
  for be in ptx cuda; do
    for c in "" --causal; do
      for ws in 0 1; do
        TILELANG_BACKEND=$be TILELANG_WS=$ws chk $T $G/flash_attention --device cuda --batch 1 --heads 2 --seq 1000 --dim 128 --dtype bf16 --overlap-pv $c
        TILELANG_BACKEND=$be TILELANG_WS=$ws chk $T $G/flash_attention --device cuda --batch 2 --heads 3 --seq 777 --dim 64 --dtype bf16 --overlap-pv $c
      done
      TILELANG_BACKEND=$be TILELANG_WS=1 TILELANG_PINGPONG=1 chk $T $G/flash_attention --device cuda --batch 1 --heads 2 --seq 1000 --dim 128 --dtype bf16 --overlap-pv $c
    done
  done
  echo "overlap correctness failures: $fails"
  if [ "$fails" = 0 ]; then
    for cfg in ${OV_ATTN:-4,16,4096,128 8,16,2048,64 2,32,8192,128}; do
      set -- ${cfg//,/ }
      for c in "" --causal; do
        a="--device cuda --batch $1 --heads $2 --seq $3 --dim $4 --dtype bf16 $c --reps 30"
        $T $G/flash_attention $a 2>&1 | tail -n 1 | sed 's/^/[default] /'
        $T $G/flash_attention $a --overlap-pv 2>&1 | tail -n 1 | sed 's/^/[overlap] /'
        TILELANG_WS=1 $T $G/flash_attention $a --overlap-pv 2>&1 | tail -n 1 | sed 's/^/[ws+overlap] /'
        TILELANG_WS=1 TILELANG_PINGPONG=1 $T $G/flash_attention $a --overlap-pv 2>&1 | tail -n 1 | sed 's/^/[ws+pingpong+overlap] /'
        TILELANG_WS=1 $T $G/flash_attention $a --overlap-pv --bn 128 2>&1 | tail -n 1 | sed 's/^/[ws+overlap bn128] /'
        python3 $G/torch_peers.py attn $1 $2 $3 $4 $c
      done
    done
    for shape in ${OV_GEMM:-4096,4096,4096 6144,6144,6144}; do
      set -- ${shape//,/ }
      for regs in "" 24; do
        TILELANG_WS_PRODUCER_REGS=$regs $T $G/gemm --device cuda --m $1 --n $2 --k $3 --layout nt --dtype bf16 --reps 30 2>&1 | tail -n 1 | sed "s/^/[producer regs ${regs:-40}] /"
      done
      python3 $G/torch_peers.py gemm $1 $2 $3 --layout nt --dtype bf16
    done
  fi
fi

if [ "$what" = overlap-regs ]; then
  # The overlapped attention (--overlap-pv, producer warpgroup) where the consumers really get
  # 232 registers: the CUDA C++ code path, whose NVRTC keeps `setmaxnreg` (nvJitLink, which
  # assembles our PTX, drops it: ptxas C7504), so 128-key tiles fit without spills.
  T="timeout ${WS_TIMEOUT:-120}"
  fails=0
  for c in "" --causal; do
    TILELANG_BACKEND=cuda TILELANG_WS=1 chk $T $G/flash_attention --device cuda --batch 1 --heads 2 --seq 1000 --dim 128 --dtype bf16 --overlap-pv --bn 128 $c
  done
  echo "overlap-regs correctness failures: $fails"
  for cfg in ${OV_ATTN:-4,16,4096,128 2,32,8192,128}; do
    set -- ${cfg//,/ }
    for c in "" --causal; do
      a="--device cuda --batch $1 --heads $2 --seq $3 --dim $4 --dtype bf16 $c --reps 30"
      $T $G/flash_attention $a 2>&1 | tail -n 1 | sed 's/^/[default] /'
      for be in ptx cuda; do
        for bn in 64 128; do
          TILELANG_BACKEND=$be TILELANG_WS=1 $T $G/flash_attention $a --overlap-pv --bn $bn 2>&1 | tail -n 1 | sed "s/^/[$be ws+overlap bn$bn] /"
        done
        TILELANG_BACKEND=$be TILELANG_WS=1 TILELANG_PINGPONG=1 $T $G/flash_attention $a --overlap-pv --bn 128 2>&1 | tail -n 1 | sed "s/^/[$be ws+pingpong+overlap bn128] /"
      done
      python3 $G/torch_peers.py attn $1 $2 $3 $4 $c
    done
  done
  for be in ptx cuda; do
    TILELANG_BACKEND=$be $T $G/gemm --device cuda --m 4096 --n 4096 --k 4096 --layout nt --dtype bf16 --reps 30 2>&1 | tail -n 1 | sed "s/^/[$be] /"
  done
fi

if [ "$what" = jit ]; then
  # PTX with `setmaxnreg` assembled whole by ptxas (code=ptx-ptxas) or the CUDA driver
  # (code=ptx-jit, where no ptxas is found; nvJitLink drops
  # the instruction): the new d128 attention default (producer warpgroup, 128-key tiles, P.V
  # under the next softmax) and every warp-specialized GEMM. Correctness in both code paths
  # at odd sizes, then speed beside cuDNN / cuBLAS / cuBLASLt, then compute-sanitizer.
  T="timeout ${WS_TIMEOUT:-120}"
  fails=0
  for be in ptx cuda; do
    for c in "" --causal; do
      TILELANG_BACKEND=$be chk $T $G/flash_attention --device cuda --batch 1 --heads 2 --seq 1000 --dim 128 --dtype bf16 $c
      TILELANG_BACKEND=$be chk $T $G/flash_attention --device cuda --batch 2 --heads 3 --seq 777 --dim 128 --dtype bf16 $c
      TILELANG_BACKEND=$be chk $T $G/flash_attention --device cuda --batch 1 --heads 1 --seq 77 --dim 128 --dtype bf16 $c
    done
    for l in nt nn tn; do
      TILELANG_BACKEND=$be chk $T $G/gemm --device cuda --m 1000 --n 999 --k 1003 --layout $l --dtype bf16
    done
    TILELANG_BACKEND=$be chk $T $G/fp8_gemm --device cuda --m 1000 --n 999 --k 999 --scaling tensor
    TILELANG_BACKEND=$be chk $T $G/fp8_gemm --device cuda --m 777 --n 1001 --k 4100 --scaling blocks
  done
  echo "jit correctness failures: $fails"
  if [ "$fails" = 0 ]; then
    for cfg in ${JIT_ATTN:-4,16,4096,128 2,32,8192,128 4,16,4096,64 2,32,8192,64}; do
      set -- ${cfg//,/ }
      for c in "" --causal; do
        a="--device cuda --batch $1 --heads $2 --seq $3 --dim $4 --dtype bf16 $c --reps 30"
        $T $G/flash_attention $a 2>&1 | tail -n 1 | sed 's/^/[default] /'
        TILELANG_BACKEND=cuda $T $G/flash_attention $a 2>&1 | tail -n 1 | sed 's/^/[default cuda] /'
        if [ "$4" = 64 ]; then
          for bn in 64 128; do
            TILELANG_WS=1 $T $G/flash_attention $a --overlap-pv --bn $bn 2>&1 | tail -n 1 | sed "s/^/[ws+overlap bn$bn] /"
          done
        else
          TILELANG_WS=0 $T $G/flash_attention $a 2>&1 | tail -n 1 | sed 's/^/[earlier default: TILELANG_WS=0] /'
        fi
        python3 $G/torch_peers.py attn $1 $2 $3 $4 $c
      done
    done
    for shape in ${JIT_GEMM:-4096,4096,4096 8192,8192,8192 4096,8192,2048 6144,6144,6144}; do
      set -- ${shape//,/ }
      $T $G/gemm --device cuda --m $1 --n $2 --k $3 --layout nt --dtype bf16 --reps 30 2>&1 | tail -n 1 | sed 's/^/[default] /'
      TILELANG_WS_PRODUCER_REGS=24 $T $G/gemm --device cuda --m $1 --n $2 --k $3 --layout nt --dtype bf16 --reps 30 2>&1 | tail -n 1 | sed 's/^/[producer regs 24] /'
      python3 $G/torch_peers.py gemm $1 $2 $3 --layout nt --dtype bf16
    done
    $T $G/fp8_gemm --device cuda --m 8192 --n 8192 --k 8192 --scaling tensor --reps 30 2>&1 | tail -n 1
    $T $G/fp8_gemm --device cuda --m 8192 --n 8192 --k 8192 --scaling tensor --fast-accum --reps 30 2>&1 | tail -n 1
    $T $G/fp8_gemm --device cuda --m 8192 --n 8192 --k 8192 --scaling blocks --reps 30 2>&1 | tail -n 1
    python3 bench/fp8_peers.py tensor 8192 8192 8192
    cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
    if [ -x "$cs" ]; then
      for tool in memcheck racecheck synccheck; do
        for c in "" --causal; do
          l=/tmp/jit-san-$tool.log
          $T "$cs" --tool $tool --error-exitcode 86 $G/flash_attention --device cuda --batch 1 --heads 2 --seq 200 --dim 128 --dtype bf16 $c --reps 1 > $l 2>&1
          echo "sanitize $tool attention d128 $c: rc=$? $(grep -E "SUMMARY" $l | tr '\n' ' ')"
        done
      done
    fi
  fi
fi

if [ "$what" = three-wg ]; then
  # Three consumer warpgroups (192-row tiles, 512 threads, 160 registers each after
  # `setmaxnreg`) for d64 attention (FlashAttention-3's d64 shape) and the bf16 GEMM, beside
  # the defaults (d64 attention: the CUDA C++ build where our PTX spills) and cuDNN / cuBLAS.
  T="timeout ${WS_TIMEOUT:-120}"
  fails=0
  for c in "" --causal; do
    TILELANG_WS=1 chk $T $G/flash_attention --device cuda --batch 2 --heads 3 --seq 777 --dim 64 --dtype bf16 --bm 192 --bn 128 --threads 384 --overlap-pv $c
    chk $T $G/flash_attention --device cuda --batch 2 --heads 3 --seq 777 --dim 64 --dtype bf16 $c
  done
  chk $T $G/gemm --device cuda --m 1000 --n 1000 --k 1000 --layout nn --dtype bf16 --bm 192 --bn 128 --stages 4 --threads 384
  echo "three-wg correctness failures: $fails"
  if [ "$fails" = 0 ]; then
    for cfg in ${TW_ATTN:-4,16,4096,64 2,32,8192,64 8,16,2048,64}; do
      set -- ${cfg//,/ }
      for c in "" --causal; do
        a="--device cuda --batch $1 --heads $2 --seq $3 --dim $4 --dtype bf16 $c --reps 30"
        $T $G/flash_attention $a 2>&1 | tail -n 1 | sed 's/^/[default] /'
        for v in "--bm 192 --bn 128 --threads 384 --overlap-pv" "--bm 192 --bn 64 --threads 384 --overlap-pv" "--bm 192 --bn 128 --threads 384"; do
          TILELANG_WS=1 $T $G/flash_attention $a $v 2>&1 | tail -n 1 | sed "s/^/[ws $v] /"
        done
        python3 $G/torch_peers.py attn $1 $2 $3 $4 $c
      done
    done
    for shape in ${TW_GEMM:-4096,4096,4096 6144,6144,6144 8192,8192,8192}; do
      set -- ${shape//,/ }
      $T $G/gemm --device cuda --m $1 --n $2 --k $3 --layout nt --dtype bf16 --reps 30 2>&1 | tail -n 1 | sed 's/^/[default] /'
      # (192x256 cannot build: a 64x256 wgmma needs more than the 128 registers a 512-thread
      # launch allows at entry, and ptxas refuses it, C7602, whatever setmaxnreg gives later.)
      for v in "--bm 192 --bn 128 --stages 4 --threads 384"; do
        $T $G/gemm --device cuda --m $1 --n $2 --k $3 --layout nt --dtype bf16 --reps 30 $v 2>&1 | tail -n 1 | sed "s/^/[$v] /"
      done
      python3 $G/torch_peers.py gemm $1 $2 $3 --layout nt --dtype bf16
    done
  fi
fi

if [ "$what" = tilelang-attn ]; then
  # One attention program, two compilers: python/examples/flash_attention.py (TileLang's
  # example style, BSHD) run by TileLang 0.1.15 (carry .tl) and by our Python package (the
  # wheel in .gpu/wheels: bash python/tests/gpu-run.sh stage), each with its import line
  # swapped; beside our Rust default (BHSD) and cuDNN. TLA_SHAPES narrows the run.
  mkdir -p /tmp/tl-site && tar xJf "${TL_TARBALL:-.tl/tl-site.tar.xz}" -C /tmp/tl-site || exit 1
  wheel="$(ls .gpu/wheels/tilelang_rs-*.whl 2>/dev/null | head -n 1)"
  rm -rf /tmp/tl-py && python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/tl-py "$wheel" || exit 1
  export PYTHONPATH=/tmp/tl-py:/tmp/tl-site${PYTHONPATH:+:$PYTHONPATH}
  python3 -c 'import tilelang, tilelang_rs; print("tilelang", tilelang.__version__, "tilelang_rs", tilelang_rs.__version__)' || exit 1
  for cfg in ${TLA_SHAPES:-4,16,4096,128 2,32,8192,128 4,16,4096,64}; do
    set -- ${cfg//,/ }
    for c in "" --causal; do
      timeout 120 $G/flash_attention --device cuda --batch $1 --heads $2 --seq $3 --dim $4 --dtype bf16 $c --reps 30 2>&1 | tail -n 1 | sed 's/^/[ours, Rust default] /'
      timeout 300 python3 bench/tilelang_peer.py attn $1 $2 $3 $4 $c --package tilelang_rs 2>&1 | tail -n 3
      timeout 300 python3 bench/tilelang_peer.py attn $1 $2 $3 $4 $c --package tilelang 2>&1 | tail -n 3
      python3 $G/torch_peers.py attn $1 $2 $3 $4 $c
    done
  done
fi

if [ "$what" = attn-d128 ]; then
  # The d128 attention default (producer warpgroup, 128-key tiles, P.V under the next
  # softmax): correctness at odd sizes in both code paths, compute-sanitizer, then speed beside
  # cuDNN and cold compile times with the driver's JIT cache off.
  T="timeout ${WS_TIMEOUT:-120}"
  fails=0
  for be in ptx cuda; do
    for c in "" --causal; do
      for s in 1000 777 77 64; do
        TILELANG_BACKEND=$be chk $T $G/flash_attention --device cuda --batch 1 --heads 2 --seq $s --dim 128 --dtype bf16 $c
      done
    done
  done
  echo "attn-d128 correctness failures: $fails"
  cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  for tool in memcheck racecheck synccheck initcheck; do
    for c in "" --causal; do
      $T "$cs" --tool $tool --error-exitcode 86 $G/flash_attention --device cuda --batch 1 --heads 2 --seq 200 --dim 128 --dtype bf16 $c --reps 1 > /tmp/san.log 2>&1
      echo "sanitize $tool d128 $c: rc=$? $(grep -E "SUMMARY" /tmp/san.log | tr '\n' ' ')"
    done
  done
  for cfg in ${AD_SHAPES:-4,16,4096,128 2,32,8192,128}; do
    set -- ${cfg//,/ }
    for c in "" --causal; do
      $T $G/flash_attention --device cuda --batch $1 --heads $2 --seq $3 --dim $4 --dtype bf16 $c --reps 30 2>&1 | tail -n 1 | sed 's/^/[default] /'
      python3 $G/torch_peers.py attn $1 $2 $3 $4 $c
    done
  done
  CUDA_CACHE_DISABLE=1 $G/compile_times --device cuda 2>&1 | tail -n 9
fi

if [ "$what" = py-vs-rust ]; then
  # The same kernels from Python and from Rust (issue 13): python/bench/same_kernels.py (the
  # Rust Hopper defaults written in T.*, whose PTX is the Rust examples' line for line) and
  # the example binaries, at the same shapes, in this one call. Needs the wheel in
  # .gpu/wheels (bash python/tests/gpu-run.sh stage) and .gpu/gemm, .gpu/flash_attention.
  wheel="$(ls .gpu/wheels/tilelang_rs-*.whl 2>/dev/null | head -n 1)"
  rm -rf /tmp/tl-py && python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/tl-py "$wheel" || exit 1
  for round in 1 2; do
    echo "== round $round"
    PYTHONPATH=/tmp/tl-py${PYTHONPATH:+:$PYTHONPATH} timeout 300 python3 python/bench/same_kernels.py
    for n in 4096 8192; do
      timeout 120 $G/gemm --device cuda --m $n --n $n --k $n --layout nt --dtype bf16 --reps 30 2>&1 | tail -n 1 | sed 's/^/[rust] /'
    done
    for cfg in 4,16,4096,128 2,32,8192,128; do
      set -- ${cfg//,/ }
      for c in "" --causal; do
        timeout 120 $G/flash_attention --device cuda --batch $1 --heads $2 --seq $3 --dim $4 --dtype bf16 $c --reps 30 2>&1 | tail -n 1 | sed 's/^/[rust] /'
      done
    done
  done
fi

if [ "$what" = fair ]; then
  # Ours and the peers timed the same two ways (bench/peers30.py says why): ours at --reps 30
  # against the peers' "30 reps", ours at --reps 200 (about 200 ms of launches back to back,
  # like do_bench) against their do_bench. bf16.
  T="timeout ${WS_TIMEOUT:-120}"
  for shape in ${FAIR_GEMM:-4096,4096,4096 8192,8192,8192 4096,8192,2048 6144,6144,6144}; do
    set -- ${shape//,/ }
    for r in 30 200; do
      sleep 1
      $T $G/gemm --device cuda --m $1 --n $2 --k $3 --layout nt --dtype bf16 --reps $r 2>&1 | tail -n 1 | sed "s/^/[ours, --reps $r] /"
    done
    python3 bench/peers30.py gemm $1 $2 $3
  done
  for cfg in ${FAIR_ATTN:-4,16,4096,128 2,32,8192,128 4,16,4096,64 2,32,8192,64}; do
    set -- ${cfg//,/ }
    for c in "" --causal; do
      for r in 30 200; do
        sleep 1
        $T $G/flash_attention --device cuda --batch $1 --heads $2 --seq $3 --dim $4 --dtype bf16 $c --reps $r 2>&1 | tail -n 1 | sed "s/^/[ours, --reps $r] /"
      done
      python3 bench/peers30.py attn $1 $2 $3 $4 $c
    done
  done
fi

if [ "$what" = fair-fp8 ]; then
  # The fp8 GEMM (e4m3, per-tensor scales, bf16 out) and cuBLASLt through torch._scaled_mm,
  # timed the same two ways (bench/peers30.py): promoted (our default; cuBLASLt's default) and
  # fast accumulation on both sides. FP8_SHAPES narrows it.
  T="timeout ${WS_TIMEOUT:-120}"
  for shape in ${FP8_SHAPES:-8192,8192,8192 4096,4096,4096}; do
    set -- ${shape//,/ }
    for acc in "" --fast; do
      for r in 30 200; do
        sleep 1
        $T $G/fp8_gemm --device cuda --m $1 --n $2 --k $3 --scaling tensor ${acc:+--fast-accum} --reps $r 2>&1 | tail -n 1 | sed "s/^/[ours$acc, --reps $r] /"
      done
      python3 bench/peers30.py fp8 $1 $2 $3 $acc
    done
  done
fi

if [ "$what" = tilelang ]; then
  # Our bf16 GEMM beside cuBLAS and TileLang (the PyPI package, from the tarball that
  # bench/tilelang-tarball.sh builds: carry .tl), each timed the same way in this one call
  # (CUDA events, L2 flushed, median). TL_SHAPES narrows the run.
  mkdir -p /tmp/tl-site && tar xJf "${TL_TARBALL:-.tl/tl-site.tar.xz}" -C /tmp/tl-site || exit 1
  export PYTHONPATH=/tmp/tl-site${PYTHONPATH:+:$PYTHONPATH}
  python3 -c 'import tilelang; print("tilelang", tilelang.__version__)' || exit 1
  for shape in ${TL_SHAPES:-4096,4096,4096 8192,8192,8192 4096,8192,2048 6144,6144,6144}; do
    set -- ${shape//,/ }
    for l in nt nn; do
      timeout 120 $G/gemm --device cuda --m $1 --n $2 --k $3 --layout $l --dtype bf16 --reps 30 2>&1 | tail -n 1 | sed 's/^/[ours] /'
      # About 200 ms of launches back to back, as do_bench times TileLang and cuBLAS here.
      sleep 1
      timeout 120 $G/gemm --device cuda --m $1 --n $2 --k $3 --layout $l --dtype bf16 --reps 200 2>&1 | tail -n 1 | sed 's/^/[ours, --reps 200] /'
      python3 $G/torch_peers.py gemm $1 $2 $3 --layout $l --dtype bf16
      timeout 200 python3 bench/tilelang_peer.py gemm $1 $2 $3 --layout $l 2>&1 | grep -v "^\s*$" | tail -n 4
    done
  done
fi

if [ "$what" = ws ]; then
  # Warp specialization (a producer warpgroup issuing the TMA loads, C out by TMA store): the
  # Hopper GEMM default; other kernels take it with TILELANG_WS=1 (TILELANG_WS=0 turns it off
  # everywhere). Correctness at odd sizes in both code paths, each run under a time limit (a
  # wrong register split or barrier count hangs), then speed beside the earlier default (every
  # warp loading and computing, 4 stages, C stored from the registers) and the peers (cuBLAS,
  # cuDNN/FA2, cuBLASLt fp8). WS_SHAPES, WS_ATTN and WS_FP8 narrow a run.
  T="timeout ${WS_TIMEOUT:-120}"
  OLD="--no-ws --stages 4 --no-persistent"
  log "warp specialization: correctness at odd sizes"
  fails=0
  for be in ptx cuda; do
    gemm_layouts $be --m 1000 --n 1000 --k 1000
    gemm_layouts $be --m 1000 --n 999 --k 3000 --persistent
    gemm_layouts $be --m 777 --n 1000 --k 4104
    TILELANG_BACKEND=$be chk $T $G/gemm --device cuda --m 257 --n 136 --k 72 --layout nt --dtype f16 --out-dtype f32
    TILELANG_BACKEND=$be TILELANG_WS=1 chk $T $G/flash_attention --device cuda --batch 1 --heads 2 --seq 1000 --dim 128 --dtype bf16 --causal
    TILELANG_BACKEND=$be TILELANG_WS=1 chk $T $G/flash_attention --device cuda --batch 1 --heads 2 --seq 1000 --dim 64 --dtype bf16
    TILELANG_BACKEND=$be TILELANG_WS=1 chk $T $G/fp8_gemm --device cuda --m 1000 --n 1000 --k 1000 --scaling blocks
    TILELANG_BACKEND=$be TILELANG_WS=1 chk $T $G/fp8_gemm --device cuda --m 1000 --n 1000 --k 1000 --scaling tensor
  done
  echo "ws correctness failures: $fails"
  if [ "$fails" = 0 ]; then
    log "gemm bf16: default (specialized) / earlier default / cuBLAS"
    for shape in ${WS_SHAPES:-4096,4096,4096 8192,8192,8192 4096,8192,2048 6144,6144,6144 4095,4095,4095 4097,4095,4104}; do
      set -- ${shape//,/ }
      for l in nt nn; do
        $T $G/gemm --device cuda --m $1 --n $2 --k $3 --layout $l --dtype bf16 --reps 30 2>&1 | tail -n 1 | sed 's/^/[default] /'
        $T $G/gemm --device cuda --m $1 --n $2 --k $3 --layout $l --dtype bf16 --reps 30 $OLD 2>&1 | tail -n 1 | sed 's/^/[earlier] /'
        python3 $G/torch_peers.py gemm $1 $2 $3 --layout $l --dtype bf16
      done
    done
    log "attention fwd bf16: specialized (TILELANG_WS=1) / default / cuDNN, FA2"
    for cfg in ${WS_ATTN:-4,16,4096,128 8,16,2048,64}; do
      set -- ${cfg//,/ }
      for c in "" --causal; do
        TILELANG_WS=1 $T $G/flash_attention --device cuda --batch $1 --heads $2 --seq $3 --dim $4 --dtype bf16 $c --reps 30 2>&1 | tail -n 1 | sed 's/^/[ws] /'
        $T $G/flash_attention --device cuda --batch $1 --heads $2 --seq $3 --dim $4 --dtype bf16 $c --reps 30 2>&1 | tail -n 1 | sed 's/^/[default] /'
        python3 $G/torch_peers.py attn $1 $2 $3 $4 $c
      done
    done
    log "fp8 gemm: specialized (TILELANG_WS=1) / default / cuBLASLt"
    for shape in ${WS_FP8:-8192,8192,8192 4096,4096,4096}; do
      set -- ${shape//,/ }
      for sc in "--scaling tensor --fast-accum" "--scaling tensor"; do
        TILELANG_WS=1 $T $G/fp8_gemm --device cuda --m $1 --n $2 --k $3 $sc --reps 30 2>&1 | tail -n 1 | sed 's/^/[ws] /'
        $T $G/fp8_gemm --device cuda --m $1 --n $2 --k $3 $sc --reps 30 2>&1 | tail -n 1 | sed 's/^/[default] /'
      done
      python3 bench/fp8_peers.py tensor $1 $2 $3
    done
  fi
fi

if [ "$what" = fp8 ]; then
  # FP8 GEMM (issue 14): correctness at odd sizes in both code paths and every scaling, then
  # speed beside cuBLASLt (torch._scaled_mm) and, for block scales, a Triton kernel. FP8_SHAPES
  # and FP8_EXTRA (tile options for ours) narrow or vary a run.
  log "fp8 gemm: correctness at odd sizes"
  fails=0
  for be in ptx cuda; do
    TILELANG_BACKEND=$be chk $G/fp8_gemm --device cuda --m 1000 --n 999 --k 999 --scaling tensor
    TILELANG_BACKEND=$be chk $G/fp8_gemm --device cuda --m 1000 --n 999 --k 1000 --scaling tensor --fast-accum --a e5m2
    TILELANG_BACKEND=$be chk $G/fp8_gemm --device cuda --m 777 --n 1001 --k 4100 --scaling blocks --b e5m2
    TILELANG_BACKEND=$be chk $G/fp8_gemm --device cuda --m 4096 --n 4096 --k 4096 --scaling blocks
  done
  echo "fp8 correctness failures: $fails"
  log "fp8 gemm: speed (ours, cuBLASLt, Triton)"
  for shape in ${FP8_SHAPES:-"8192,8192,8192" "4096,4096,4096" "4096,7168,2048" "6144,6144,6144"}; do
    IFS=, read -r m n k <<< "$shape"
    $G/fp8_gemm --device cuda --m $m --n $n --k $k --scaling tensor --fast-accum --reps 30 ${FP8_EXTRA:-} 2>&1 | tail -n 1
    $G/fp8_gemm --device cuda --m $m --n $n --k $k --scaling tensor --reps 30 ${FP8_EXTRA:-} 2>&1 | tail -n 1
    python3 bench/fp8_peers.py tensor $m $n $k
    $G/fp8_gemm --device cuda --m $m --n $n --k $k --scaling blocks --reps 30 ${FP8_EXTRA:-} 2>&1 | tail -n 1
    python3 bench/fp8_peers.py blocks $m $n $k
  done
  # Sizes that are not multiples of the tile (or of 16 bytes): ours only, as cuBLASLt's fp8
  # takes no such K.
  for shape in ${FP8_ODD:-"8191,8191,8191"}; do
    IFS=, read -r m n k <<< "$shape"
    for sc in "--fast-accum" "--scaling tensor" "--scaling blocks"; do
      $G/fp8_gemm --device cuda --m $m --n $n --k $k $sc --reps 30 ${FP8_EXTRA:-} 2>&1 | tail -n 1
    done
  done
fi

if [ "$what" = softmax-long ]; then
  # Few long rows (issue 14): ours split over blocks (the default for such shapes), ours one
  # block per row (--no-split), torch.softmax / rms_norm; bf16. LONG_SHAPES, LONG_OPS narrow it.
  for shape in ${LONG_SHAPES:-"1,128256" "4,128256" "16,128256" "64,128256" "4,32000" "4,262144" "1,1048576"}; do
    IFS=, read -r r c <<< "$shape"
    for op in ${LONG_OPS:-softmax rmsnorm}; do
      $G/$op --device cuda --rows $r --cols $c --dtype bf16 --reps 50 2>&1 | tail -n 1
      $G/$op --device cuda --rows $r --cols $c --dtype bf16 --reps 50 --no-split 2>&1 | tail -n 1 | sed 's/^/[one block per row] /'
      python3 $G/torch_peers.py $op $r $c
    done
  done
fi

if [ "$what" = fp8-sweep ]; then
  # FP8 GEMM tile choices (the defaults come from this): per scaling, the default and its
  # variants, at FP8_SHAPES.
  for shape in ${FP8_SHAPES:-"8192,8192,8192" "4096,7168,2048"}; do
    IFS=, read -r m n k <<< "$shape"
    # Variants separated by `|` (FP8_FAST, FP8_PROMOTED; FP8_SCALINGS: which promoted ones).
    IFS='|' read -ra fast <<< "${FP8_FAST-|--stages 3|--bn 128 --stages 3 --min-blocks 2|--persistent|--panel 16}"
    IFS='|' read -ra promoted <<< "${FP8_PROMOTED-|--stages 4|--stages 3 --min-blocks 2|--persistent|--bm 256 --threads 512 --stages 4|--bm 256 --threads 512 --stages 3}"
    for v in "${fast[@]}"; do
      echo "[fast $v] $($G/fp8_gemm --device cuda --m $m --n $n --k $k --fast-accum --reps 30 $v 2>&1 | tail -n 1)"
    done
    for sc in ${FP8_SCALINGS:-tensor blocks}; do
      for v in "${promoted[@]}"; do
        echo "[$sc $v] $($G/fp8_gemm --device cuda --m $m --n $n --k $k --scaling $sc --reps 30 $v 2>&1 | tail -n 1)"
      done
    done
  done
fi

if [ "$what" = perf ] || [ "$what" = all ] || [ "$what" = attn ]; then
  log "attention fwd bf16"
  for cfg in "4 16 4096 128" "8 16 2048 64"; do
    set -- $cfg
    for c in "" --causal; do
      $G/flash_attention --device cuda --batch $1 --heads $2 --seq $3 --dim $4 --dtype bf16 $c --reps 30 $TUNE 2>&1 | tail -n 40
      python3 $G/torch_peers.py attn $1 $2 $3 $4 $c
    done
  done
fi
