"""`rootcause run BUNDLE... --out DIR`: verify, measure and profile bundles on this host
(rootcause.runner: runtimes only, no compiler is imported)."""
from __future__ import annotations

import argparse
from pathlib import Path

from parsers.ncu_csv import NCU_METRICS
from rootcause import argtypes


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("bundles", nargs="+", metavar="BUNDLE", help="bundle directories (rootcause build)")
    parser.add_argument("--out", required=True, type=Path, help="directory for the results")
    parser.add_argument("--profile", choices=("cupti", "ncu", "none"), default="cupti",
                        help="profiler for per-kernel records (default cupti; ncu is opt-in, slow)")
    parser.add_argument("--budget-s", type=argtypes.seconds, default=20.0, help="seconds for the timing loop (all variants)")
    parser.add_argument("--processes", type=argtypes.processes, default=1,
                        help="measure in N fresh child processes one after another, each with 1/N of the "
                             "budget, and pool them (default 1: in this process)")
    parser.add_argument("--warmup-calls", type=argtypes.count, default=None,
                        help="warm-up samples per variant (default: the protocol's; lower it for calls of seconds)")
    parser.add_argument("--warmup-s", type=argtypes.number(0, argtypes.DAY), default=None, help="timed warm-up seconds per variant")
    parser.add_argument("--rtol", type=argtypes.tolerance, help="variant-vs-variant rtol (default: the manifests')")
    parser.add_argument("--atol", type=argtypes.tolerance, help="variant-vs-variant atol (default: the manifests')")
    parser.add_argument("--device", help="cuda | rocm | cpu (default: from each bundle's target)")
    parser.add_argument("--profile-calls", type=argtypes.calls, default=5, help="graph calls recorded per profile")
    parser.add_argument("--ncu-metrics", default=NCU_METRICS, help="comma-separated ncu metrics")
    parser.add_argument("--ncu", default="ncu", help="ncu executable")


def run(args: argparse.Namespace) -> int:
    from rootcause.fileio import output_root
    from rootcause.runner import RunRequest, run_bundles  # here: `run --help` imports no runtime

    with output_root(args.out):
        return _run(args, RunRequest, run_bundles)


def _run(args: argparse.Namespace, RunRequest, run_bundles) -> int:
    result = run_bundles(RunRequest(
        [Path(b) for b in args.bundles], args.out, profile=args.profile, budget_s=args.budget_s,
        processes=args.processes, warmup_calls=args.warmup_calls, warmup_s=args.warmup_s, rtol=args.rtol,
        atol=args.atol, device=args.device, profile_calls=args.profile_calls, ncu_metrics=args.ncu_metrics,
        ncu=args.ncu))
    procs = result["measurement"].get("processes")
    for name, v in result["measurement"]["variants"].items():
        spread = ""
        if procs:
            meds = [p["variants"][name]["median_s"] * 1e6 for p in procs]
            spread = f" in {len(procs)} processes (per-process medians {min(meds):.2f}-{max(meds):.2f} us)"
        print(f"{name}: median {v['median_s'] * 1e6:.2f} us over {len(v['samples_s'])} samples{spread}")
    return 0
