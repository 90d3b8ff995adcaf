#!/usr/bin/env bash
# Back on the build machine, after gpu/host_sweep.sh ran on the GPU host:
#   gpu/collect_sweep.sh SWEEP BUILD_OUT DEVICE_FILES REPORT_DIR
# Unpacks DEVICE_FILES/sweep-runs.tar.gz (the pairs' run directories) into BUILD_OUT (the
# --out of `rootcause sweep SWEEP --until build`), runs the attribution stage here on a local
# Ray cluster of 2 CPUs (the builds and runs are found done), and copies the report into
# REPORT_DIR without the bundles or the per-pair HTML (4.7 MB each, plotly inlined; each pair's
# `rootcause report REPORT_DIR/pairs/ID/attribution.json` renders it again): sweep.html,
# sweep.md, sweep.json, host.log, and per pair attribution.json, report.md, result.json and
# run/ (measurement.json, env.json, the CUPTI captures).
set -euo pipefail
sweep=$1; build=$2; files=$3; report=$4
repo=$(cd "$(dirname "$0")/.." && pwd)
PY=${PY:-/work/main/.venv/bin/python}
tar xzf "$files/sweep-runs.tar.gz" -C "$build" pairs
PYTHONPATH=$repo $PY -m rootcause sweep "$sweep" --out "$build" --ray local --num-cpus 2
mkdir -p "$report/pairs"
cp "$build"/sweep.html "$build"/sweep.md "$build"/sweep.json "$report/"
[ -f "$files/host.log" ] && cp "$files/host.log" "$report/"
for d in "$build"/pairs/*/; do
  id=$(basename "$d"); mkdir -p "$report/pairs/$id"
  for f in attribution.json report.md result.json run; do
    [ -e "$d/$f" ] && cp -r "$d/$f" "$report/pairs/$id/"
  done
done
du -sh "$report"
