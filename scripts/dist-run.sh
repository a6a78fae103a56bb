#!/usr/bin/env bash
# Start a multi-rank job on this host, torchrun-style: N processes of the same command, each
# with RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT set.
#
#   bash scripts/dist-run.sh N command [args...]
#
# Ranks share the GPUs round-robin (the program takes LOCAL_RANK % its GPU count), so N may
# exceed the GPUs (2 or 4 ranks on one GPU test the protocol). If any rank fails, the others are
# stopped (no rank is left waiting); the exit status is the first failure's, else 0. Each rank's
# output lines are prefixed with its rank.
set -uo pipefail
# Job control: every rank runs in its own process group, so stopping a rank stops everything it
# started.
set -m
if [ $# -lt 2 ] || ! [[ "$1" =~ ^[0-9]+$ ]] || [ "$1" -lt 1 ]; then
  echo "usage: bash scripts/dist-run.sh N command [args...]   (N >= 1 ranks)" >&2
  exit 2
fi
n="$1"; shift
port="${MASTER_PORT:-$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null || echo 29517)}"
pids=()
# Stopped from outside (a timeout, ^C): stop every rank too, not just this script.
trap 'for p in "${pids[@]}"; do kill -TERM -- "-$p" 2>/dev/null; done; exit 143' TERM INT
for ((r = 0; r < n; r++)); do
  ( RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      "$@" 2>&1 | sed -u "s/^/[rank $r] /" ; exit "${PIPESTATUS[0]}" ) &
  pids+=($!)
done
status=0
remaining=$n
while [ "$remaining" -gt 0 ]; do
  if wait -n -p done_pid; then
    remaining=$((remaining - 1))
  else
    code=$?
    remaining=$((remaining - 1))
    if [ "$status" -eq 0 ]; then
      status=$code
      echo "dist-run: a rank failed (exit $code); stopping the others" >&2
      for p in "${pids[@]}"; do kill -TERM -- "-$p" 2>/dev/null; done
    fi
  fi
done
exit "$status"
