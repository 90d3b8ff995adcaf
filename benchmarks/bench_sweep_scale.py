"""What Ray costs a sweep at 100 pairs: sequential, local Ray with one CPU (the tasks one at a
time, so the difference is Ray's own cost), local Ray with every CPU, and a multi-node cluster
made with Ray's cluster utilities on this host (a head that runs no task, worker nodes of one
CPU each, their own object stores).

The pairs are small and real: the npgraph plug-in frontend of the tests (tests/plugins, NumPy
stages unfused against fused, each pair of its own input shape), llvm, no hybrids, a short
timing budget: about 5 s of work a pair here, so Ray's cost per pair is the most visible it
gets. Every sweep is a fresh `rootcause sweep` process with a cold build cache of its own.

Printed: wall time, wall per pair, Ray's cost per pair against sequential (one-CPU Ray minus
sequential, over the pairs, start and stop of the cluster included), and the object store's
peak use, read from the raylets' own periodic reports ("Object store current usage" in
session_latest/logs/raylet*.out; sampled every few seconds, so a lower bound).

    python benchmarks/bench_sweep_scale.py [--pairs 100] [--budget-s 0.2] [--nodes 2] [--only seq,ray1,ray,cluster]
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
sys.path.insert(0, str(ROOT / "tests"))
from plugin_site import PLUGINS, install, write_case  # noqa: E402

RAY_LOGS = Path(tempfile.gettempdir()) / "ray" / "session_latest" / "logs"
_USAGE = re.compile(r"Object store current usage ([0-9.e+-]+) / ([0-9.e+-]+) GB")


def _sweep_file(root: Path, pairs: int, budget_s: float) -> Path:
    for k in range(pairs):
        write_case(root / f"c{k:03d}", shape=(64 + 8 * k, 256), seed=k)
    text = f'[sweep]\nname = "scale"\ntarget = "llvm"\nbudget_s = {budget_s}\nhybrids = 0\nprofile_calls = 3\n'
    text += "".join(f'\n[[pair]]\na = "c{k:03d}/variants.toml#unfused"\nb = "c{k:03d}/variants.toml#fused"\n'
                    for k in range(pairs))
    (root / "sweep.toml").write_text(text)
    return root / "sweep.toml"


def _peak_store_mb() -> float | None:
    peaks = [float(m.group(1)) * 1024 for path in RAY_LOGS.glob("raylet*.out")
             for m in _USAGE.finditer(path.read_text(errors="replace"))]
    return max(peaks) if peaks else None


def _run(cmd: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[2:5])} failed: {proc.stdout[-2000:]}")
    return wall


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=100)
    ap.add_argument("--budget-s", type=float, default=0.2)
    ap.add_argument("--nodes", type=int, default=2, help="worker nodes of the multi-node cluster")
    ap.add_argument("--only", default="seq,ray1,ray,cluster")
    args = ap.parse_args(argv)
    ways = args.only.split(",")
    results: dict[str, tuple[float, float | None]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-sweep-") as tmp:
        root = Path(tmp)
        site = install(root / "site")
        sweep = _sweep_file(root / "case", args.pairs, args.budget_s)
        base = dict(os.environ, PYTHONPATH=os.pathsep.join([str(PLUGINS), str(site), str(ROOT)]))
        py = [sys.executable, "-m", "rootcause", "sweep", str(sweep)]
        runs = {"seq": ("sequential", []), "ray1": ("--ray local --num-cpus 1", ["--ray", "local", "--num-cpus", "1"]),
                "ray": (f"--ray local --num-cpus {os.cpu_count()}", ["--ray", "local", "--num-cpus", str(os.cpu_count())])}
        for way in [w for w in ways if w in runs]:
            name, flags = runs[way]
            env = dict(base, ROOTCAUSE_CACHE=str(root / f"cache-{way}"))
            wall = _run([*py, "--out", str(root / way), *flags], env)
            results[name] = (wall, _peak_store_mb() if flags else None)
            print(f"{name}: {wall:.1f} s", flush=True)
        if "cluster" in ways:
            from ray.cluster_utils import Cluster

            os.environ.update(PYTHONPATH=base["PYTHONPATH"])
            cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
            for n in range(args.nodes):
                os.environ["ROOTCAUSE_CACHE"] = str(root / f"cache-node{n}")
                cluster.add_node(num_cpus=1)
            cluster.wait_for_nodes()
            name = f"--ray ADDRESS, {args.nodes} worker nodes of 1 CPU"
            try:
                wall = _run([*py, "--out", str(root / "cluster"), "--ray", cluster.address],
                            dict(base, ROOTCAUSE_CACHE=str(root / "cache-driver")))
                results[name] = (wall, _peak_store_mb())
            finally:
                cluster.shutdown()
            print(f"{name}: {wall:.1f} s", flush=True)
    n = args.pairs
    print(f"\n{n} npgraph llvm pairs, budget {args.budget_s:g} s, cold build caches, {os.cpu_count()} CPUs here")
    print(f"{'way':44} {'wall s':>8} {'s/pair':>8} {'store peak MB':>14}")
    for name, (wall, peak) in results.items():
        print(f"{name:44} {wall:8.1f} {wall / n:8.2f} {('%.1f' % peak) if peak is not None else '-':>14}")
    seq, one = results.get("sequential"), results.get("--ray local --num-cpus 1")
    if seq and one:
        cost = (one[0] - seq[0]) / n
        print(f"Ray's cost a pair (one-CPU Ray - sequential): {cost:+.2f} s = {100 * cost / (seq[0] / n):+.1f}% "
              f"of a pair's own {seq[0] / n:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
