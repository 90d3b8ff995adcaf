"""How long `rootcause sweep` takes to read and check a sweep file of many pairs, as a user runs it.

Every spec a sweep names is loaded and checked before anything runs, so a file whose last pair
names a variant that does not exist makes the installed command read all the others and stop with
exit status 2 before building anything: its whole-process wall time is the load of the file. The
pairs name the pool_fusion case's two variants, each pair under its own name.

Goal: 10,000 pairs in under 10 s (the load grows linearly: a spec named by many pairs is read and
hashed once).

    python benchmarks/bench_sweep_load.py [--pairs 1000,10000]
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ROOTCAUSE = str(Path(sys.executable).parent / "rootcause")


def sweep_file(folder: Path, pairs: int) -> Path:
    shutil.copytree(ROOT / "fixtures" / "cases" / "pool_fusion", folder / "pool_fusion", dirs_exist_ok=True)
    rows = ['[sweep]\ntarget = "llvm"\n']
    rows += [f'[[pair]]\nname = "p{i}"\na = "pool_fusion/variants.toml#on"\nb = "pool_fusion/variants.toml#off"\n'
             for i in range(pairs)]
    rows.append('[[pair]]\nname = "last"\na = "pool_fusion/variants.toml#on"\nb = "pool_fusion/variants.toml#nosuch"\n')
    path = folder / f"sweep-{pairs}.toml"
    path.write_text("".join(rows))
    return path


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", default="1000,10000")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for n in (int(x) for x in args.pairs.split(",")):
            path = sweep_file(Path(tmp), n)
            start = time.perf_counter()
            proc = subprocess.run([ROOTCAUSE, "sweep", str(path), "--out", str(Path(tmp) / f"out-{n}")],
                                  capture_output=True, text=True)
            wall = time.perf_counter() - start
            ok = proc.returncode == 2 and "nosuch" in proc.stderr
            print(f"{n + 1:>6} pairs: {wall:6.2f} s wall, {wall / (n + 1) * 1e3:.3f} ms a pair "
                  f"({'read all, refused the last' if ok else 'UNEXPECTED: ' + proc.stderr.strip()[-200:]})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
