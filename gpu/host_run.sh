#!/usr/bin/env bash
# Run on the GPU host (device tool), from the repo root, with .device-carry carried:
#   gpu/host_run.sh [rootcause run options...]     e.g. --profile cupti --budget-s 20
# With .device-carry/plan.txt (CASE OUT_NAME TIMEOUT_S OPTIONS per line) the runs it lists, in order.
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
run_case() {  # CASE OUT_NAME TIMEOUT_S [rootcause run options...]
  local case_name=$1 out_name=$2 limit=$3; shift 3
  local case_dir=.device-carry/bundles/$case_name
  mapfile -t BUNDLES < <(ls -d "$case_dir"/*/ | sed 's:/$::')
  echo "== rootcause run: $case_name -> $out_name (limit ${limit}s): $*"; date -u +%T
  timeout "$limit" python3 -m rootcause run "${BUNDLES[@]}" --out "$OUT/results/$out_name" "$@"
  local status=$?
  echo "rootcause run $out_name: exit status $status"; date -u +%T
  [ $status -ne 0 ] && rc=$status
  ls -la "$OUT/results/$out_name"
}
if [ -f .device-carry/plan.txt ]; then
  # One line per run: CASE OUT_NAME TIMEOUT_S [options]; '#' starts a comment. Each run is
  # bounded, and all of them by HOST_DEADLINE_S (default 540) from the start, so the archive
  # below is always written inside the device tool's 600 s.
  DEADLINE=$(( $(date +%s) + ${HOST_DEADLINE_S:-540} ))
  while read -r case_name out_name limit opts; do
    case "$case_name" in ''|'#'*) continue ;; esac
    left=$(( DEADLINE - $(date +%s) ))
    [ "$left" -lt 20 ] && { echo "== skipped (deadline): $case_name $out_name"; continue; }
    [ "$limit" -gt "$left" ] && limit=$left
    if [ "$case_name" = "PROBE" ]; then  # PROBE CASE TIMEOUT_S: gpu/iree_timer_probe.py on CASE's bundles
      echo "== iree timer probe on $out_name"; mkdir -p "$OUT/results/probe"
      timeout "$limit" python3 gpu/iree_timer_probe.py "$OUT/results/probe/$out_name.json" \
          $(ls -d .device-carry/bundles/"$out_name"/*/) || rc=$?
      continue
    fi
    # shellcheck disable=SC2086
    run_case "$case_name" "$out_name" "$limit" $opts "$@" </dev/null
  done < .device-carry/plan.txt
else
  for case_dir in .device-carry/bundles/*/; do
    run_case "$(basename "$case_dir")" "$(basename "$case_dir")" 3600 "$@"
  done
fi
# The device tool returns at most 8 files: one archive holds every case's results.
tar czf "$OUT/results.tar.gz" -C "$OUT" results && rm -rf "$OUT/results"
exit $rc
