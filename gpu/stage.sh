#!/usr/bin/env bash
# Run on the CPU machine: fill .device-carry/ (git-ignored via .git/info/exclude) with what the
# GPU host needs and lacks: cp312 runtime wheels, the runtime-only tvm package, and bundles.
#   gpu/stage.sh [CASE:BUNDLE_DIR...]   (default: build the pool_fusion on/off pair)
# Bundles land in .device-carry/bundles/CASE/<bundle>; host_run.sh runs each CASE together
# (the variants of one case share inputs).
set -euo pipefail
cd "$(dirname "$0")/.."
CARRY=.device-carry
PY=.venv/bin/python
grep -qx '/.device-carry/' .git/info/exclude 2>/dev/null || echo '/.device-carry/' >> .git/info/exclude
mkdir -p "$CARRY/whl" "$CARRY/bundles"

# 1. cp312 manylinux wheels of what the host lacks (KINDS.md: it has numpy, pandas, msgpack,
#    nvidia-ml-py, ml-dtypes, cuda-bindings, nvidia-cuda-cupti, nvidia-cuda-runtime).
PLAT="--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64
      --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64"
for req in apache-tvm-ffi==0.1.15.post2 iree-base-runtime==3.13.0 cupti-python==13.4.0 pyelftools==0.33 \
           lz4==4.4.5 zstandard==0.25.0 msgspec==0.23.0; do
  name=$(echo "${req%%==*}" | tr - _)
  ls "$CARRY/whl/${name}"-*.whl >/dev/null 2>&1 && continue
  $PY -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $PLAT \
      -d "$CARRY/whl" "$req"
done

# 2. The tvm package without the compiler (docs/GPU_HOST.md): about 17 MB.
SITE=$($PY -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
rm -rf "$CARRY/tvm"
mkdir -p "$CARRY/tvm"
(cd "$SITE" && tar cf - --exclude='tvm/lib/libtvm_compiler.so' --exclude='tvm/3rdparty' --exclude='tvm/src' \
    --exclude='tvm/include' --exclude='__pycache__' tvm) | tar xf - -C "$CARRY/tvm"

# 3. Bundles.
rm -rf "$CARRY/bundles"; mkdir -p "$CARRY/bundles"
if [ $# -eq 0 ]; then
  for v in on off; do
    $PY -m rootcause build fixtures/cases/pool_fusion/variants.toml#$v --target cuda:sm_90 \
        --out "$CARRY/bundles/pool_fusion/pool_fusion-$v"
  done
else
  for arg in "$@"; do
    case_name=${arg%%:*}; dir=${arg#*:}
    mkdir -p "$CARRY/bundles/$case_name"; cp -r "$dir" "$CARRY/bundles/$case_name/"
  done
fi
du -sh "$CARRY"/*
