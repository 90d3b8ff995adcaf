"""`rootcause analyze SPEC_A SPEC_B`: build, run, attribute, diagnose, confirm and report A against B.

Stages (rootcause.pipeline): build A, B and the hybrids (cached) -> run (the run stage: verify,
interleaved measurement of A, B and the hybrids, CUPTI on a GPU) -> CPU profiles where there is
no GPU -> align, attribute, diagnose -> confirm (each hybrid's share of its unit's profiled
delta, or of the A-B delta for whole-spec hybrids) -> report into --out.

Split across hosts: `analyze A B --bundle-only --target cuda:sm_90 --out OUT` builds here and
writes OUT/plan.json and OUT/bundles/ (one bundle per variant, its manifest named after the
spec); `rootcause run OUT/bundles/* --out RUN` runs on the GPU host and measures each bundle
under that name; `analyze A B --out OUT --from-run RUN` attributes, confirms and reports here.
The analysis of a run directory is the same code whether the run was local or remote, and it
never writes into RUN: a run of llvm bundles records no per-kernel profile, so the CPU profiles
of A and B are taken here into OUT/cpu-profiles/, and the report says so.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from typing import TYPE_CHECKING

from rootcause import argtypes
from rootcause.errors import UsageError
from rootcause.fileio import make_folder, output_lock, safe_name
from rootcause.stats import CONFIRM_THRESHOLD

if TYPE_CHECKING:
    from rootcause.spec import VariantSpec


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("spec_a", metavar="SPEC_A", help="variant A (baseline): file.toml or file.toml#NAME")
    parser.add_argument("spec_b", metavar="SPEC_B", help="variant B (candidate): file.toml or file.toml#NAME")
    parser.add_argument("--out", type=Path, help="output directory (default reports/<a>_vs_<b>/)")
    parser.add_argument("--target", default=None,
                        help="auto (default: the GPU when present, else llvm) | cuda:sm_XX | rocm:gfxNNN | llvm; "
                             "with --bundle-only the default is the specs' own target")
    parser.add_argument("--budget-s", type=argtypes.seconds, default=10.0,
                        help="seconds for the interleaved timing loop of all variants (default 10)")
    parser.add_argument("--bundle-only", action="store_true",
                        help="build A, B and the hybrids into OUT/bundles and stop (run them elsewhere)")
    parser.add_argument("--from-run", type=Path, metavar="DIR",
                        help="analyze a `rootcause run` directory (made here or on another host) against "
                             "OUT/plan.json from an earlier --bundle-only")
    parser.add_argument("--no-confirm", action="store_true", help="skip the counterfactual hybrids")
    parser.add_argument("--hybrids", type=argtypes.count, default=4, help="most hybrids built (default 4)")
    parser.add_argument("--confirm-share", "--threshold", dest="threshold", action=argtypes.Renamed,
                        type=argtypes.share, default=CONFIRM_THRESHOLD, metavar="SHARE",
                        help="recovered share (of the unit's delta, or of the A-B delta) a hybrid's interval "
                             "must exceed to confirm (default 0.5; --threshold: the old name)")
    parser.add_argument("--gpu", "--device", dest="device", action=argtypes.Renamed, metavar="NAME",
                        help="GPU model for diagnose, e.g. H200 (default: from the run's env.json; --device: "
                             "the old name)")
    parser.add_argument("--profile-calls", type=argtypes.calls, default=10, help="graph calls profiled per variant")


# ---- target -----------------------------------------------------------------------------

# ---- the command ------------------------------------------------------------------------

def _argv(args: argparse.Namespace, out: Path, from_run: Path | None) -> list[str]:
    """The `rootcause analyze` command line equivalent to args (as attribution.json records it)."""
    argv = ["rootcause", "analyze", args.spec_a, args.spec_b, "--out", str(out)]
    if from_run is not None:
        argv += ["--from-run", str(from_run)]
    else:
        argv += ["--target", str(args.target or "auto"), "--budget-s", f"{args.budget_s:g}",
                 "--profile-calls", str(args.profile_calls)]
        argv += ["--no-confirm"] if args.no_confirm else ["--hybrids", str(args.hybrids)]
    if args.threshold != CONFIRM_THRESHOLD:
        argv += ["--confirm-share", f"{args.threshold:g}"]
    if args.device:
        argv += ["--gpu", args.device]
    return argv


def run(args: argparse.Namespace) -> int:
    from rootcause import spec as spec_mod  # here: `analyze --help` imports no analysis

    if args.bundle_only and args.from_run:
        raise UsageError("--bundle-only and --from-run: choose one (build here, or analyze a run made elsewhere)")
    spec_a, spec_b = spec_mod.load(args.spec_a), spec_mod.load(args.spec_b)
    if spec_a.name == spec_b.name:
        raise UsageError(f"{args.spec_b}: variant name '{spec_b.name}' is the same as A's; each needs its own name")
    out: Path = args.out or Path("reports") / f"{safe_name(spec_a.name)}_vs_{safe_name(spec_b.name)}"
    if not args.from_run:  # pass and flag names checked before anything is written or built
        from rootcause.build import check_before_build

        target = spec_mod.resolve_target(args.target, spec_a, args.bundle_only)
        spec_a, spec_b = spec_mod.with_target(spec_a, target), spec_mod.with_target(spec_b, target)
        check_before_build([spec_a, spec_b])
    with output_lock(out, "analyze"):
        return _analyze(args, spec_a, spec_b, out)


def _analyze(args: argparse.Namespace, spec_a: VariantSpec, spec_b: VariantSpec, out: Path) -> int:
    from rootcause import pipeline
    from rootcause.artifacts import plan as plans
    from rootcause.report import render_text

    if args.from_run:
        plan = plans.read_plan(out)
        if (plan["a"], plan["b"]) != (spec_a.name, spec_b.name):
            raise UsageError(f"{out / plans.PLAN}: built for {plan['a']} vs {plan['b']}, not "
                             f"{spec_a.name} vs {spec_b.name}")
        run_dir = args.from_run
    else:
        make_folder(out)
        plan = pipeline.build_variants(spec_a, spec_b, out, args.no_confirm, args.hybrids)
        if args.bundle_only:
            bundles = " ".join(str(out / plan["bundles"][n]) for n in plan["bundles"] if n not in plan["failed"])
            print(f"built {len(plan['bundles'])} bundle(s) into {out / 'bundles'} for {spec_a.target}\n"
                  f"next, on the target host:  rootcause run {bundles} --out RUN_DIR --budget-s {args.budget_s:g}\n"
                  f"then here:                 rootcause analyze {args.spec_a} {args.spec_b} --out {out} "
                  f"--from-run RUN_DIR")
            return 0
        run_dir = out / "run"
        pipeline.run_variants(plan, out, run_dir, args.budget_s, args.profile_calls)
    doc = pipeline.analyze_run(plan, out, run_dir, args.threshold, args.device, args.profile_calls,
                               argtypes.command_line(_argv(args, out, run_dir if args.from_run else None)))
    written = pipeline.write_reports(doc, out)
    print(render_text(doc))
    print("\nwrote " + ", ".join(str(p) for p in written))
    pipeline.progress("done")
    return 0
