#!/usr/bin/env bash
# pycute (CuTe's layout algebra in pure Python, from NVIDIA's `nvidia-cutlass` wheel) for the
# layout crate's differential test (crates/layout/tests/pycute.rs). Downloads the wheel without
# its dependencies (pycute needs only the standard library) and unpacks pycute/ under target/.
# Prints `export TILELANG_PYCUTE=... TILELANG_REQUIRE_PYCUTE=1` on success; otherwise says why
# on stderr and prints nothing, and the test is skipped.
set -uo pipefail
cd "$(dirname "$0")/.."
version=4.2.0.0
dest="$PWD/target/pycute-$version"
log() { echo "$@" >&2; }
if [ ! -f "$dest/pycute/layout.py" ]; then
  python="$(command -v python3 || command -v python || true)"
  [ -n "$python" ] || { log "install-pycute: no python3; the pycute test will be skipped"; exit 0; }
  tmp="$(mktemp -d)"
  if ! "$python" -m pip download --quiet --no-deps --only-binary=:all: -d "$tmp" \
      "nvidia-cutlass==$version" >&2; then
    log "install-pycute: pip could not download nvidia-cutlass==$version; the pycute test will be skipped"
    rm -rf "$tmp"; exit 0
  fi
  mkdir -p "$dest"
  "$python" - "$tmp" "$dest" >&2 <<'PY'
import glob, sys, zipfile
tmp, dest = sys.argv[1], sys.argv[2]
whl = glob.glob(tmp + "/nvidia_cutlass-*.whl")[0]
with zipfile.ZipFile(whl) as z:
    for n in z.namelist():
        if n.startswith("pycute/") or n.endswith("LICENSE.txt"):
            z.extract(n, dest)
PY
  rm -rf "$tmp"
fi
if [ -f "$dest/pycute/layout.py" ]; then
  echo "export TILELANG_PYCUTE='$dest' TILELANG_REQUIRE_PYCUTE=1"
else
  log "install-pycute: pycute was not unpacked; the pycute test will be skipped"
fi
