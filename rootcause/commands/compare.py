"""`rootcause compare PROFILE_A PROFILE_B`: offline attribution of two captured profiles.

A is the baseline, B the candidate (deltas are B - A). Catalogs (bundle directories or their
manifest.json) give provenance-based units and static facts; without them the output says
what cannot be concluded. --measurement FILE|RUN_DIR gives the whole-graph latency per variant
(artifacts.rundir.load_measurement), found by label (--label-a/-b, default the bundle names,
which are the names `rootcause run` measured them under). Graph calls: as
rootcause.profilers.selection cuts them (the run's recorded count, --calls N, or detected).

Writes DIR/attribution.json, report.html and report.md (rootcause.pipeline.write_reports)
and prints the summary (rootcause.report.render_text). The device is --gpu, else the GPU
named in env.json beside the profiles.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from rootcause import argtypes
from rootcause.errors import UsageError
from rootcause.fileio import output_root, refuse_overwriting


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("profile_a", metavar="PROFILE_A", help="baseline profile (CUPTI JSON, ncu CSV, ...)")
    parser.add_argument("profile_b", metavar="PROFILE_B", help="candidate profile")
    parser.add_argument("--catalog-a", metavar="BUNDLE", help="bundle directory (or manifest.json) of A")
    parser.add_argument("--catalog-b", metavar="BUNDLE", help="bundle directory (or manifest.json) of B")
    parser.add_argument("--measurement", metavar="FILE", help="whole-graph latency of both variants (JSON)")
    parser.add_argument("--label-a", default=None, help="name of A in the summary (default: bundle name or A)")
    parser.add_argument("--label-b", default=None, help="name of B in the summary")
    parser.add_argument("--entry-a", default=None, help="entry function profiled in A (default: manifest entry)")
    parser.add_argument("--entry-b", default=None, help="entry function profiled in B")
    parser.add_argument("--gpu", "--device", dest="device", action=argtypes.Renamed, default=None, metavar="NAME",
                        help="GPU model the profiles were captured on (e.g. H200): waves, occupancy, peak bandwidth "
                             "(--device: the old name)")
    parser.add_argument("--device-id", type=argtypes.number(0, 4096, integer=True), default=None, metavar="N",
                        help="the GPU to compare in captures that hold several (default: refuse to merge them)")
    parser.add_argument("--calls", type=argtypes.calls, default=None, metavar="N",
                        help="graph calls in each profile (default: as `rootcause run` recorded, else detected)")
    parser.add_argument("--iterations", default=None, metavar="NAME",
                        help="the annotation that marks each iteration in both traces (a record_function name, "
                             "or its stem without the instance number); default: ProfilerStep, else what the "
                             "traces mark (repeated annotations, graph launches, data-loader fetches, optimizer steps)")
    parser.add_argument("--title", default=None, help="title of report.html and report.md")
    parser.add_argument("--out", required=True, metavar="DIR",
                        help="directory for attribution.json, report.html and report.md")


def _argv(args: argparse.Namespace) -> list[str]:
    """The `rootcause compare` command line equivalent to args."""
    argv = ["rootcause", "compare", args.profile_a, args.profile_b]
    flags = {"device": "--gpu"}  # the flag a renamed option is written with now
    for name in ("catalog_a", "catalog_b", "measurement", "label_a", "label_b", "entry_a", "entry_b",
                 "device", "device_id", "calls", "iterations", "title", "out"):
        value = getattr(args, name, None)
        if value is not None:
            argv += [flags.get(name, f"--{name.replace('_', '-')}"), str(value)]
    return argv


def run(args: argparse.Namespace) -> int:
    # imported here: `compare --help` pays for argparse alone
    from rootcause import pipeline
    from rootcause.artifacts import attribution, bundle, rundir
    from rootcause.profilers.selection import read_profile
    from rootcause.report import render_text

    inputs = [p for p in (args.profile_a, args.profile_b, args.catalog_a, args.catalog_b, args.measurement) if p]
    refuse_overwriting([Path(args.out) / name for name in attribution.REPORT_FILES], inputs)
    catalog_a, manifest_a = bundle.load_catalog(args.catalog_a)
    catalog_b, manifest_b = bundle.load_catalog(args.catalog_b)
    # a side is named by its catalog, else by its file; a --measurement names its variants A and B
    named = (lambda path, side: side) if args.measurement else _trace_label
    labels = (args.label_a or manifest_a.get("name") or named(args.profile_a, "A"),
              args.label_b or manifest_b.get("name") or named(args.profile_b, "B"))
    if labels[0] == labels[1]:
        labels = (f"{labels[0]} (A)", f"{labels[1]} (B)")
    if args.iterations and args.calls:
        raise UsageError("--iterations and --calls: give one (the iterations the traces mark, or a count)")
    notes: list[str] = []
    prof_a = read_profile(args.profile_a, args.calls, notes, labels[0], args.device_id, args.iterations)
    prof_b = read_profile(args.profile_b, args.calls, notes, labels[1], args.device_id, args.iterations)
    whole_a, whole_b, measured, pair = rundir.load_measurement(args.measurement, labels)
    if whole_a is None and prof_a.whole is not None and prof_b.whole is not None:
        whole_a, whole_b = prof_a.whole, prof_b.whole  # the traces' own steps, host included
    environment = rundir.run_environment(args.profile_a, args.profile_b)
    a = pipeline.Side(labels[0], args.profile_a, prof_a.events, catalog_a, args.catalog_a,
                      args.entry_a or manifest_a.get("entry"), whole_a, steps=prof_a.step_spans, host=prof_a.host)
    b = pipeline.Side(labels[1], args.profile_b, prof_b.events, catalog_b, args.catalog_b,
                      args.entry_b or manifest_b.get("entry"), whole_b, steps=prof_b.step_spans, host=prof_b.host)
    device_a, device_b = _devices(args.device, environment, prof_a, prof_b)
    ctx = pipeline.Context(device_a, environment, measured, argtypes.command_line(_argv(args)), notes,
                           device_b=device_b, measured_pair=pair)
    doc = pipeline.attribute_pair(a, b, ctx)
    with output_root(args.out):
        written = pipeline.write_reports(doc, Path(args.out), args.title)
    print(render_text(doc))
    print("\nwrote " + ", ".join(map(str, written)))
    return 0


_TRACE_SUFFIXES = (".gz", ".zst", ".lz4", ".json", ".jsonl", ".trace", ".pt", ".csv", ".sqlite", ".nsys-rep")


def _trace_label(path: str, fallback: str) -> str:
    """A side named by its file ('resnet_w4' of resnet_w4.pt.trace.json.gz, with '#N' for a
    segment), as a user tells the two traces apart; fallback where nothing is left."""
    base, hash_, segment = path.rpartition("#") if "#" in path and not Path(path).is_file() else (path, "", "")
    name = Path(base).name
    while True:
        stripped = next((name[:-len(s)] for s in _TRACE_SUFFIXES if name.lower().endswith(s) and len(name) > len(s)),
                        None)
        if stripped is None:
            break
        name = stripped
    return (name + (hash_ + segment if segment else "")) or fallback


def _devices(given: str | None, environment: dict | None, prof_a, prof_b) -> tuple[str | None, str | None]:
    """Each side's GPU: --gpu (or the run's env.json) for both; else each trace's own
    (deviceProperties), a side naming none taking the other's. A side naming a GPU rootcause
    does not know gets none: another GPU's numbers would be wrong for it."""
    from rootcause import gpus

    both = gpus.resolve_device(given, environment)
    if both:
        return both, both
    a, b = (gpus.find_device(*p.devices.values()) if p.devices else None for p in (prof_a, prof_b))
    return (a if prof_a.devices else b), (b if prof_b.devices else a)

