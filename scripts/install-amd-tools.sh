#!/usr/bin/env bash
# Find (or install) the AMD toolchain the tests use: clang of LLVM 20 or newer with the amdgcn
# target, and ld.lld beside it (gfx950 needs LLVM 20; the code objects are linked by lld). No
# GPU and no ROCm are needed: clang compiles device code only (crates/amdgpu).
#
# Usage:   amd_env="$(bash scripts/install-amd-tools.sh)" && eval "$amd_env"
# stdout carries only `export NAME=value` lines; messages go to stderr.
#
# A clang is suitable when it compiles, assembles and links a tiny gfx950 kernel the way
# `tl_amdgpu::compile` does. It is looked for as the Rust side does (TILELANG_CLANG if set, else
# clang++-N and clang-N for N = 30 … 20 on PATH and in /usr/lib/llvm-N/bin, then clang++ and
# clang). When none is suitable and this runs as root with apt-get (Debian bookworm has
# clang-22 in bookworm-security; newer Debian and Ubuntu have some of clang-20 … clang-22),
# `clang-N lld-N` is installed for the newest N the package lists have. With a suitable clang,
# the output sets TILELANG_CLANG to it and TILELANG_REQUIRE_CLANG=1, so tests that need clang
# fail instead of skipping. Without one (not root, no apt-get, no package), it says so on
# stderr and exits 0: those tests then skip.
#
# Idempotent and quiet on success: when a suitable clang is present nothing is installed and
# nothing is printed to stderr. TILELANG_AMD_NO_INSTALL=1 only looks, never installs.
set -euo pipefail

MIN_LLVM=20
MAX_LLVM=30

log() { echo "install-amd-tools: $*" >&2; }

# The LLVM major version of a clang binary, or nothing.
llvm_major() {
  "$1" --version 2>/dev/null | head -n 1 | sed -n 's/.*clang version \([0-9][0-9]*\).*/\1/p'
}

# Whether clang $1 compiles a HIP kernel for gfx950 to assembly, assembles it and links the
# code object with ld.lld: the three steps of tl_amdgpu::compile.
works() {
  local clang="$1" dir major ok=1
  major="$(llvm_major "$clang")"
  [ -n "$major" ] && [ "$major" -ge "$MIN_LLVM" ] || return 1
  dir="$(mktemp -d "${TMPDIR:-/tmp}/tl-amd-probe.XXXXXX")" || return 1
  printf '%s\n' 'extern "C" __attribute__((global)) void k(float* p) { p[__builtin_amdgcn_workitem_id_x()] = 1.0f; }' >"$dir/k.hip"
  if "$clang" -x hip -std=c++17 --cuda-device-only -nogpulib -nogpuinc -O3 -S \
       --offload-arch=gfx950 -o "$dir/k.s" "$dir/k.hip" >/dev/null 2>&1 \
     && "$clang" -x assembler -target amdgcn-amd-amdhsa -mcpu=gfx950 -c "$dir/k.s" \
       -o "$dir/k.o" >/dev/null 2>&1 \
     && "$clang" -target amdgcn-amd-amdhsa -mcpu=gfx950 -nostdlib "$dir/k.o" \
       -o "$dir/k.co" >/dev/null 2>&1 \
     && [ "$(head -c 4 "$dir/k.co" | od -An -c | tr -d ' ')" = '177ELF' ]; then
    ok=0
  fi
  rm -rf "$dir"
  return "$ok"
}

# Every candidate path, in the order crates/amdgpu/src/toolchain.rs searches.
candidates() {
  local v n d dirs=()
  IFS=: read -r -a dirs <<<"${PATH:-}"
  for ((v = MAX_LLVM; v >= MIN_LLVM; v--)); do dirs+=("/usr/lib/llvm-$v/bin"); done
  for n in $(for ((v = MAX_LLVM; v >= MIN_LLVM; v--)); do echo "clang++-$v clang-$v"; done) clang++ clang; do
    for d in "${dirs[@]}"; do
      [ -n "$d" ] && [ -f "$d/$n" ] && [ -x "$d/$n" ] && echo "$d/$n"
    done
  done
  return 0
}

# The first suitable clang, or nothing (status 1).
find_clang() {
  local c
  while IFS= read -r c; do
    if works "$c"; then
      echo "$c"
      return 0
    fi
  done < <(candidates)
  return 1
}

emit() {
  printf 'export TILELANG_CLANG=%q\n' "$1"
  echo "export TILELANG_REQUIRE_CLANG=1"
}

if [ -n "${TILELANG_CLANG:-}" ]; then
  if works "$TILELANG_CLANG"; then
    emit "$TILELANG_CLANG"
    exit 0
  fi
  log "error: TILELANG_CLANG=$TILELANG_CLANG cannot compile and link a gfx950 kernel (it needs LLVM $MIN_LLVM or newer with the amdgcn target, and ld.lld); fix or unset it"
  exit 1
fi

if found="$(find_clang)"; then
  emit "$found"
  exit 0
fi

skip="the AMD compile tests will be skipped (they need clang >= $MIN_LLVM with the amdgcn target and ld.lld: install clang-22 and lld-22, or set TILELANG_CLANG)"
if [ "${TILELANG_AMD_NO_INSTALL:-0}" != "0" ]; then
  log "no suitable clang and TILELANG_AMD_NO_INSTALL is set; $skip"
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1 || ! command -v apt-cache >/dev/null 2>&1; then
  log "no suitable clang, and no apt-get to install one; $skip"
  exit 0
fi
if [ "$(id -u)" != "0" ]; then
  log "no suitable clang, and installing one needs root (apt-get install clang-22 lld-22); $skip"
  exit 0
fi

# The newest clang-N with lld-N in the package lists (refreshed first: a fresh container has
# none).
log "no suitable clang found; installing one with apt-get"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >&2 || log "warning: apt-get update failed; trying the package lists there are"
pick=""
for ((v = 22; v >= MIN_LLVM; v--)); do
  if [ -n "$(apt-cache policy "clang-$v" 2>/dev/null | sed -n 's/^ *Candidate: *//p' | grep -v '(none)')" ] \
     && [ -n "$(apt-cache policy "lld-$v" 2>/dev/null | sed -n 's/^ *Candidate: *//p' | grep -v '(none)')" ]; then
    pick="$v"
    break
  fi
done
if [ -z "$pick" ]; then
  log "no clang-N and lld-N packages (N = 22 … $MIN_LLVM) are available to apt-get; $skip"
  exit 0
fi
if ! out="$(apt-get install -y -qq --no-install-recommends "clang-$pick" "lld-$pick" 2>&1)"; then
  printf '%s\n' "$out" | tail -n 20 >&2
  log "apt-get install clang-$pick lld-$pick failed; $skip"
  exit 0
fi
if found="$(find_clang)"; then
  log "installed clang-$pick and lld-$pick: $found"
  emit "$found"
  exit 0
fi
log "clang-$pick and lld-$pick were installed, but no clang compiles and links a gfx950 kernel; $skip"
exit 0
