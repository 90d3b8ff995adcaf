"""`rootcause sweep SWEEP.toml`: many `analyze` pairs from one file, here or on a Ray cluster.

The sweep file: rootcause/sweepfile.py; its stages: rootcause/sweep.py. Without --ray the pairs
run here, one after another; `--ray local` starts a one-node Ray cluster on this host (its CPUs,
its GPUs, and one unit of the resource named after this host's GPU target per GPU), `--ray auto`
joins the cluster `ray start` made on this host, `--ray ADDRESS` joins another. OUT holds
sweep.json, sweep.md, sweep.html and pairs/<id>/ (each the layout of `analyze --out`); running
the same command again resumes from what finished."""
from __future__ import annotations

import argparse
import time
from pathlib import Path

from typing import TYPE_CHECKING

from rootcause import argtypes, envs, executors, localcluster
from rootcause.artifacts.sweep import STAGES
from rootcause.errors import UsageError
from rootcause.fileio import output_lock, safe_name

if TYPE_CHECKING:
    from rootcause.sweepfile import Sweep


SUMMARY_EVERY_S = 5.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("sweep_file", metavar="SWEEP", help="the sweep file (TOML: [[pair]] tables or a [matrix])")
    parser.add_argument("--out", type=Path, help="output directory (default reports/sweep-<name>/)")
    parser.add_argument("--ray", metavar="ADDRESS",
                        help="run the stages as Ray tasks: local (start a one-node cluster here), auto (the "
                             "cluster `ray start` made on this host) or a cluster address (ray://HOST:10001, HOST:6379)")
    parser.add_argument("--shared", type=Path, metavar="DIR",
                        help="with --ray: a folder every node mounts at the same path; the stages read and write "
                             "the pair folders there instead of passing them through Ray's object store")
    parser.add_argument("--until", choices=STAGES, default="attribute",
                        help="stop every pair after this stage (build: bundles to run elsewhere; default attribute)")
    parser.add_argument("--retry-failed", action="store_true", help="run failed pairs again (default: keep their rows)")
    parser.add_argument("--max-retries", type=argtypes.count, default=3,
                        help="with --ray: times a task whose worker died is run again (default 3)")
    parser.add_argument("--num-cpus", type=argtypes.number(1, 65536, integer=True), help="with --ray local: CPUs the cluster offers (default all)")
    parser.add_argument("--max-in-flight", type=argtypes.number(1, 10**6, integer=True), default=executors.MAX_IN_FLIGHT,
                        help="with --ray: pairs with tasks on the cluster at once; the next is submitted when one "
                             f"finishes (bounds the object store's pinned bundles; default {executors.MAX_IN_FLIGHT})")


def run(args: argparse.Namespace) -> int:
    from rootcause import spec as spec_mod, sweep as sweeps  # here: `sweep --help` imports no pipeline

    if args.shared and not args.ray:
        raise UsageError("--shared: only with --ray (without Ray every stage runs here, in OUT)")
    sweep = sweeps.load(args.sweep_file, lambda target, spec: spec_mod.resolve_target(target, spec, False))
    out: Path = args.out or Path("reports") / f"sweep-{safe_name(sweep.name)}"
    if args.ray == "local" and not localcluster.inside():
        return localcluster.run_private(args._argv, envs.outside_calls())
    with output_lock(out, "sweep"):
        return _sweep(args, sweep, out)


def _sweep(args: argparse.Namespace, sweep: Sweep, out: Path) -> int:
    from rootcause import pipeline, sweep as sweeps

    pairs_root = (args.shared or out) / "pairs"
    executor = f"ray {args.ray}" if args.ray else "sequential"
    rows: list = [None] * len(sweep.pairs)
    last = [0.0]

    def on_row(i: int, row: dict) -> None:
        """The sweep's files follow the pairs as they finish, rewritten at most every 5 s (a
        rewrite per pair would cost a 1,000-pair sweep a million rows rendered)."""
        rows[i] = row
        if time.monotonic() - last[0] >= SUMMARY_EVERY_S:
            sweeps.write_summary(sweep, out, pairs_root, rows, executor)
            last[0] = time.monotonic()

    pipeline.progress(f"sweep {sweep.name}: {len(sweep.pairs)} pairs, {executor}, into {out}")
    if args.ray:
        executors.init_ray(args.ray, args.num_cpus)
        rows[:] = sweeps.run_on_ray(sweep, out, args.shared, args.until, args.retry_failed, args.max_retries, on_row,
                                   args.max_in_flight)
    else:
        rows[:] = sweeps.run_sequential(sweep, out, args.until, args.retry_failed, on_row)
    written = sweeps.write_summary(sweep, out, pairs_root, rows, executor)
    for row in rows:
        if row is None:
            continue
        state = row.get("verdict") if row.get("status") == "ok" else f"FAILED {row.get('error')}"
        print(f"{row['id']}: {state}")
    print("wrote " + ", ".join(str(p) for p in written))
    return 0


