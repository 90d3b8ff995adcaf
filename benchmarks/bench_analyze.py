"""Benchmark: wall time of `rootcause analyze` for pool_fusion on vs off on llvm (the CPU), from a
cold build cache (ROOTCAUSE_CACHE in a fresh temporary directory) and then warm (same cache).

Each run is a child process, as a user runs it, with the default hybrids and --budget-s as given
(default 10). Prints the wall times and the stage times from analyze's progress lines.
Run: .venv/bin/python benchmarks/bench_analyze.py [--budget-s N] [--warm N]
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CASE = ROOT / "fixtures" / "cases" / "pool_fusion" / "variants.toml"


def once(cache: Path, out: Path, budget: float) -> tuple[float, int, list[str]]:
    env = dict(os.environ, ROOTCAUSE_CACHE=str(cache))
    cmd = [sys.executable, "-m", "rootcause", "analyze", f"{CASE}#on", f"{CASE}#off", "--target", "llvm",
           "--out", str(out), "--budget-s", str(budget)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    wall = time.perf_counter() - t0
    stages = [line for line in proc.stderr.splitlines() if re.match(r"\[analyze\s", line)]
    if proc.returncode != 0:
        print(proc.stderr[-2000:], file=sys.stderr)
    return wall, proc.returncode, stages


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget-s", type=float, default=10.0)
    parser.add_argument("--warm", type=int, default=1, help="warm runs after the cold one (default 1)")
    args = parser.parse_args()
    print(f"host: {os.cpu_count()} logical CPUs, load average {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory(prefix="bench_analyze.") as tmp:
        cache = Path(tmp) / "cache"
        for label in ["cold"] + [f"warm{i + 1}" for i in range(args.warm)]:
            wall, rc, stages = once(cache, Path(tmp) / label, args.budget_s)
            print(f"{label}: {wall:.1f} s wall, exit {rc}, timing budget {args.budget_s:g} s")
            for line in stages:
                print(f"    {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
