"""Benchmark: `rootcause compare` on large Chrome traces, as a user runs it (the installed
`rootcause` command, whole process): CPU seconds and peak RSS for traces of >= 60 MB of JSON.

The traces are real ones made longer: a committed capture's events repeated, each copy shifted
past the previous one in time, with its step number, External id and correlation moved on, so the
reader sees a longer capture of the same run (more steps, the same kernels). Sources: the 2021
TensorBoard-plugin sample (Kineto format of PyTorch 1.8-1.9) and the H200 round-4 hostop trace
(torch 2.11). Writes the enlarged traces as plain JSON under --work (gzip is also read, but the
goal is stated for JSON).

    python benchmarks/bench_traces.py --work /tmp/bench_traces [--mb 60]
"""
from __future__ import annotations

import argparse
import gzip
import json
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = {
    "kineto-2021": ROOT / "fixtures/captures/kineto-2021-tb-plugin/resnet50_num_workers_0.worker0.1623143089861.pt.trace.json.gz",
    "torch-2.11": ROOT / "fixtures/captures/h200-2026-12-05-kineto4/hostop-light.json.gz",
}
ID_KEYS = ("External id", "external id", "correlation", "Ev Idx")


def enlarge(src: Path, dst: Path, target_mb: float) -> int:
    """dst: src's events repeated until the JSON reaches target_mb; returns the copies made."""
    with gzip.open(src, "rt") as f:
        doc = json.load(f)
    events = doc["traceEvents"]
    timed = [e for e in events if isinstance(e.get("ts"), (int, float))]
    span = max(e["ts"] + (e.get("dur") or 0) for e in timed) - min(e["ts"] for e in timed) + 1000.0
    size = len(json.dumps(events))
    copies = max(1, int(target_mb * 1e6 / size) + 1)
    out = []
    for c in range(copies):
        for e in events:
            e = dict(e)
            if isinstance(e.get("ts"), (int, float)):
                e["ts"] = e["ts"] + c * span
            name = e.get("name")
            if isinstance(name, str) and name.startswith("ProfilerStep#"):
                e["name"] = f"ProfilerStep#{int(name.split('#')[1]) + c * 1000}"
            if isinstance(e.get("args"), dict):
                args = dict(e["args"])
                for k in ID_KEYS:
                    if isinstance(args.get(k), int):
                        args[k] += c * 10_000_000
                e["args"] = args
            if isinstance(e.get("id"), int):
                e["id"] += c * 10_000_000
            out.append(e)
    doc["traceEvents"] = out
    dst.write_text(json.dumps(doc))
    return copies


def run(trace: Path, work: Path) -> tuple[float, float, int]:
    """(CPU s, wall s, peak RSS MiB) of one `rootcause compare trace trace` child."""
    exe = shutil.which("rootcause") or str(Path(sys.executable).parent / "rootcause")
    out = work / f"out-{trace.stem}"
    shutil.rmtree(out, ignore_errors=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run([exe, "compare", str(trace), str(trace), "--out", str(out)], capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"rootcause compare {trace} failed: {proc.stderr.strip()[-500:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall, after.ru_maxrss // 1024


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--mb", type=float, default=60.0, help="JSON size of each enlarged trace")
    args = ap.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    print(f"{'trace':14} {'MB':>7} {'copies':>6} {'CPU s':>7} {'wall s':>7} {'peak MiB':>9}  goal <= 10 s CPU, <= 2048 MiB")
    for label, src in SOURCES.items():
        dst = args.work / f"{label}.json"
        copies = enlarge(src, dst, args.mb)
        cpu, wall, rss = run(dst, args.work)
        # both sides are the same file: the command reads it twice, so half is one trace's cost
        print(f"{label:14} {dst.stat().st_size / 1e6:7.1f} {copies:6d} {cpu:7.2f} {wall:7.2f} {rss:9d}  "
              f"(compare reads the trace twice: {cpu / 2:.2f} s CPU a read)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
