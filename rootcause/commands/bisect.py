"""`rootcause bisect SPEC --good V1 --bad V2`: the first compiler release (or wheel, or
environment) that shows the change between a good and a bad toolchain, then `analyze` of the
last good against the first bad (rootcause.bisect holds the search). With --ray the builds
run side by side as Ray tasks (docs/SWEEP.md); the measurements stay here.

Writes OUT/bisect.json (every candidate's verdict and ratio), OUT/bundles/, OUT/runs/ and, from
the analysis, OUT/analyze/ (attribution.json and the reports). Exit status 0 when a first bad
version is found and analyzed, 2 on bad input (including a good/bad pair that does not differ),
and 2 or 3 when the bisection finished but its analyze could not (bisect.json stands; the line
says why).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from rootcause import argtypes, envs, executors, localcluster
from rootcause.errors import EXIT_BAD_INPUT, EXIT_TOOL_FAILED, ToolFailed, UsageError
from rootcause.fileio import make_folder, output_root, safe_name


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("spec", metavar="SPEC", help="the variant to bisect: file.toml or file.toml#NAME")
    parser.add_argument("--good", help="a release of the spec's compiler that is good (e.g. 3.3.0)")
    parser.add_argument("--bad", help="a release that is bad; the registry's releases between are bisected")
    parser.add_argument("--versions", help="instead of --good/--bad: an ordered, comma-separated list, good first, "
                                           "bad last: versions, PKG==VERSION, wheel files or environments' pythons")
    parser.add_argument("--by", choices=("time", "catalog"), default="time",
                        help="time: judge each version by its measured ratio to the good one (default); catalog: "
                             "by whether its kernel formation differs from the good one's (no timing)")
    parser.add_argument("--min-change", "--threshold", dest="threshold", action=argtypes.Renamed,
                        type=argtypes.relative, default=0.05, metavar="FRACTION",
                        help="relative change (of the good version's time) a version must show to be bad "
                             "(default 0.05; --threshold: the old name)")
    parser.add_argument("--budget-s", type=argtypes.seconds, default=4.0,
                        help="seconds of interleaved timing per comparison (default 4)")
    parser.add_argument("--target", default=None, help="auto (default) | llvm | cuda:sm_XX | rocm:gfxNNN")
    parser.add_argument("--out", type=Path, help="output directory (default reports/bisect-<name>/)")
    parser.add_argument("--no-analyze", action="store_true", help="stop after finding the first bad version")
    parser.add_argument("--profile-calls", type=argtypes.calls, default=10, help="graph calls profiled per variant (analyze)")
    parser.add_argument("--ray", metavar="ADDRESS",
                        help="build the versions side by side as Ray tasks (good, bad and the next probes of both "
                             "halves ahead of each measurement): local, auto or a cluster address, as for sweep; "
                             "measurements stay here")
    parser.add_argument("--num-cpus", type=argtypes.number(1, 65536, integer=True), help="with --ray local: CPUs the cluster offers (default all)")
    parser.add_argument("--max-in-flight", type=argtypes.number(1, 10**6, integer=True), default=executors.MAX_IN_FLIGHT,
                        help="with --ray: builds on the cluster at once (default %(default)s)")
    parser.add_argument("--max-retries", type=argtypes.count, default=3,
                        help="with --ray: times a build whose worker died is run again (default 3)")


def run(args: argparse.Namespace) -> int:
    # imported here: `bisect --help` pays for argparse alone
    from rootcause import bisect, spec as spec_mod

    if args.budget_s <= 0:
        raise UsageError(f"--budget-s: must be > 0, got {args.budget_s:g}")
    if bool(args.versions) == bool(args.good or args.bad):
        raise UsageError("give --good V1 --bad V2, or --versions a,b,c (not both)")
    if not args.versions and not (args.good and args.bad):
        raise UsageError("--good and --bad: both are needed")
    spec = spec_mod.load(args.spec)
    spec = spec_mod.with_target(spec, spec_mod.resolve_target(args.target, spec, False))
    if args.versions:
        candidates = bisect.listed_candidates(spec, [v.strip() for v in args.versions.split(",") if v.strip()])
    else:
        candidates = bisect.registry_candidates(spec, args.good, args.bad)
    out: Path = args.out or Path("reports") / f"bisect-{safe_name(spec.name)}"
    if args.ray == "local" and not localcluster.inside():
        return localcluster.run_private(args._argv, envs.outside_calls())
    with output_root(out):
        return _bisect(args, spec, candidates, out)


def _bisect(args: argparse.Namespace, spec: Any, candidates: Any, out: Path) -> int:
    from rootcause import bisect
    from rootcause.artifacts import bisect as bisect_files
    from rootcause.report import render_text

    make_folder(out)
    parallel = None
    if args.ray:
        executors.init_ray(args.ray, args.num_cpus)
        parallel = {"max_in_flight": args.max_in_flight, "max_retries": args.max_retries}
    search = bisect.Bisection(spec, candidates, out, args.budget_s, args.threshold, args.by, parallel)
    result = search.run()
    saved = bisect_files.write_result(out, result)
    between = f" (skipped, could be any: {', '.join(result['skipped_between'])})" if result["skipped_between"] else ""
    if result["first_bad"] is None:  # the timing could not tell: no version is named, nothing analyzed
        print(f"first bad version: undecided: {result['undecided']}'s interval straddles the {result['threshold']:.0%} "
              f"threshold however long it was timed; the first bad version is {result['undecided']} or a later one "
              f"up to {result['bad_by']} (last good: {result['last_good']}{between}); raise --budget-s or --min-change, "
              f"or bisect --by catalog; details in {saved}")
        return 0
    print(f"first bad version: {result['first_bad']} (last good: {result['last_good']}{between}); "
          f"the change: {_change(result)}; details in {saved}")
    if args.no_analyze or result["direction"] == "outputs":
        return 0
    bisect.progress(f"analyze {result['last_good']} against {result['first_bad']}")
    spec_a, spec_b = search.specs(result)
    try:
        doc = _analyze(spec_a, spec_b, out / "analyze", args)
    except (UsageError, ToolFailed) as err:
        # the bisection stands (bisect.json), but the command did not do all it was asked: not 0
        print(f"rootcause bisect: analyze of {result['last_good']} against {result['first_bad']} could not finish: "
              f"{err} (the bisection itself is in {saved}; --no-analyze skips this step)",
              file=sys.stderr)
        return EXIT_TOOL_FAILED if isinstance(err, ToolFailed) else EXIT_BAD_INPUT
    print(render_text(doc))
    return 0


def _change(result: dict) -> str:
    bad = next(c for c in result["candidates"] if c["label"] == result["first_bad"])
    good = next(c for c in result["candidates"] if c["label"] == result["last_good"])
    if result["direction"] == "catalog":
        return f"kernel formation {good['note']} -> {bad['note']}"
    if bad["ratio"] and "median" in bad["ratio"]:
        r = bad["ratio"]
        return f"{result['direction']}, {r['median']:.2f}x [{r['low']:.2f}, {r['high']:.2f}] of the good version's time"
    return result["direction"]


def _analyze(spec_a, spec_b, out: Path, args: argparse.Namespace) -> dict:
    from rootcause import pipeline

    make_folder(out)
    plan = pipeline.build_variants(spec_a, spec_b, out, False, 4)
    pipeline.run_variants(plan, out, out / "run", args.budget_s, args.profile_calls)
    argv = ["rootcause", "bisect", args.spec] + (["--versions", args.versions] if args.versions else
                                                 ["--good", args.good, "--bad", args.bad])
    doc = pipeline.analyze_run(plan, out, out / "run", 0.5, None, args.profile_calls, argtypes.command_line(argv))
    pipeline.write_reports(doc, out)
    return doc
