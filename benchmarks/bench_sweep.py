"""The sweep's overhead per pair against running the same pairs by hand.

Runs N llvm pairs of pool_fusion (no hybrids, a short timing budget) three ways, each in a
fresh process, with warm build caches (one untimed sweep first fills them):
- by hand: one `rootcause analyze A B` process per pair, one after another;
- `rootcause sweep` sequential (one process, the pairs one after another);
- `rootcause sweep --ray local --num-cpus C` (a one-node Ray cluster started by the command).
Prints wall time and CPU time (user + system of the process and the descendants it waited
for: Ray's workers are reaped by its raylet, so their CPU is in the Ray row only as far as
the raylet's exit accounts for it) and the difference per pair against by hand.

    python benchmarks/bench_sweep.py [--pairs 3] [--budget-s 0.5] [--num-cpus 2] [--no-ray]
"""
from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CASE = ROOT / "fixtures" / "cases" / "pool_fusion" / "variants.toml"
PAIRS = [("on", "off"), ("on", "partial"), ("off", "partial")]


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _timed(cmds: list[list[str]]) -> tuple[float, float]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    t, c = time.perf_counter(), _cpu()
    for cmd in cmds:
        subprocess.run(cmd, check=True, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t, _cpu() - c


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=3, help=f"pairs (at most {len(PAIRS)})")
    ap.add_argument("--budget-s", type=float, default=0.5)
    ap.add_argument("--num-cpus", type=int, default=2)
    ap.add_argument("--no-ray", action="store_true")
    args = ap.parse_args(argv)
    pairs = PAIRS[: args.pairs]
    py = sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        sweep = tmp / "sweep.toml"
        lines = ["[sweep]", 'target = "llvm"', f"budget_s = {args.budget_s}", "hybrids = 0", "profile_calls = 3",
                 "allow_outside_paths = true", ""]
        for a, b in pairs:
            lines += ["[[pair]]", f'a = "{CASE}#{a}"', f'b = "{CASE}#{b}"', ""]
        sweep.write_text("\n".join(lines))
        _timed([[py, "-m", "rootcause", "sweep", str(sweep), "--out", str(tmp / "warm")]])  # fills the build cache
        rows = [("by hand (analyze per pair)", _timed(
            [[py, "-m", "rootcause", "analyze", f"{CASE}#{a}", f"{CASE}#{b}", "--target", "llvm", "--no-confirm",
              "--budget-s", f"{args.budget_s:g}", "--profile-calls", "3", "--out", str(tmp / f"hand-{a}-{b}")]
             for a, b in pairs]))]
        rows.append(("sweep, sequential", _timed([[py, "-m", "rootcause", "sweep", str(sweep), "--out",
                                                   str(tmp / "seq")]])))
        rows.append(("sweep, resumed (all done)", _timed(
            [[py, "-m", "rootcause", "sweep", str(sweep), "--out", str(tmp / "seq")]])))
        if not args.no_ray:
            rows.append((f"sweep, --ray local ({args.num_cpus} CPUs)", _timed(
                [[py, "-m", "rootcause", "sweep", str(sweep), "--out", str(tmp / "ray"), "--ray", "local",
                  "--num-cpus", str(args.num_cpus)]])))
    n = len(pairs)
    hand_wall, hand_cpu = rows[0][1]
    print(f"{n} llvm pairs of pool_fusion, timing budget {args.budget_s:g} s a pair, warm build cache, "
          f"{os.cpu_count()} CPUs here")
    print(f"{'':34} {'wall s':>8} {'CPU s':>8} {'wall/pair':>10} {'vs hand/pair':>13}")
    for name, (wall, cpu) in rows:
        print(f"{name:34} {wall:8.1f} {cpu:8.1f} {wall / n:10.2f} {(wall - hand_wall) / n:+13.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
