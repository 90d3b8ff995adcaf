#!/usr/bin/env bash
# On the GPU host (device tool), from the checkout root, with the folder gpu/stage_sweep.sh
# filled carried:   bash CARRY/host_sweep.sh SWEEP_FILE_NAME
# Installs the carried wheels and packages into /tmp/site, unpacks the built pairs, runs
#   rootcause sweep SWEEP --ray local --until run
# (a one-node Ray cluster: this host's CPUs, its GPUs, and per GPU one unit of the resource
# named after its target, e.g. cuda:sm_90) and packs the pairs' run directories, sweep.json
# and the log into $OUT. Attribution is done back on the build machine (same command there,
# without --until: the build and run stages are found done).
set -uo pipefail
cd "$(dirname "$0")"
sweep=$1
OUT=${OUT:-/tmp/rootcause-out}; SITE=${SITE:-/tmp/site}; PY=${PY:-python3}
mkdir -p "$OUT" "$SITE"
export PYTHONUNBUFFERED=1
exec > >(tee -a "$OUT/host.log") 2>&1
echo "== host"; date -u; uname -r; $PY --version; nproc
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv 2>/dev/null || echo "no nvidia-smi"
SECONDS=0
$PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" whl/*.whl \
  || { echo "wheel install failed"; exit 3; }
untar() { $PY -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2], filter="tar")' "$@"; }
untar ray-min.tar.xz "$SITE" && untar tvm.tar.xz "$SITE" || { echo "unpack failed"; exit 3; }
echo "== staged in ${SECONDS} s"
export PYTHONPATH="$PWD/code:$SITE${PYTHONPATH:+:$PYTHONPATH}" TVM_USE_RUNTIME_LIB=1 RAY_USAGE_STATS_ENABLED=0
rm -rf work && mkdir -p work/sweep && untar pairs.tar.xz work/sweep
$PY -c 'import ray, rootcause; print("ray", ray.__version__, ray.__file__)'
SECONDS=0
timeout "${SWEEP_LIMIT_S:-480}" $PY -m rootcause sweep "code/fixtures/cases/$sweep" --out work/sweep --ray local \
    --until "${UNTIL:-run}" ${SWEEP_OPTS:-}
rc=$?
echo "== rootcause sweep: exit status $rc in ${SECONDS} s"
(cd work/sweep && tar czf "$OUT/sweep-runs.tar.gz" sweep.json $(ls -d pairs/*/run pairs/*/result.json 2>/dev/null))
ls -la "$OUT"
exit $rc
