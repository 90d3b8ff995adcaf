#!/usr/bin/env bash
# Run on the GPU host (device tool), from the repo root, with .device-carry carried (gpu/stage.sh):
#   gpu/bench_host.sh
# The GPU benchmarks of issue 4 on the carried bundles, each step bounded and all of them by
# HOST_DEADLINE_S (default 480) from the start:
#   1. profiler overhead (CUPTI on vs off, one process) on pool_fusion on/off;
#   2. measurement efficiency (GPU seconds to a 1% interval on the on/off ratio), 3 trials;
#   3. profiler overhead on prefill_dedup alone/dedup, when those bundles are carried.
# Leaves $OUT/bench_host.log and one JSON per step in $OUT (4 files; the tool returns 8 at most).
# Environment as in gpu/host_run.sh: carried cp312 wheels into /tmp/site, the runtime-only tvm.
# Dry run on the CPU machine (llvm bundles laid out as CASE/VARIANT, nothing installed):
#   BENCH_LOCAL=1 PY=.venv/bin/python BENCH_BUNDLES=/tmp/llvm OUT=/tmp/o gpu/bench_host.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/rootcause-out}
export OUT
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
exec > >(tee -a "$OUT/bench_host.log") 2>&1
START=$(date +%s)
DEADLINE=$(( START + ${HOST_DEADLINE_S:-480} ))
BUNDLES=${BENCH_BUNDLES:-.device-carry/bundles}
PY=${PY:-python3}

if [ "${BENCH_LOCAL:-0}" != 1 ]; then
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    .device-carry/whl/*.whl || { echo "wheel install failed"; exit 3; }
rm -rf /tmp/site/tvm && cp -r .device-carry/tvm/tvm /tmp/site/tvm  # rm: a warm machine keeps /tmp/site
export PYTHONPATH="$PWD:/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
export TVM_USE_RUNTIME_LIB=1
echo "== host"; date -u; python3 --version
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,clocks.max.sm,temperature.gpu,power.draw \
    --format=csv
python3 -c 'import tvm, cupti, pynvml; print("tvm", tvm.__version__, "runtime-only:", tvm.base._RUNTIME_ONLY)'
fi

rc=0
step() {  # NAME LIMIT_S command...: run it under min(LIMIT_S, time left before the deadline)
  local name=$1 limit=$2; shift 2
  local left=$(( DEADLINE - $(date +%s) ))
  if [ "$left" -lt 30 ]; then echo "== $name: skipped (deadline)"; rc=4; return; fi
  [ "$limit" -gt "$left" ] && limit=$left
  echo "== $name (limit ${limit}s) at $(( $(date +%s) - START ))s"
  timeout "$limit" "$@"
  local status=$?
  echo "== $name: exit status $status at $(( $(date +%s) - START ))s"
  [ $status -ne 0 ] && rc=$status
}

POOL="$BUNDLES/pool_fusion/on $BUNDLES/pool_fusion/off"
# shellcheck disable=SC2086
step "overhead pool_fusion" 120 "$PY" benchmarks/bench_profiler_overhead.py $POOL --label pool_fusion \
    --pristine-budget-s 5 --budget-s 25
# shellcheck disable=SC2086
step "efficiency pool_fusion" 200 "$PY" benchmarks/bench_measure_efficiency.py $POOL --label pool_fusion \
    --target-width 0.01 --budget-s 40 --trials 3
if [ -d "$BUNDLES/prefill_dedup/alone" ] && [ -d "$BUNDLES/prefill_dedup/dedup" ]; then
  # Calls of 0.2-0.3 s: few warm-up calls, 2 samples per arm and block; inputs (1.3 GB) regenerated here.
  step "overhead prefill_dedup" 180 "$PY" benchmarks/bench_profiler_overhead.py \
      "$BUNDLES/prefill_dedup/alone" "$BUNDLES/prefill_dedup/dedup" --label prefill_dedup \
      --warmup-calls 3 --warmup-s 1 --repeats 2 --pristine-budget-s 6 --budget-s 30
else
  echo "== overhead prefill_dedup: skipped (bundles not carried)"
fi
[ "${BENCH_LOCAL:-0}" != 1 ] && nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv
ls -la "$OUT"
echo "== done in $(( $(date +%s) - START ))s, status $rc"
exit $rc
