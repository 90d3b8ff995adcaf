#!/usr/bin/env bash
# On the GPU host, from the repo root: run a cross-version pair staged by gpu/stage_versions.py.
#   bash .device-carry/versions/host.sh            (copied there as host.sh, payload.tar.xz beside it)
# Unpacks the payload, installs cupti-python and pyelftools into a private folder, and runs
# `rootcause run` on each staged pair (bundles/PAIR/*) with ROOTCAUSE_OFFLINE=1: each bundle needs
# its own runtime release (iree-base-runtime, or apache-tvm + apache-tvm-ffi), so rootcause makes
# one environment per bundle from the wheels carried in its toolchain/ (over this python's numpy,
# NVML and CUPTI libraries) and loads the bundle there. TVM runs runtime-only
# (TVM_USE_RUNTIME_LIB=1: the carried wheels have no compiler library).
# Writes only under $OUT/versions/ (log.txt, run.tar.gz, envs.json); never fails the call.
# Knobs: PY (python3), PROFILE (cupti), BUDGET_S (10), TOTAL_S (135: the pairs share it, in order).
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
O="${OUT:-/tmp/versions-out}/versions"
mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
trap 'echo "host.sh: line $LINENO exited with status $?"' ERR
PY=${PY:-python3}
W=$(mktemp -d /tmp/versions.XXXXXX)
DEADLINE=$(( $(date +%s) + ${TOTAL_S:-135} ))
export PYTHONUNBUFFERED=1
echo "== host $(date -u +%FT%TZ)"; uname -r; $PY --version; nproc
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,clocks.max.sm,temperature.gpu,power.draw \
    --format=csv 2>&1 || echo "(no nvidia-smi)"
echo "== unpack $(date -u +%T)"
tar xJf "$HERE/payload.tar.xz" -C "$W" || { echo "payload unpack failed"; exit 0; }
du -sh "$W"/* 2>&1
if ls "$W"/whl/*.whl >/dev/null 2>&1; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$W/site" "$W"/whl/*.whl \
      || echo "host wheels: install failed"
fi
export PYTHONPATH="$W/code:$W/site" ROOTCAUSE_OFFLINE=1 ROOTCAUSE_ENVS="$W/envs" ROOTCAUSE_CACHE="$W/cache"
export TVM_USE_RUNTIME_LIB=1
$PY -c 'import importlib.metadata as m
for d in ("iree-base-runtime", "apache-tvm", "cupti-python", "numpy", "nvidia-ml-py", "ml_dtypes"):
    try: print(d, m.version(d))
    except m.PackageNotFoundError: print(d, "not installed")' 2>&1
$PY -m venv --without-pip "$W/probe-venv" && echo "venv: ok" || echo "venv: $PY cannot make one"
cd "$W" || exit 0
mkdir -p "$W/run"
for pair in "$W"/bundles/*/; do
  name=$(basename "$pair")
  left=$(( DEADLINE - $(date +%s) ))
  [ "$left" -lt 20 ] && { echo "== skipped (deadline): $name"; continue; }
  echo "== rootcause run $name ($left s left) $(date -u +%T)"
  timeout "$left" $PY -m rootcause run "$pair"*/ --out "$W/run/$name" --profile "${PROFILE:-cupti}" \
      --budget-s "${BUDGET_S:-10}"
  echo "rootcause run $name: exit status $? $(date -u +%T)"
done
$PY - "$W/envs" > "$O/envs.json" <<'EOF' || true
import json, sys
from pathlib import Path
rows = {}
for f in sorted(Path(sys.argv[1]).glob("*/toolchain.json")):
    d = json.loads(f.read_text())
    rows[f.parent.name] = {"requirements": [Path(r).name for r in d["requirements"]],
                           "packages": {k: v for k, v in d["packages"].items()
                                        if k in ("iree-base-runtime", "apache-tvm", "apache-tvm-ffi")}}
print(json.dumps(rows, indent=1))
EOF
cat "$O/envs.json"
ls -la "$W/run" 2>&1
tar czf "$O/run.tar.gz" -C "$W" run 2>&1 || echo "no run folder to pack"
echo "== done $(date -u +%T)"
exit 0
