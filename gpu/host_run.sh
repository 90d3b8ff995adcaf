#!/usr/bin/env bash
# Run on the GPU host (device tool), from the repo root, with .device-carry carried:
#   gpu/host_run.sh [rootcause run options...]     e.g. --profile cupti --budget-s 20
# Installs the carried wheels into /tmp/site, stages the runtime-only tvm package, records the
# host (nvidia-smi), runs `rootcause run` on every carried bundle, and leaves everything in $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/rootcause-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
LOG="$OUT/host.log"
exec > >(tee -a "$LOG") 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    .device-carry/whl/*.whl || { echo "wheel install failed"; exit 3; }
cp -r .device-carry/tvm/tvm /tmp/site/tvm
export PYTHONPATH="$PWD:/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
export TVM_USE_RUNTIME_LIB=1
echo "== host"; date -u; uname -r; python3 --version
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,clocks.max.sm,temperature.gpu,power.draw \
    --format=csv
nvidia-smi | head -15
echo "== imports"
python3 -c 'import tvm, iree.runtime, cupti, pynvml; print("tvm", tvm.__version__, "runtime-only:", tvm.base._RUNTIME_ONLY)'
rc=0
for case_dir in .device-carry/bundles/*/; do
  case_name=$(basename "$case_dir")
  echo "== rootcause run: $case_name"
  mapfile -t BUNDLES < <(ls -d "$case_dir"*/ | sed 's:/$::')
  python3 -m rootcause run "${BUNDLES[@]}" --out "$OUT/results/$case_name" "$@"
  status=$?
  echo "rootcause run $case_name: exit status $status"
  [ $status -ne 0 ] && rc=$status
  ls -la "$OUT/results/$case_name"
done
# The device tool returns at most 8 files: one archive holds every case's results.
tar czf "$OUT/results.tar.gz" -C "$OUT" results && rm -rf "$OUT/results"
exit $rc
