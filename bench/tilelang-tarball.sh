#!/usr/bin/env bash
# Builds .tl/tl-site.tar.xz here: TileLang 0.1.15 and the packages it needs that the GPU machine
# lacks, unpacked (installing a wheel is unzipping it) and xz-compressed, which brings 79 MB of
# wheels to 46 MB, inside a device call's 64 MiB. `bash bench/gpu-run.sh tilelang` unpacks it
# there (carry `.tl` and `.gpu`). Nothing here is committed: .tl is git-ignored.
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx '/.tl/' "$(git rev-parse --git-common-dir)/info/exclude" 2>/dev/null \
  || echo /.tl/ >> "$(git rev-parse --git-common-dir)/info/exclude"
rm -rf .tl && mkdir -p .tl/wheels .tl/site
for p in tilelang==0.1.15 z3-solver==4.15.4.0 apache-tvm-ffi==0.1.12 torch-c-dlpack-ext==0.1.5 cloudpickle==3.1.3; do
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .tl/wheels "$p"
done
for w in .tl/wheels/*.whl; do unzip -qo "$w" -d .tl/site; done
# The z3 command-line program (22 MB): TileLang loads the library, z3/lib.
rm -rf .tl/site/z3_solver-*.data
tar cf - -C .tl/site . | xz -T0 -6 > .tl/tl-site.tar.xz
rm -rf .tl/wheels .tl/site
ls -la .tl/tl-site.tar.xz
