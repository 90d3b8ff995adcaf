"""Benchmark: a model-sized pair, about 1,000 launches a call, through the installed command.

The pair is made from a real one: the H200 CUPTI capture of the llama decoder's IREE pair
(fixtures/captures/h200-2026-12-05-models: `iree` 129 launches a call, `iree_hfuse` 113, five
profiled calls each) and its build catalogs (analyze.tar.gz). Each call is laid end to end
REPLICAS times, replica r's kernels renamed ('..._rD') and given their own source lines and their catalog rows' module paths moved
to layers 8r..8r+7, so one call holds REPLICAS x 8 = 64 decoder layers: 1,032 launches in A and 904
in B, about a hundred units, each repeated module a group of REPLICAS units. Durations, grids and
gaps are the capture's own.

Measured as a user runs it (the installed `rootcause` entry, a fresh process each, CPU time of
the child from wait4): `rootcause compare` (read, split, align, attribute, diagnose, and the
three reports it writes), then `rootcause report --format html` and `--format markdown` on its
attribution.json alone. Goals (issue 26): compare <= 10 s CPU, a report <= 3 s.
Run: .venv/bin/python benchmarks/bench_model_scale.py [--replicas 8] [--repeat 3]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CAPTURE = ROOT / "fixtures/captures/h200-2026-12-05-models"
LAYERS = 8  # the decoder's own layers
PAIR = ("llama_iree", "llama_iree_hfuse")


def renamed(name: str, r: int) -> str:
    """'..._rA', '..._rB', ...: letters, since names that differ only in numbers align as one kernel."""
    tag = ""
    while True:
        r, digit = divmod(r, 26)
        tag = chr(ord("A") + digit) + tag
        if r == 0:
            return f"{name}_r{tag}"
        r -= 1


def moved_loc(loc: str, r: int) -> str:
    """A source location of replica r: its own lines (another layer's ops), so replicas stay apart."""
    m = re.fullmatch(r"(.*):(\d+):(\d+)", loc)
    return f"{m.group(1)}:{int(m.group(2)) + 100_000 * r}:{m.group(3)}" if m else f"{loc}#{r}"


def calls(records: list[dict], n: int) -> list[list[dict]]:
    """The profile's n calls: its kernel records in start order, cut into n equal runs."""
    kernels = sorted((x for x in records if x.get("kind") == 10), key=lambda x: x["start"])
    per = len(kernels) // n
    assert per * n == len(kernels), (len(kernels), n)
    return [kernels[i * per:(i + 1) * per] for i in range(n)]


def scaled_profile(records: list[dict], n_calls: int, replicas: int) -> list[dict]:
    """Each call replayed `replicas` times back to back under renamed kernels; calls keep their gaps."""
    out, clock, corr = [], 0, 0
    previous_end = None
    for call in calls(records, n_calls):
        span = call[-1]["end"] - call[0]["start"]
        clock += 0 if previous_end is None else call[0]["start"] - previous_end  # the capture's gap
        for r in range(replicas):
            shift = clock - call[0]["start"]
            for x in call:
                corr += 1
                out.append({**x, "name": renamed(x["name"], r), "start": x["start"] + shift,
                            "end": x["end"] + shift, "completed": x["end"] + shift, "correlation_id": corr})
            clock += span + 1000  # 1 us between replicas, as between two layers' launches
        previous_end = call[-1]["end"]
    return out


def scaled_catalog(manifest: dict, replicas: int) -> dict:
    """The catalog with every kernel copied per replica, its layers moved to 8r..8r+7."""
    def moved(path: str, r: int) -> str:
        return re.sub(r"^layers\.(\d+)", lambda m: f"layers.{int(m.group(1)) + LAYERS * r}", path)

    kernels = [{**k, "name": renamed(k["name"], r), "function": renamed(k.get("function", k["name"]), r),
                "module_paths": [moved(p, r) for p in k.get("module_paths", [])],
                "source_locs": [moved_loc(x, r) for x in k.get("source_locs", [])],
                "source_ops": [renamed(x, r) for x in k.get("source_ops", [])]}
               for r in range(replicas) for k in manifest["kernels"]]
    return {**manifest, "kernels": kernels, "binaries": [], "ir": []}


def timed(argv: list[str]) -> tuple[float, float]:
    """(CPU s, wall s) of one fresh process."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    err = proc.stderr.read().decode() if proc.stderr else ""
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"{' '.join(argv)} failed: {err.strip()}")
    return usage.ru_utime + usage.ru_stime, wall


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--replicas", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=3, help="fresh processes a command (least CPU kept)")
    ap.add_argument("--keep", type=Path, help="also copy the scaled profiles and catalogs here")
    args = ap.parse_args()
    rootcause = shutil.which("rootcause", path=str(Path(sys.executable).parent)) or shutil.which("rootcause")
    if rootcause is None:
        sys.exit("the rootcause command is not installed (pip install -e .)")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        with tarfile.open(CAPTURE / "results.tar.gz") as tar:
            tar.extractall(work, filter="data")
        with tarfile.open(CAPTURE / "analyze.tar.gz") as tar:
            tar.extractall(work / "analyze", filter="data")
        profiled = json.loads((work / "results/llama_iree/measurement.json").read_text())["profiles"]
        n_calls = {v: int(profiled[v]["calls"]) for v in PAIR}
        inputs = {}
        for v in PAIR:
            records = json.loads((work / f"results/llama_iree/{v}.cupti.json").read_text())
            prof = work / f"{v}.scaled.cupti.json"
            prof.write_text(json.dumps(scaled_profile(records, n_calls[v], args.replicas)))
            manifest = json.loads((work / f"analyze/llama_iree/bundles/{v}/manifest.json").read_text())
            cat = work / f"{v}.scaled.manifest.json"
            cat.write_text(json.dumps(scaled_catalog(manifest, args.replicas)))
            inputs[v] = (prof, cat, len(json.loads(prof.read_text())) // n_calls[v])
        if args.keep:
            args.keep.mkdir(parents=True, exist_ok=True)
            for f in work.glob("*.scaled.*"):
                shutil.copy2(f, args.keep / f.name)
        out = work / "out"
        (a, cat_a, per_a), (b, cat_b, per_b) = inputs[PAIR[0]], inputs[PAIR[1]]
        compare = [rootcause, "compare", str(a), str(b), "--catalog-a", str(cat_a), "--catalog-b", str(cat_b),
                   "--calls", str(n_calls[PAIR[0]]), "--gpu", "H200", "--out", str(out)]
        runs = {"compare": min(timed(compare) for _ in range(args.repeat))}
        doc = json.loads((out / "attribution.json").read_text())
        for fmt in ("html", "markdown"):
            cmd = [rootcause, "report", str(out / "attribution.json"), "--format", fmt, "--out", str(work / f"r.{fmt}")]
            runs[f"report --format {fmt}"] = min(timed(cmd) for _ in range(args.repeat))
        groups = sum(1 for u in doc["units"] if u.get("repeats"))  # units that name their module
        print(f"pair: {per_a} vs {per_b} launches a call, {n_calls[PAIR[0]]} calls a side, "
              f"{len(doc['units'])} units ({groups} with module paths); load {os.getloadavg()[0]:.1f}")
        print(f"verdict: B/A {doc['whole_graph'].get('ratio'):.3f} of the profiled spans (no measurement given)")
        for what, (cpu, wall) in runs.items():
            goal = 10.0 if what == "compare" else 3.0
            print(f"  rootcause {what:<24} {cpu:6.2f} s CPU  {wall:6.2f} s wall  (goal <= {goal:g} s CPU)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
