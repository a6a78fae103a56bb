#!/usr/bin/env bash
# The Python package's tests (python/tests), nothing installed system-wide:
#   bash scripts/test-python.sh            (scripts/test.sh runs it after the Rust tests)
# 1. An environment under target/py-venv (or $TILELANG_PY_VENV): `python3 -m venv`; where
#    that fails (Debian without python3-venv has no ensurepip), packages go into
#    target/py-venv/site with `python3 -m pip install --target` and PYTHONPATH names it.
#    Neither venv nor pip: it stops with an error saying what to install.
# 2. maturin, numpy and pytest from PyPI into it (torch is not: its wheels carry gigabytes of
#    CUDA libraries; the torch tests run on the GPU machine, python/tests/gpu-run.sh).
# 3. The wheel built with maturin (release, abi3) into target/py-wheels, installed there.
# 4. `python -m pytest python/tests -m "not gpu"`, from the repository root so that the
#    installed package is imported, not python/tilelang_rs.
# Extra arguments go to pytest. TILELANG_PY_FORCE_TARGET=1 takes the pip --target path even
# where venv works (to test it).
set -euo pipefail
cd "$(dirname "$0")/.."
root="$(pwd)"

log() { echo "test-python: $*" >&2; }

venv="${TILELANG_PY_VENV:-$root/target/py-venv}"
wheels="$root/target/py-wheels"
reqs=("maturin>=1.5,<2" "numpy" "pytest" "ml_dtypes")
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore

python="$(command -v python3 || command -v python || true)"
if [ -z "$python" ]; then
  log "error: no python3 on PATH (the Python package needs Python >= 3.10)"
  exit 1
fi
if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 10))'; then
  log "error: $("$python" --version 2>&1) at $python is older than 3.10, which the package needs"
  exit 1
fi

# py: the interpreter the tests run with; env: what it needs in its environment.
py="" env=()
if [ "${TILELANG_PY_FORCE_TARGET:-0}" != 1 ]; then
  if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -m pip --version >/dev/null 2>&1; then
    rm -rf "$venv/bin" "$venv/lib" "$venv/lib64" "$venv/include" "$venv/pyvenv.cfg"
    log "creating a virtualenv in $venv"
    if ! "$python" -m venv "$venv" >&2; then
      log "python3 -m venv failed (on Debian: apt-get install python3-venv); trying pip --target"
      rm -rf "$venv/bin" "$venv/lib" "$venv/lib64" "$venv/include" "$venv/pyvenv.cfg"
    fi
  fi
  if [ -x "$venv/bin/python" ] && "$venv/bin/python" -m pip --version >/dev/null 2>&1; then
    py="$venv/bin/python"
    log "installing ${reqs[*]} into $venv"
    "$py" -m pip install --quiet "${reqs[@]}" >&2
    maturin=("$venv/bin/maturin")
  fi
fi
if [ -z "$py" ]; then
  site="$venv/site"
  if ! "$python" -m pip --version >/dev/null 2>&1; then
    log "error: $python has neither a working venv module nor pip; install one of them"
    log "       (Debian: apt-get install python3-venv, or python3-pip) and run this again"
    exit 1
  fi
  log "installing ${reqs[*]} into $site (pip --target)"
  mkdir -p "$site"
  "$python" -m pip install --quiet --upgrade --target "$site" \
    "${reqs[@]}" >&2
  py="$python"
  env=(env "PYTHONPATH=$site${PYTHONPATH:+:$PYTHONPATH}")
  maturin=("${env[@]}" "$site/bin/maturin")
fi

log "building the wheel (maturin build --release)"
rm -rf "$wheels"
(cd python && "${maturin[@]}" build --release --quiet -i "$py" -o "$wheels" >&2)
wheel="$(ls "$wheels"/tilelang_rs-*.whl)"
log "installing $(basename "$wheel")"
if [ -n "${site:-}" ]; then
  "$python" -m pip install --quiet --no-deps --upgrade \
    --target "$site" "$wheel" >&2
else
  "$py" -m pip install --quiet --no-deps --force-reinstall \
    "$wheel" >&2
fi
# The package under test must be the installed one.
where="$("${env[@]}" "$py" -c 'import tilelang_rs, os; print(os.path.dirname(tilelang_rs.__file__))')"
case "$where" in
  "$root/python/"*) log "error: imported the source tree ($where), not the wheel"; exit 1 ;;
esac
log "testing $where"
"${env[@]}" "$py" -m pytest python/tests -m "not gpu" -q -p no:cacheprovider "$@"
