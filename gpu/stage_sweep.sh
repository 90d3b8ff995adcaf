#!/usr/bin/env bash
# Stage a sweep for the GPU host (run here, on the build machine):
#   gpu/stage_sweep.sh SWEEP BUILD_OUT CARRY_DIR
# SWEEP is a sweep file under fixtures/cases/ and BUILD_OUT the --out of
#   rootcause sweep SWEEP --until build --out BUILD_OUT
# CARRY_DIR receives what gpu/host_sweep.sh needs on a host with no network and no compiler:
#   ray-min.tar.xz  Ray (cp312) without its Java jars, dashboard UI and libraries (rllib, data,
#                   serve, tune, train, llm, air), its three native binaries stripped
#   whl/            cp312 wheels the host lacks: Ray's jsonschema stack, the TVM runtime's
#                   apache-tvm-ffi, cupti-python and pyelftools
#   tvm.tar.xz      the installed tvm package without its compiler library and sources
#   code/           this checkout's rootcause/, parsers/ and the sweep's cases
#   pairs.tar.xz    BUILD_OUT/pairs (the built bundles, plan.json and build records)
#   host_sweep.sh
# Everything that travels, the checkout included, must stay under 64 MiB.
set -euo pipefail
sweep=$1; build=$2; carry=$3
repo=$(cd "$(dirname "$0")/.." && pwd)
PY=${PY:-/work/main/.venv/bin/python}
RAY_VERSION=${RAY_VERSION:-2.60.0}
mkdir -p "$carry/whl"
PLAT="--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64
      --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64"
fetch() {  # cp312 wheel of REQ into DIR, once
  local req=$1 dir=$2 name; name=$(echo "${req%%==*}" | tr - _)
  ls "$dir/${name}"-*.whl >/dev/null 2>&1 && return 0
  $PY -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $PLAT -d "$dir" "$req"
}
# Ray's own needs that the host image lacks (KINDS.md's package list has click, filelock,
# msgpack, packaging, protobuf, pyyaml, requests, attrs, aiohttp; not jsonschema's stack)
for req in jsonschema==4.26.0 jsonschema-specifications==2025.9.1 referencing==0.37.0 rpds-py==2026.9.1 \
           apache-tvm-ffi==0.1.15.post2 cupti-python==13.4.0 pyelftools==0.33; do
  fetch "$req" "$carry/whl"
done
if [ ! -f "$carry/ray-min.tar.xz" ]; then
  tmp=$(mktemp -d); mkdir -p "$tmp/wheel" "$tmp/site"
  fetch "ray==$RAY_VERSION" "$tmp/wheel"
  (cd "$tmp/site" && unzip -q "$tmp"/wheel/ray-*.whl)
  rm -rf "$tmp"/site/ray/{jars,dashboard/client/build,rllib,data,serve,tune,train,llm,air} \
         "$tmp"/site/ray-*.dist-info/RECORD
  strip --strip-unneeded "$tmp/site/ray/_raylet.so" "$tmp/site/ray/core/src/ray/gcs/gcs_server" \
        "$tmp/site/ray/core/src/ray/raylet/raylet"
  tar cf - -C "$tmp/site" . | xz -T1 -9 > "$carry/ray-min.tar.xz"
  rm -rf "$tmp"
fi
if [ ! -f "$carry/tvm.tar.xz" ]; then
  SITE=$($PY -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  (cd "$SITE" && tar cf - --exclude='tvm/lib/libtvm_compiler.so' --exclude='tvm/3rdparty' --exclude='tvm/src' \
      --exclude='tvm/include' --exclude='tvm/relax/frontend' --exclude='__pycache__' tvm) | xz -T1 -6 > "$carry/tvm.tar.xz"
fi
rm -rf "$carry/code"; mkdir -p "$carry/code/fixtures/cases"
cp -r "$repo/rootcause" "$repo/parsers" "$carry/code/"
cases=$(cd "$repo/fixtures/cases" && ls -d */)
for c in $cases; do  # the cases the sweep names
  grep -q "${c%/}/" "$repo/fixtures/cases/$(basename "$sweep")" && cp -r "$repo/fixtures/cases/$c" "$carry/code/fixtures/cases/"
done
cp "$repo/fixtures/cases/$(basename "$sweep")" "$carry/code/fixtures/cases/"
find "$carry/code" -name __pycache__ -prune -exec rm -rf {} +
cp "$repo/gpu/host_sweep.sh" "$carry/"
tar cf - -C "$build" pairs | xz -T1 -6 > "$carry/pairs.tar.xz"
du -sh "$carry"/* "$carry"
