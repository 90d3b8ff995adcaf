#!/usr/bin/env bash
# On the GPU host, from the repo root, with .device-carry carried (gpu/stage.sh's wheels and runtime-only
# tvm package, seed 000's pool bundles in .device-carry/bundles/pool): the shared CUPTI capture child
# and the output-root checks of its writes. (1) three pool bundles profiled by one child, each profile
# ok; (2) a link planted at the shared envelope's name: the link and its target stay, and each
# variant is profiled again in a child of its own. measurement.json of each run comes back under $OUT.
set -uo pipefail
export PYTHONUNBUFFERED=1 TVM_USE_RUNTIME_LIB=1 PYTHONSAFEPATH=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
    .device-carry/whl/*.whl || { echo "wheel install failed"; exit 3; }
cp -r .device-carry/tvm/tvm /tmp/site/tvm
export PYTHONPATH="$PWD:/tmp/site"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
B=.device-carry/bundles/pool
W=/tmp/verify; rm -rf $W; mkdir -p $W
t0=$(date +%s.%N)
timeout 200 python3 -m rootcause run $B/pool_fusion-off $B/pool_fusion-on $B/pool_fusion-on_h1-dataflow-boundary \
   --out $W/one --profile cupti --budget-s 5; echo "run one: exit $?"
python3 -c "import time;print('wall %.2f s' % (time.time() - $t0))"
ls -la $W/one
python3 - $W/one <<'PY'
import json, sys, pathlib
d = pathlib.Path(sys.argv[1])
m = json.loads((d / "measurement.json").read_text())
for k, v in m["profiles"].items():
    print(k, {kk: vv for kk, vv in v.items() if kk in ("ok", "error", "records", "path")})
PY
mkdir -p $W/two; echo "the user's file" > $W/user.txt; ln -s $W/user.txt $W/two/cupti-capture_result.json
timeout 200 python3 -m rootcause run $B/pool_fusion-off $B/pool_fusion-on --out $W/two --profile cupti --budget-s 2; echo "run two: exit $?"
ls -la $W/two; cat $W/user.txt
python3 - $W/two <<'PY'
import json, sys, pathlib
d = pathlib.Path(sys.argv[1])
m = json.loads((d / "measurement.json").read_text())
for k, v in m["profiles"].items():
    print(k, {kk: vv for kk, vv in v.items() if kk in ("ok", "error", "records", "path")})
PY
mkdir -p $OUT/verify && cp $W/one/measurement.json $OUT/verify/one-measurement.json && cp $W/two/measurement.json $OUT/verify/two-measurement.json
