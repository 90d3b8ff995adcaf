#!/usr/bin/env bash
# On the GPU host, from the repo root, with .device-carry carried: `rootcause run` of the bundles
# given (else those in .device-carry/bundles/pool/, in name order) with --profile cupti, two
# versions of the code alternated twice (the working tree, and another rootcause tree in
# .device-carry/old, e.g. `git archive REV rootcause parsers | tar -x -C .device-carry/old`), each
# run timed whole, as a user runs it. The wheels and the runtime-only tvm package are gpu/stage.sh's.
set -uo pipefail
OUT=${OUT:-/tmp/rootcause-out}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/bench.log") 2>&1
export PYTHONUNBUFFERED=1 TVM_USE_RUNTIME_LIB=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
    .device-carry/whl/*.whl || { echo "wheel install failed"; exit 3; }
cp -r .device-carry/tvm/tvm /tmp/site/tvm
date -u; python3 --version
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv
# the bundles in the order given (A and B first, as analyze prints them), else in name order
if [ $# -gt 0 ]; then BUNDLES=("$@"); else mapfile -t BUNDLES < <(ls -d .device-carry/bundles/pool/*/ | sed 's:/$::'); fi
echo "bundles: ${#BUNDLES[@]}"
BUDGET=${BUDGET:-10}
for round in 1 2; do
  for which in old new; do
    root=$PWD; [ "$which" = old ] && root=$PWD/.device-carry/old
    t0=$(date +%s.%N)
    # PYTHONSAFEPATH: `-m` would otherwise put the working directory (the working tree) first on
    # sys.path, ahead of PYTHONPATH's root, and both versions would run the working tree's code
    PYTHONSAFEPATH=1 PYTHONPATH="$root:/tmp/site" timeout 240 python3 -m rootcause run "${BUNDLES[@]}" \
        --out "$OUT/results/$which-$round" --profile cupti --budget-s "$BUDGET"
    status=$?
    t1=$(date +%s.%N)
    PYTHONSAFEPATH=1 PYTHONPATH="$root:/tmp/site" python3 -c 'import rootcause, sys; print("version root:", rootcause.__file__)' 
    python3 -c "print('RESULT $which round $round: exit $status, wall %.2f s' % ($t1 - $t0))"
  done
done
tar czf "$OUT/results.tar.gz" -C "$OUT" results && rm -rf "$OUT/results"
