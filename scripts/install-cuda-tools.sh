#!/usr/bin/env bash
# Install the CUDA compiler pieces the tests use, from PyPI wheels, without touching the system:
#   - nvidia-cuda-nvrtc      libnvrtc (CUDA C++ -> PTX -> cubin, with ptxas inside), and
#   - nvidia-cuda-cuobjdump  cuobjdump (lists the SASS of a cubin), and
#   - nvidia-cuda-nvdisasm   nvdisasm (which cuobjdump runs to disassemble),
#   - nvidia-nvjitlink       libnvJitLink (PTX -> cubin with ptxas inside: the PTX backend),
#   - nvidia-cuda-nvcc       only its ptxas: whole-program PTX (kernels that move registers
#                            with `setmaxnreg`, which nvJitLink drops) assembles to a cubin,
#   - nvidia-nvshmem-cu13    NVSHMEM's headers and device archive (and host library): the
#                            NVSHMEM route links kernels with them (its bitcode is skipped),
#   - nvidia-cuda-runtime, nvidia-cuda-cccl   cuda_runtime.h and libcu++, which NVSHMEM's
#                            headers include when NVRTC compiles our shim,
# downloaded with `pip download` (nothing is pip-installed) and unpacked under
# target/cuda-tools/ (or $TILELANG_CUDA_TOOLS). No GPU and no driver are needed: this is only
# the compiler.
#
# Usage:   eval "$(bash scripts/install-cuda-tools.sh)"
# stdout carries only `export NAME=value` lines; progress and errors go to stderr.
# Idempotent: a second run with the same pinned versions downloads nothing.
#
# Versions: NVRTC 13.0 matches the GPU machines' driver (580, CUDA 13.0), so its PTX and cubins
# load there; it compiles sm_80 ... sm_90a ... sm_120. cuobjdump and nvdisasm have no 13.0
# wheels; 13.2 reads 13.0 cubins.
set -euo pipefail

NVRTC_VERSION="${TILELANG_NVRTC_VERSION:-13.0.88}"
CUOBJDUMP_VERSION="${TILELANG_CUOBJDUMP_VERSION:-13.2.86}"
NVDISASM_VERSION="${TILELANG_NVDISASM_VERSION:-$CUOBJDUMP_VERSION}"
NVJITLINK_VERSION="${TILELANG_NVJITLINK_VERSION:-$NVRTC_VERSION}"
NVCC_VERSION="${TILELANG_NVCC_VERSION:-$NVRTC_VERSION}"
# torch 2.11 (cu130) pins NVSHMEM 3.4.5: kernels linked here load in its processes.
NVSHMEM_VERSION="${TILELANG_NVSHMEM_VERSION:-3.4.5}"
CUDART_VERSION="${TILELANG_CUDART_VERSION:-13.0.96}"
CCCL_VERSION="${TILELANG_CCCL_VERSION:-13.0.85}"

root="$(cd "$(dirname "$0")/.." && pwd)"
dest="${TILELANG_CUDA_TOOLS:-$root/target/cuda-tools}"
stamp="$dest/.installed"
want="nvidia-cuda-nvrtc==$NVRTC_VERSION nvidia-cuda-cuobjdump==$CUOBJDUMP_VERSION nvidia-cuda-nvdisasm==$NVDISASM_VERSION nvidia-nvjitlink==$NVJITLINK_VERSION nvidia-cuda-nvcc==$NVCC_VERSION nvidia-nvshmem-cu13==$NVSHMEM_VERSION nvidia-cuda-runtime==$CUDART_VERSION nvidia-cuda-cccl==$CCCL_VERSION"

log() { echo "install-cuda-tools: $*" >&2; }

case "$(uname -s)-$(uname -m)" in
  Linux-x86_64) platform=manylinux_2_17_x86_64 ;;
  Linux-aarch64) platform=manylinux_2_17_aarch64 ;;
  *)
    log "no CUDA wheels for $(uname -s)-$(uname -m); the CUDA compile tests will be skipped"
    exit 0
    ;;
esac

find_one() { # find_one DIR NAME-GLOB: the first matching file, or nothing
  find "$1" -name "$2" -type f 2>/dev/null | grep -v '\.alt\.' | sort | head -n 1 || true
}

if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ] \
   || [ -z "$(find_one "$dest" 'libnvrtc.so.*')" ] \
   || [ -z "$(find_one "$dest" 'libnvJitLink.so.*')" ] \
   || [ -z "$(find_one "$dest" ptxas)" ]; then
  python="$(command -v python3 || command -v python || true)"
  if [ -z "$python" ]; then
    log "error: python3 with pip is needed to download the NVRTC wheels"
    exit 1
  fi
  log "downloading $want into $dest"
  # Remove only what this script creates ($TILELANG_CUDA_TOOLS may name a shared folder).
  rm -rf "$dest/nvidia" "$dest/wheels" "$stamp"
  mkdir -p "$dest/wheels"
  # Platform tags list every manylinux level the wheels have used; --only-binary keeps pip
  # from building anything.
  "$python" -m pip download --quiet --no-deps --only-binary=:all: \
    --platform "$platform" --platform "manylinux2014_${platform##*_2_17_}" \
    --platform "manylinux_2_12_${platform##*_2_17_}" --platform "manylinux2010_${platform##*_2_17_}" \
    --platform "manylinux_2_27_${platform##*_2_17_}" --platform "manylinux_2_28_${platform##*_2_17_}" \
    --implementation py --python-version 3 \
    -d "$dest/wheels" $want >&2
  # Unpack with Python's zipfile (unzip may be absent); it drops the executable bits, which
  # are put back below.
  "$python" - "$dest" >&2 <<'PY'
import pathlib, sys, zipfile
dest = pathlib.Path(sys.argv[1])
for whl in sorted((dest / "wheels").glob("*.whl")):
    # Of nvcc's wheel only ptxas (its nvcc, nvlink and front end are another 80 MB).
    only_ptxas = whl.name.startswith("nvidia_cuda_nvcc")
    with zipfile.ZipFile(whl) as z:
        for name in z.namelist():
            if only_ptxas and not name.endswith("/bin/ptxas"):
                continue
            # Skip the ".alt" library variants (another 114 MB, unused) and package stubs.
            # NVSHMEM's LLVM bitcode (31 MB) is for other compilers' routes, not ours.
            if (name.startswith("nvidia/") and not name.endswith("/")
                    and "__init__" not in name and ".alt." not in name
                    and not name.endswith(".bc")):
                z.extract(name, dest)
    print(f"unpacked {whl.name}", file=sys.stderr)
PY
  find "$dest/nvidia" -path '*/bin/*' -type f -exec chmod +x {} +
  rm -rf "$dest/wheels"
  echo "$want" > "$stamp"
else
  log "already installed in $dest ($want)"
fi

nvrtc="$(find_one "$dest" 'libnvrtc.so.*')"
cuobjdump="$(find_one "$dest" cuobjdump)"
if [ -z "$nvrtc" ]; then
  log "error: no libnvrtc.so.* under $dest after unpacking"
  exit 1
fi
log "NVRTC: $nvrtc"
log "cuobjdump: ${cuobjdump:-<none>}"
jitlink="$(find_one "$dest" 'libnvJitLink.so.*')"
log "nvJitLink: ${jitlink:-<none>}"
ptxas="$(find_one "$dest" ptxas)"
log "ptxas: ${ptxas:-<none>}"
echo "export TILELANG_CUDA_TOOLS='$dest'"
echo "export TILELANG_NVRTC='$nvrtc'"
[ -n "$cuobjdump" ] && echo "export TILELANG_CUOBJDUMP='$cuobjdump'"
[ -n "$jitlink" ] && echo "export TILELANG_NVJITLINK='$jitlink'"
# ptxas is found under TILELANG_CUDA_TOOLS; TILELANG_PTXAS is not set, since setting it would
# make the runtime prefer ptxas to the driver's JIT (crates/runtime/src/whole_program.rs).
# With the toolchain installed, the compile tests must run: a missing library now fails them.
echo "export TILELANG_REQUIRE_NVRTC=1"
if [ -f "$dest/nvidia/nvshmem/lib/libnvshmem_device.a" ]; then
  log "NVSHMEM: $dest/nvidia/nvshmem"
  echo "export TILELANG_NVSHMEM_HOME='$dest/nvidia/nvshmem'"
  echo "export TILELANG_REQUIRE_NVSHMEM=1"
fi
