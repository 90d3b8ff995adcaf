"""The analysis core that `compare` and `analyze` both run, and analyze's build and run steps.

attribute_pair: profiles (+ catalogs, + measured whole-graph latency) of A and B -> align ->
attribute -> diagnose -> one attribution document (artifacts.attribution, schema 2).
For analyze: build_variants (A, B and the hybrids into OUT/bundles, OUT/plan.json),
run_variants (the run stage through a RunRequest, plus CPU profiles where there is no GPU),
analyze_run (attribute_pair on a run directory, then confirmation of the hybrids).
write_reports writes attribution.json, report.html and report.md into one folder.
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import re
import shutil
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from rootcause import frontends, sessions
from rootcause.analysis import confirm
from rootcause.analysis.align import align
from rootcause.analysis.attribute import attribute, profiled_call_ns
from rootcause.analysis.diagnose import diagnose
from rootcause.analysis.host import host_units
from rootcause.analysis.result import Attribution
from rootcause.analysis.verdict import (carry_measured_interval, require_clear_of_floor, require_floor,
                                        require_repeat, withdraw)
from rootcause.artifacts import attribution, rundir
from rootcause.artifacts import bundle as bundles
from rootcause.artifacts import cpu_profiles as cpu
from rootcause.artifacts import plan as plans
from rootcause.errors import OutputsDiffer, ToolFailed, UsageError
from rootcause.exporters import collapse, pattern
from rootcause.fileio import check_replaceable, make_folder, mark_owned, safe_name, write_set
from rootcause.model import CatalogKernel, Hybrid, MeasuredPair, WholeGraph
from rootcause.profilers.selection import profile_events
from rootcause.spec import VariantSpec
from rootcause.stats import CPU_MIN_EFFECT_SHARE, MIN_EFFECT_SHARE, whole_graph_share

_T0 = time.monotonic()


def progress(message: str) -> None:
    print(f"[analyze {time.monotonic() - _T0:6.1f}s] {message}", file=sys.stderr, flush=True)


# ---- the core ------------------------------------------------------------------------------

@dataclass
class Side:
    """One variant as the analysis sees it."""

    label: str
    profile: str  # the capture file (or FILE#N segment) its events came from
    events: pd.DataFrame
    catalog: list[CatalogKernel] | None = None
    catalog_path: str | None = None  # bundle directory or manifest.json
    entry: str | None = None
    whole: WholeGraph | None = None  # measured whole-graph latency, when there is one
    profiled_apart: bool = False  # a CPU profile taken after the measurement, not beside it
    timed_apart_ns: float | None = None  # median call of that profile session (timed_how: how it was timed)
    timed_how: str = "timed without the profiler"
    steps: pd.DataFrame | None = None  # the trace's own steps, when it has them (host units need them)
    host: pd.DataFrame | None = None  # the trace's host spans (parsers.chrome_trace.HOST_COLUMNS)


@dataclass
class Context:
    """What the attribution records beside the analysis itself."""

    device: str | None = None  # a rootcause.gpus.DEVICES key: A's GPU, and B's unless device_b is given
    environment: dict[str, Any] | None = None  # env.json of the run
    measurement: dict[str, Any] | None = None  # rundir.measurement_meta
    command: str | None = None
    notes: list[str] = field(default_factory=list)
    device_b: str | None = None  # B's GPU where it is not A's (traces of two machines)
    cpu: bool = False  # the plan's target is the CPU (llvm)
    measured_pair: MeasuredPair | None = None  # A and B timed side by side: the delta's own interval


def attribute_pair(a: Side, b: Side, ctx: Context) -> dict[str, Any]:
    """The attribution document of A (baseline) against B (candidate)."""
    return _attribute_pair(a, b, ctx)[0]


def _attribute_pair(a: Side, b: Side, ctx: Context, repeat: tuple[Side, Side] | None = None,
                    apart: tuple[dict[str, list[float]], str] | None = None
                    ) -> tuple[dict[str, Any], dict[int, dict[str, Any]]]:
    """(attribution document, each unit's ns per profiled call of A and B: Attribution.unit_calls_ns).
    repeat: a second pair of profiles of A and B, taken apart from the first (cpu_profiles); a unit
    is significant only when it is in both. apart: where A and B were timed in two processes on the
    CPU, each side's measured seconds per call and which processes (verdict.require_floor)."""
    alignment = align(a.events, b.events, a.catalog, b.catalog, a.entry, b.entry)
    att = _attribute(a, b, alignment, ctx)
    if a.profiled_apart or b.profiled_apart:
        att.notes.append(f"on the CPU the whole-graph delta is significant from {CPU_MIN_EFFECT_SHARE:.0%} of "
                         f"{a.label}'s time per call ({att.whole_min_effect_ns / 1e3:.1f} us): on a CPU other processes "
                         "move a call's time by several percent between builds of one spec timed side by side, so "
                         "the profile sessions' own timed calls must also show it; a unit's delta, from "
                         f"{MIN_EFFECT_SHARE:.0%}, must show in the second pair of profiles and exceed what a "
                         "session alone moves that unit")
    if repeat is not None:
        timed = {v: (first.timed_apart_ns, second.timed_apart_ns)
                 for v, first, second in (("a", a, repeat[0]), ("b", b, repeat[1]))
                 if first.timed_apart_ns and second.timed_apart_ns}
        withdraw(att, require_repeat(att, _attribute(*repeat, alignment, ctx),
                                     "the second pair, profiled after both in the mirrored order (B, then A)", timed))
    if apart is not None:
        stalls = require_floor(att, *apart)
        withdraw(att, stalls)
        if stalls and (a.profiled_apart or b.profiled_apart):  # the units were scaled to those medians
            withdraw(att, carry_measured_interval(att, stalled=True))
    withdraw(att, require_clear_of_floor(att))
    att.notes[:0] = ctx.notes
    try:
        diagnose(att, alignment, a.catalog, b.catalog, ctx.device, a.entry, b.entry, ctx.device_b, ctx.cpu)
    except KeyError as err:
        raise UsageError(f"--gpu: {err.args[0]}") from None
    for v, side in (("a", a), ("b", b)):
        variant = att.variants[v]
        variant.profile, variant.catalog, variant.entry = str(side.profile), side.catalog_path, side.entry
        variant.source = sorted(set(side.events["source"].astype(str)))
    att.device, att.measurement, att.command = ctx.device, ctx.measurement, ctx.command
    if ctx.device_b and ctx.device_b != ctx.device:
        att.device_b = ctx.device_b
    doc = att.to_dict()
    if a.steps is not None and b.steps is not None:
        doc["host"] = host_units(a.steps, a.host, b.steps, b.host)
    doc["catalogs"] = {v: attribution.catalog_section(side.catalog_path) for v, side in (("a", a), ("b", b))}
    _unit_modules(doc)
    return doc, att.unit_calls_ns


def trace_module_path(chain: str) -> str:
    """A trace's module chain as a module path: each 'Class_n' instance (torch.profiler numbers a
    class's instances in call order) written 'Class.n', so repeated layers collapse
    ('BertLayer_1.Linear_4' -> 'BertLayer.1.Linear.4' -> 'BertLayer.*.Linear.*')."""
    return ".".join(re.sub(r"_(\d+)$", r".\1", part) for part in chain.split(".") if part)


def _unit_modules(doc: dict[str, Any]) -> None:
    """Each unit's module_paths: the model modules its kernels compute (a [model] source's
    catalogs), repeats collapsed ('layers.*.mlp.down'); `instances`: the instances of the first it
    computes ('layers.3.mlp.down'), and `repeats`: how many (8 for a kernel every layer of 8 calls);
    absent where the catalogs name none."""
    for unit in doc["units"]:
        paths = [p for v in "ab" for k in unit[f"kernels_{v}"]
                 for p in doc["catalogs"][v]["kernels"].get(k, {}).get("module_paths", [])]
        if not paths and unit["method"] == "op-tree":  # a trace's module spans: the key's module part
            paths = [trace_module_path(op.rpartition("/")[0]) for op in unit["source_ops"]]
        if paths:
            unit["module_paths"] = collapse(paths)
            unit["instances"] = sorted({p for p in paths if pattern(p) == unit["module_paths"][0]})
            unit["repeats"] = len(unit["instances"])


def _attribute(a: Side, b: Side, alignment: Any, ctx: Context) -> Attribution:
    # a side profiled apart from its measurement is a CPU profile: the CPU's practical threshold
    cpu = a.profiled_apart or b.profiled_apart
    return attribute(a.events, b.events, alignment, a.whole, b.whole, labels=(a.label, b.label),
                     environment=ctx.environment,
                     scale_to_whole=tuple(v for v, s in (("a", a), ("b", b)) if s.profiled_apart),
                     timed_apart={v: s.timed_apart_ns for v, s in (("a", a), ("b", b)) if s.timed_apart_ns},
                     timed_how={v: s.timed_how for v, s in (("a", a), ("b", b))},
                     whole_min_effect_share=whole_graph_share(cpu),
                     measured_pair=ctx.measured_pair)


def write_reports(doc: dict[str, Any], out_dir: Path, title: str | None = None) -> list[Path]:
    """attribution.json, report.html and report.md into out_dir as one set (fileio.write_set):
    all three are rendered and staged before any replaces the previous run's."""
    from rootcause.report import html_pieces, render_markdown

    html, markdown = attribution.REPORT_FILES[1:]
    # no device given: the document names its device(s)
    files = {attribution.FILE: attribution.dumps(doc, Path(out_dir) / attribution.FILE),
             html: html_pieces(doc, title=title), markdown: render_markdown(doc, title=title)}
    return write_set(out_dir, files)


# ---- hybrids ---------------------------------------------------------------------------------

def plan_hybrids(spec_a: VariantSpec, spec_b: VariantSpec, catalog_a: list[CatalogKernel],
                 catalog_b: list[CatalogKernel], limit: int = 4, bundle_dirs: dict[str, Path] | None = None,
                 work_dir: Path | None = None) -> tuple[list[Hybrid], list[str]]:
    """The distinct hybrids the frontend can build for this pair (unit hybrids first, at most
    `limit`), named '<base>~h<i>-<kind>', and notes on what cannot be built."""
    notes: list[str] = []
    if spec_a.frontend != spec_b.frontend:
        return [], [f"A is {spec_a.frontend} and B is {spec_b.frontend}: no hybrid mixes two frontends"]
    found = frontends.get(spec_a.frontend).plan_hybrids(spec_a, spec_b, catalog_a, catalog_b, bundle_dirs,
                                                        work_dir, notes)
    if spec_a.source != spec_b.source and not any(h.kind in ("configuration", "executable") for h in found):
        notes.append(f"the variants compile different sources ({spec_a.source.name} vs {spec_b.source.name}): "
                     "no compiler knob swaps one unit between different graphs")
    unique: list[Hybrid] = []
    sides = {_build_key(spec_a): spec_a.name, _build_key(spec_b): spec_b.name}
    keys = set(sides)
    for h in found:
        key = _build_key(h.spec)
        if key in sides:
            notes.append(f"{h.description}: that builds {sides[key]} itself (the variants differ in nothing "
                         "else a hybrid can swap), so the A-B measurement is this counterfactual")
        if key in keys:
            continue  # the same build as A, B or an earlier hybrid
        keys.add(key)
        unique.append(h)
    if not unique and not notes:
        notes.append("the specs differ in nothing a hybrid can swap")
    if len(unique) > limit:
        left = [h.description.split(" (", 1)[0] for h in unique[limit:]]
        notes.append(f"{len(unique) - limit} more hybrid(s) possible; built the first {limit} "
                     f"({'; '.join(left[:6])}{f'; {len(left) - 6} more' if len(left) > 6 else ''} left out)")
    specs = {"a": spec_a, "b": spec_b}
    for i, h in enumerate(unique[:limit], start=1):
        h.name = f"{specs[h.base].name}~h{i}-{h.kind}"
        h.spec = dataclasses.replace(h.spec, name=h.name)
    return unique[:limit], notes


def _compiled_bytes(bundle: Path) -> list[tuple[str, bytes]] | None:
    """The bundle's module and compiled kernel binaries (manifest 'module' and 'binaries'), as bytes;
    None when it lists no binaries. The module counts too: two builds with the same kernels can
    still call them differently (skipping FuseTIR against FuseOps in TVM's host code)."""
    manifest = bundles.read_bundle(bundle).manifest
    files = manifest.get("binaries") or []
    if not files:
        return None
    # byte for byte: a module that differs only in what it records (an IREE .vmfb names its build
    # folder) is measured again rather than assumed the same
    return sorted((Path(f).name, (bundle / f).read_bytes()) for f in [*files, manifest["module"]])


def _twin(paths: dict[str, Path], h: Hybrid, base_name: str, kept: list[Hybrid]) -> str | None:
    """The bundle built from the same base spec (the base itself, or a hybrid kept before h) whose
    module and kernel binaries are byte for byte h's: two edits that compile alike (a configuration that
    fits base's body as well as the other side's body does) are one counterfactual, measured once."""
    mine = _compiled_bytes(paths[h.name])
    if mine is None:
        return None
    for name in [base_name] + [k.name for k in kept if k.base == h.base and k.name in paths]:
        if _compiled_bytes(paths[name]) == mine:
            return name
    return None


def _build_key(spec: VariantSpec) -> str:
    d = spec.to_dict()
    for key in ("name", "spec_file", "variant", "variant_table"):
        d.pop(key, None)
    return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()


# ---- analyze: build, run ---------------------------------------------------------------------

def build_variants(spec_a: VariantSpec, spec_b: VariantSpec, out: Path, no_confirm: bool,
                   limit: int) -> dict[str, Any]:
    """Build A, B and the planned hybrids into out/bundles; write out/plan.json."""
    from rootcause.build import build_bundle, check_before_build

    check_before_build([spec_a, spec_b])
    bundles_dir = out / "bundles"
    paths = {}
    for side, spec in (("A", spec_a), ("B", spec_b)):
        progress(f"building {side} = {spec.name} for {spec.target}")
        paths[spec.name] = build_bundle(spec, bundles_dir / safe_name(spec.name))
    hybrids: list[Hybrid] = []
    notes: list[str] = []
    failed: dict[str, str] = {}
    if not no_confirm:
        catalog_a, catalog_b = (bundles.read_bundle(paths[s.name]).kernels() for s in (spec_a, spec_b))
        hybrids, notes = plan_hybrids(spec_a, spec_b, catalog_a, catalog_b, limit=limit,
                                      bundle_dirs={"a": paths[spec_a.name], "b": paths[spec_b.name]},
                                      work_dir=out / "hybrids")
        if not hybrids:
            progress("no hybrid can be built for this pair: " + "; ".join(notes))
        kept = []
        for h in hybrids:
            progress(f"building hybrid {h.name}: {h.description}")
            try:
                paths[h.name] = build_bundle(h.spec, bundles_dir / safe_name(h.name))
            except (UsageError, ToolFailed) as err:  # A and B built: a counterfactual the compiler refuses is recorded
                failed[h.name] = f"build failed: {err}"
                progress(f"hybrid {h.name} did not build: {err}")
                kept.append(h)
                continue
            twin = _twin(paths, h, [spec_a.name, spec_b.name][h.base == "b"], kept)
            if twin:
                notes.append(f"{h.description}: compiles to the same kernels as {twin}, so it was not kept")
                progress(f"hybrid {h.name} compiles to the same kernels as {twin}: dropped")
                shutil.rmtree(paths.pop(h.name))
                continue
            kept.append(h)
        hybrids = kept
    plan = {"a": spec_a.name, "b": spec_b.name, "target": spec_a.target,
            "specs": {"a": spec_a.to_dict(), "b": spec_b.to_dict()},
            "hybrids": [h.to_dict() for h in hybrids], "failed": failed, "notes": notes,
            "bundles": {name: str(p.relative_to(out)) for name, p in paths.items()}}
    plans.write_plan(out, plan)
    return plan


def run_variants(plan: dict[str, Any], out: Path, run_dir: Path, budget_s: float, calls: int) -> None:
    """The run stage on A, B and the built hybrids; a hybrid whose outputs differ is excluded
    (recorded in plan.json) and the rest measured again."""
    from rootcause.runner import RunRequest, run_bundles

    names = [n for n in plan["bundles"] if n not in plan["failed"]]
    while True:
        progress(f"verify + measure {', '.join(names)} (budget {budget_s:g} s)")
        request = RunRequest([out / plan["bundles"][n] for n in names], run_dir, budget_s=budget_s,
                             profile="cupti" if plan["target"].startswith("cuda") else "none", profile_calls=calls)
        try:
            with contextlib.redirect_stdout(sys.stderr):
                run_bundles(request)
            return
        except OutputsDiffer as err:
            record = getattr(err, "record", {})
            bad = {c["variant"] for c in record.get("checks", []) if not all(r["ok"] for r in c["outputs"])}
            bad_hybrids = bad - {plan["a"], plan["b"]}
            if not bad_hybrids or bad & {plan["a"], plan["b"]}:
                raise
            for name in bad_hybrids:
                plan["failed"][name] = "outputs differ from A or the reference: excluded"
                progress(f"hybrid {name} computes different outputs: excluded, measuring again")
            names = [n for n in names if n not in bad_hybrids]
            plans.write_plan(out, plan)


# CPU calls are noisy: a profile takes up to this many calls, as many as fit in CPU_PROFILE_SECONDS of the
# measured latency (at least the asked-for count), so the units' per-call medians add up to the median
# call (closure) and its scale to the measurement is stable.
CPU_PROFILE_CALLS, CPU_PROFILE_SECONDS = 200, 0.5


def cpu_profiles(plan: dict[str, Any], out: Path, run_dir: Path, calls: int) -> dict[str, dict[str, Any]]:
    """Per-kernel CPU profiles of A and B (the hybrids are only timed) into OUT/cpu-profiles/,
    by each bundle's frontend; the records, with absolute 'file' paths. Each side is profiled
    twice, in the order A, B, B, A: the second pair, in OUT/cpu-profiles/repeat/ (each record's
    'repeat'), is the check that a unit's delta reproduces between sessions, and the mirrored order
    turns a steady drift of the machine into deltas of opposite sign. Profiles already taken for
    this run (the same measurement.json bytes) are reused, so a second analysis of one run gives
    the same attribution."""
    folder = cpu.folder(out)
    key = rundir.measurement_digest(run_dir)
    names = (plan["a"], plan["b"])
    done = cpu.reusable(out, key, names)
    if done is not None:
        progress(f"reusing the CPU profiles taken for this run ({folder})")
        return {n: cpu.absolute(out, r) for n, r in done.items()}
    check_replaceable(folder, "CPU profiles")  # the profilers' children write there: only our files are replaced
    records: dict[str, dict[str, Any]] = {}
    variants = rundir.read_measurement(run_dir)["measurement"]["variants"]
    again_folder = folder / cpu.REPEAT
    for name, where in ((names[0], folder), (names[1], folder), (names[1], again_folder), (names[0], again_folder)):
        b = bundles.read_bundle(out / plan["bundles"][name])
        latency = (variants.get(name) or {}).get("median_s")
        fit = int(CPU_PROFILE_SECONDS / latency) if isinstance(latency, (int, float)) and latency > 0 else 0
        n = max(calls, min(CPU_PROFILE_CALLS, fit))
        again = where != folder
        progress(f"profiling {name} on the CPU ({b.frontend}){' again' if again else ''}")
        make_folder(where)
        try:
            record = sessions.cpu_profile(b, where, n)  # with the bundle's own runtime
        except (UsageError, ToolFailed) as err:
            record = {"profiler": f"{b.frontend}-cpu", "ok": False, "error": str(err)}
            progress(f"{name}: CPU profile failed: {err}")
        mark_owned(folder)  # each profile as it lands: a killed analysis's profiles are still its own
        if not again:
            records[name] = record
        elif record.get("ok"):
            records[name]["repeat"] = dict(record, file=f"{cpu.REPEAT}/{record['file']}")
    cpu.finish(out, key, records)
    return {n: cpu.absolute(out, r) for n, r in records.items()}


def _needs_cpu_profiles(plan: dict[str, Any], doc: dict[str, Any]) -> bool:
    """A run of llvm bundles without per-kernel profiles of A and B (the run stage profiles GPUs only)."""
    if not plan["target"].startswith("llvm"):
        return False
    profiles = doc.get("profiles") or {}
    return any(not (profiles.get(n) or {}).get("file") for n in (plan["a"], plan["b"]))


# ---- analyze: the analysis of a run directory --------------------------------------------------

def analyze_run(plan: dict[str, Any], out: Path, run_dir: Path, threshold: float,
                device: str | None = None, calls: int = 10, command: str | None = None) -> dict[str, Any]:
    """Attribution (with confirmation) of a run directory against OUT's plan. Reads RUN, never
    writes into it: CPU profiles taken here go under OUT."""
    from rootcause import gpus

    mpath = run_dir / rundir.MEASUREMENT
    measurement = rundir.read_measurement(run_dir)
    run_notes, extra = [], {}
    if _needs_cpu_profiles(plan, measurement):
        progress(f"{run_dir} holds no per-kernel profile of {plan['a']} and {plan['b']}: profiling them here")
        extra = cpu_profiles(plan, out, run_dir, calls)
        run_notes.append("the run recorded no per-kernel profile (llvm bundles): analyze took the CPU profiles "
                         f"of A and B on this host, into {cpu.folder(out)}")
    a, b = plan["a"], plan["b"]
    progress("align, attribute, diagnose")
    split_notes: list[str] = []
    sides, repeats = {}, {}
    for name in (a, b):
        profile = rundir.profile_file(run_dir, measurement, name, extra)
        loaded = bundles.read_bundle(out / plan["bundles"][name])
        whole = rundir.variant_whole_graph(measurement, name, mpath)
        record = extra.get(name)
        events = profile_events(str(profile), _calls(record), split_notes, name)
        kernels, catalog_path = _catalog(loaded, out, run_dir, events, split_notes)
        sides[name] = Side(name, str(profile), events, kernels, catalog_path, loaded.entry, whole,
                           profiled_apart=name in extra, timed_apart_ns=_timed_ns(record, events),
                           timed_how=_timed_how(record))
        again = (record or {}).get("repeat")
        if again:
            repeat_notes: list[str] = []  # the first pair's notes say the same of the split
            again_events = profile_events(again["file"], _calls(again), repeat_notes, name)
            repeats[name] = dataclasses.replace(
                sides[name], profile=again["file"], timed_apart_ns=_timed_ns(again, again_events),
                events=again_events)
    environment = rundir.read_env(run_dir)
    ctx = Context(gpus.resolve_device(device, environment), environment,
                  rundir.measurement_meta(measurement["measurement"], mpath, (a, b)), command, split_notes,
                  cpu=plan["target"].startswith("llvm"),
                  measured_pair=rundir.measured_pair(measurement["measurement"], a, b))
    doc, unit_ns = _attribute_pair(sides[a], sides[b], ctx,
                                   (repeats[a], repeats[b]) if len(repeats) == 2 else None,
                                   _timed_apart(measurement["measurement"], a, b) if ctx.cpu else None)
    hybrids = [Hybrid.from_dict(h) for h in plan.get("hybrids", [])]
    # per launch, as the units were timed: a kernel split per source op counts only its own launches
    unit_calls = {u: {v: t / 1e9 for v, t in sides_ns.items()} for u, sides_ns in unit_ns.items()}
    doc["confirmation"] = confirm.evaluate(measurement["measurement"], a, b, hybrids, doc["units"], threshold,
                                           doc["whole_graph"]["significant"], plan.get("failed", {}),
                                           unit_calls=unit_calls)
    doc["confirmation"]["notes"] = plan.get("notes", [])
    profiles = {n: extra.get(n) or measurement.get("profiles", {}).get(n) for n in (a, b)}
    doc["run"] = {"directory": str(run_dir), "verification_ok": measurement.get("verification", {}).get("ok"),
                  "env_warnings": measurement.get("env_warnings", []), "target": plan["target"],
                  "profiles": profiles, "notes": run_notes}
    return doc


def _catalog(loaded: Any, out: Path, run_dir: Path, events: pd.DataFrame,
             notes: list[str]) -> tuple[list[CatalogKernel], str]:
    """A bundle's catalog and where it is kept: the bundle's own, or, where the build host could not
    compile for the run's device (XLA compiles where it runs: an empty catalog), the one its
    frontend reads from what the run kept of that compile, written under OUT."""
    kernels = loaded.kernels()
    hook = getattr(frontends.get(loaded.frontend), "run_catalog", None) if not kernels else None
    found = hook(loaded, run_dir, events, notes) if hook is not None else None
    if not found:
        return kernels, str(loaded.path)
    return found, str(bundles.write_run_catalog(out, loaded, found))


def _timed_apart(measured: dict[str, Any], a: str, b: str) -> tuple[dict[str, list[float]], str] | None:
    """Where the run timed A and B in two processes (one side's runtime is another release's, in its
    own environment): each side's seconds per call and which pythons timed them; else None."""
    processes = measured.get("timed_by") or {}
    samples = {v: (measured["variants"].get(n) or {}).get("samples_s") or [] for v, n in (("a", a), ("b", b))}
    if a not in processes or b not in processes or processes[a] == processes[b] or not all(samples.values()):
        return None
    return samples, f"{a} was timed in a process of {processes[a]} and {b} in one of {processes[b]}"


def _timed_ns(record: dict[str, Any] | None, events: pd.DataFrame) -> float | None:
    """Median ns of a CPU profile session's own call: its calls timed without the profiler (the
    record's 'timed_ns'), or, where the profiler ran the calls back to back (the record's
    'back_to_back'), the period from one call's first launch to the next's."""
    timed = (record or {}).get("timed_ns")
    if isinstance(timed, list) and timed and all(isinstance(t, (int, float)) and t > 0 for t in timed):
        return float(statistics.median(timed))
    if (record or {}).get("back_to_back") is True and "call" in events.columns:
        return profiled_call_ns(events[events["call"] >= 0])
    return None


def _timed_how(record: dict[str, Any] | None) -> str:
    if isinstance((record or {}).get("timed_ns"), list) or not (record or {}).get("back_to_back"):
        return "timed without the profiler"
    return "from one call's first dispatch to the next's, run back to back by the profiler"


def _calls(record: dict[str, Any] | None) -> int | None:
    """The profiled call count a CPU profile record gives, if any."""
    calls = (record or {}).get("calls")
    return calls if isinstance(calls, int) else None
