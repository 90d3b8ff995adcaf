"""`rootcause compare PROFILE_A PROFILE_B`: offline attribution of two captured profiles.

A is the baseline, B the candidate (deltas are B - A). Catalogs (bundle directories or their
manifest.json) give provenance-based units and static facts; without them the output says
what cannot be concluded. Writes DIR/attribution.json atomically and prints a summary that
reads like the opening of a triage comment.

--measurement FILE|RUN_DIR: whole-graph latency per variant, as rootcause.measure writes it
(Measurement.to_dict(): "variants": {name: {"median_s", "ci_s", "samples_s", ...}}), bare or
inside `rootcause run`'s measurement.json (under "measurement"); a run directory means its
measurement.json. Variants are found by label (--label-a/-b, default the bundle names, which
are the names `rootcause run` measured them under). Without "ci_s" (a run before F's protocol
landed) the interval is recomputed from "samples_s" with rootcause.measure.median_ci.

Graph calls: a profile written by `rootcause run` is split into the number of calls the run
recorded for it (measurement.json beside it, profiles.<variant>.calls), --calls N overrides;
otherwise rootcause.profilers.split_calls finds the repeating kernel sequence (which cuts a
single profiled call of a repetitive graph into several).

Beside attribution.json it writes report.html and report.md (rootcause.report). The attribution
records per-kernel launch statistics, one call's timeline, the device (--device, else the GPU
named in env.json beside the profiles), the measurement file and the command line.
"""
from __future__ import annotations

import argparse
import importlib
import json
import re
import shlex
from pathlib import Path
from typing import Any

import pandas as pd

from rootcause.align import align
from rootcause.attribute import Attribution, WholeGraph, attribute
from rootcause.diagnose import diagnose
from rootcause.errors import UsageError
from rootcause.fileio import write_atomic, write_json
from rootcause.measure import median_ci
from rootcause.model import CatalogKernel
from rootcause.profilers import split_calls

# Importers tried in order by their cheap magic check, when rootcause.profilers is absent.
_READERS = ("parsers.cupti_json", "parsers.ncu_csv", "parsers.nsys_sqlite", "parsers.rocprof",
            "parsers.chrome_trace", "parsers.iree_profile")


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
    parser.add_argument("--device", default=None,
                        help="GPU the profiles were captured on (e.g. H200): waves, occupancy, peak bandwidth")
    parser.add_argument("--calls", type=int, default=None, metavar="N",
                        help="graph calls in each profile (default: as `rootcause run` recorded, else detected)")
    parser.add_argument("--title", default=None, help="title of report.html and report.md")
    parser.add_argument("--out", required=True, metavar="DIR",
                        help="directory for attribution.json, report.html and report.md")


def read_json(path: Path, missing: str) -> Any:
    """A JSON file; UsageError '<path>: <missing>' when absent, with the line when not JSON."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"{path}: {missing}") from None
    except UnicodeDecodeError as err:
        raise UsageError(f"{path}: byte {err.start}: not UTF-8 text") from None
    except json.JSONDecodeError as err:
        raise UsageError(f"{path}: line {err.lineno} column {err.colno}: not JSON: {err.msg}") from None


def load_profile(path: str) -> pd.DataFrame:
    """A KernelEvents table from any supported capture, through F's loader when present.

    'FILE#N' selects call segment N (one run of identical calls: one variant) of a capture
    that holds several variants, as rootcause.profilers.split_calls numbers them."""
    p = Path(path)
    if not p.is_file() and "#" in path:
        base, _, seg = path.rpartition("#")
        if not seg.isdigit():
            raise UsageError(f"{path}: '#{seg}': a segment is a number")
        events = split_calls(load_profile(base))
        chosen = events[events["segment"] == int(seg)]
        if chosen.empty:
            raise UsageError(f"{path}: no segment {seg} (the capture has "
                             f"{events['segment'].max() + 1} segment(s))")
        return chosen.assign(call=chosen["call"] - chosen["call"].min()).reset_index(drop=True)
    if not p.is_file():
        raise UsageError(f"{path}: no such profile file")
    try:
        profilers = importlib.import_module("rootcause.profilers")
    except ModuleNotFoundError:
        profilers = None
    if profilers is not None and hasattr(profilers, "load"):
        events = profilers.load(p)
    else:
        data = p.read_bytes()
        for name in _READERS:
            try:
                reader = importlib.import_module(name)
            except ModuleNotFoundError:
                continue
            if reader.matches(data):
                events = reader.events(data, str(p))
                break
        else:
            raise UsageError(f"{path}: not a profile format rootcause reads (tried {', '.join(_READERS)})")
    if len(events) == 0:
        raise UsageError(f"{path}: the profile holds no kernel launches")
    return events


def load_catalog(path: str | None) -> tuple[list[CatalogKernel] | None, dict[str, Any]]:
    """Catalog kernels and manifest of a bundle directory or its manifest.json."""
    if path is None:
        return None, {}
    p = Path(path)
    manifest_path = p / "manifest.json" if p.is_dir() else p
    manifest = read_json(manifest_path, "no bundle manifest here")
    kernels = manifest.get("kernels") if isinstance(manifest, dict) else None
    if not isinstance(kernels, list):
        raise UsageError(f"{manifest_path}: \"kernels\": missing or not a list")
    out = []
    for i, k in enumerate(kernels):
        if not isinstance(k, dict) or not isinstance(k.get("name"), str):
            raise UsageError(f"{manifest_path}: kernels[{i}]: not a catalog kernel (no \"name\")")
        out.append(CatalogKernel.from_dict({"function": k["name"], **k}))
    return out, manifest


def load_measurement(path: str | None, labels: tuple[str, str]
                     ) -> tuple[WholeGraph | None, WholeGraph | None, dict[str, Any] | None]:
    """Measured whole-graph latency of the variants named `labels` (module doc), and what
    attribution.json records of the measurement (file, protocol, rounds, budget)."""
    if path is None:
        return None, None, None
    p = Path(path)
    if p.is_dir():
        p = p / "measurement.json"
    doc = read_json(p, "no such measurement file")
    where = f"{p}: measurement"
    if isinstance(doc, dict) and isinstance(doc.get("measurement"), dict):
        doc = doc["measurement"]  # rootcause run's measurement.json
    elif isinstance(doc, dict) and doc.get("measurement") is not None:
        raise UsageError(f"{where}: not an object (the run recorded no measurement?)")
    table = doc.get("variants") if isinstance(doc, dict) else None
    if not isinstance(table, dict):
        raise UsageError(f"{p}: \"variants\": missing or not an object (not a rootcause Measurement)")
    out = []
    for key, label in zip("ab", labels):
        if label not in table:
            raise UsageError(f"{p}: no variant {label!r} (variant {key}); it holds {', '.join(map(repr, table))}: "
                             f"name them with --label-{key}")
        out.append(measured_whole_graph(table[label], f"{where}.variants.{label}"))
    meta = {"file": str(path), "protocol": doc.get("protocol"), "rounds": doc.get("rounds"),
            "budget_s": doc.get("budget_s"), "variants": list(labels)}
    return out[0], out[1], meta


def measured_whole_graph(v: Any, where: str) -> WholeGraph:
    """WholeGraph (ns) of one Measurement variant: median_s and ci_s, or ci from samples_s."""
    if not isinstance(v, dict) or not isinstance(v.get("median_s"), (int, float)):
        raise UsageError(f"{where}: \"median_s\": missing or not a number")
    samples = v.get("samples_s")
    if samples is not None and (not isinstance(samples, list) or not samples
                                or not all(isinstance(x, (int, float)) for x in samples)):
        raise UsageError(f"{where}: \"samples_s\": not a non-empty list of numbers")
    ci = v.get("ci_s")
    if ci is None:
        if samples is None:
            raise UsageError(f"{where}: neither \"ci_s\" nor \"samples_s\": no interval")
        ci = median_ci(samples)
    if not isinstance(ci, (list, tuple)) or len(ci) != 2 or not all(isinstance(x, (int, float)) for x in ci):
        raise UsageError(f"{where}: \"ci_s\": expected [low, high] in seconds, got {ci!r}")
    return WholeGraph(float(v["median_s"]) * 1e9, float(ci[0]) * 1e9, float(ci[1]) * 1e9, "measured",
                      len(samples) if samples else None)


def run_record(profile: str) -> tuple[dict[str, Any] | None, Path | None]:
    """The profiles.<variant> entry `rootcause run` wrote for this file (measurement.json in the
    same directory, matched by file name), and that measurement.json; (None, None) if none."""
    file = Path(profile)
    if not file.is_file():
        return None, None  # 'FILE#N': a segment of a shared capture, not one run profile
    mfile = file.parent / "measurement.json"
    if not mfile.is_file():
        return None, None
    doc = read_json(mfile, "no such file")
    profiles = doc.get("profiles") if isinstance(doc, dict) else None
    for info in (profiles or {}).values() if isinstance(profiles, dict) else ():
        if isinstance(info, dict) and info.get("file") == file.name:
            return info, mfile
    return None, None


def split_into(events: pd.DataFrame, calls: int, where: str) -> pd.DataFrame:
    """Events cut into `calls` equal graph calls (split_calls(calls=...)), errors naming where."""
    try:
        return split_calls(events.drop(columns=[c for c in ("segment", "signature") if c in events]),
                           calls=calls)
    except UsageError as err:
        raise UsageError(f"{where}: {err}") from None


def profile_events(path: str, calls: int | None, notes: list[str], label: str) -> pd.DataFrame:
    """load_profile, cut into the given number of calls, else into those `rootcause run` recorded."""
    events = load_profile(path)
    where = "--calls"
    if calls is None:
        info, mfile = run_record(path)
        if info is not None and isinstance(info.get("calls"), int) and not isinstance(info["calls"], bool):
            calls, where = info["calls"], f"{mfile}: profiles.{info.get('variant', label)}.calls"
    if calls is None:
        return events
    if calls <= 0:
        raise UsageError(f"{where}: must be > 0, got {calls}")
    notes.append(f"variant {label}: {len(events)} launches split into {calls} graph call(s), the count "
                 f"{where} gives")
    return split_into(events, calls, f"{path} ({where} = {calls})")


def find_device(*names: Any) -> str | None:
    """The rootcause.gpus.DEVICES key the first recognisable name means ('NVIDIA H200' -> 'H200'):
    a key itself (any case) or a whole word of the name."""
    from rootcause import gpus

    for name in names:
        if not isinstance(name, str):
            continue
        tokens = {t.upper() for t in re.split(r"[\s_/-]+", name)}
        for key in gpus.DEVICES:
            if key.upper() == name.upper() or key.upper() in tokens:
                return key
    return None


def env_gpu_names(env: Any) -> list[str]:
    """GPU names of an env.json ({'before': snapshot, ...}) or of one NVML snapshot."""
    snaps = [env] if isinstance(env, dict) and "gpus" in env else \
        [s for s in env.values() if isinstance(s, dict)] if isinstance(env, dict) else []
    return [g["name"] for s in snaps for g in s.get("gpus") or [] if isinstance(g, dict)
            and isinstance(g.get("name"), str)]


def run_environment(*profiles: str) -> dict[str, Any] | None:
    """env.json of the `rootcause run` directory the profiles lie in (the first that has one)."""
    for profile in profiles:
        file = Path(profile)
        if file.is_file() and (file.parent / "env.json").is_file():
            return read_json(file.parent / "env.json", "no such file")
    return None


def resolve_device(given: str | None, env: dict[str, Any] | None) -> str | None:
    """--device (checked against rootcause.gpus.DEVICES), else the GPU env.json names."""
    from rootcause import gpus

    if given is not None:
        key = find_device(given)
        if key is None:
            raise UsageError(f"--device: unknown device {given!r} (known: {', '.join(gpus.DEVICES)})")
        return key
    return find_device(*env_gpu_names(env))


def command_line(argv: list[str]) -> str:
    return " ".join(shlex.quote(str(a)) for a in argv)


def _argv(args: argparse.Namespace) -> list[str]:
    """The `rootcause compare` command line equivalent to args."""
    argv = ["rootcause", "compare", args.profile_a, args.profile_b]
    for name in ("catalog_a", "catalog_b", "measurement", "label_a", "label_b", "entry_a", "entry_b",
                 "device", "calls", "title", "out"):
        value = getattr(args, name, None)
        if value is not None:
            argv += [f"--{name.replace('_', '-')}", str(value)]
    return argv


def write_outputs(doc: dict[str, Any], out_dir: Path, title: str | None = None) -> list[Path]:
    """attribution.json, then report.html and report.md beside it, each atomically."""
    from rootcause.report import render_html, render_markdown

    written = [write_json(out_dir / "attribution.json", doc)]
    for name, render in (("report.html", render_html), ("report.md", render_markdown)):
        written.append(write_atomic(out_dir / name, render(doc, base_dir=out_dir, device=doc.get("device"),
                                                           title=title)))
    return written


def _fmt_us(ns: float) -> str:
    return f"{ns / 1e3:.1f} us"


def _ci(x: dict[str, float]) -> str:
    return f"[{x['low'] / 1e3:+.1f}, {x['high'] / 1e3:+.1f}]"


def _side(kernels: list[str]) -> str:
    if not kernels:
        return "(nothing)"
    shown = [f"`{k}`" if len(k) <= 48 else f"`{k[:45]}...`" for k in kernels[:3]]
    return " + ".join(shown) + (f" + {len(kernels) - 3} more" if len(kernels) > 3 else "")


def summary(att: Attribution) -> str:
    """Plain text, like the opening of a triage comment."""
    A, B = att.variants["a"]["label"], att.variants["b"]["label"]
    w = att.whole_graph
    wa, wb, wd = w["a"]["median"], w["b"]["median"], w["delta_ns"]
    source = "measured" if w["source"] == "measured" else "profiled span per call, no measurement given"
    if w["significant"]:
        verb = "slower" if wd["median"] > 0 else "faster"
        ratio = max(wa, wb) / min(wa, wb) if min(wa, wb) > 0 else float("inf")
        lines = [f"{B} is {ratio:.2f}x {verb} than {A}: {_fmt_us(wb)} vs {_fmt_us(wa)} per graph call, "
                 f"{wd['median'] / 1e3:+.1f} us {_ci(wd)} ({source})."]
    else:
        lines = [f"No significant whole-graph difference between {B} and {A}: {_fmt_us(wb)} vs "
                 f"{_fmt_us(wa)} per call, {wd['median'] / 1e3:+.1f} us {_ci(wd)} ({source})."]
    sig = [u for u in att.units if u["significant"]]
    if not sig:
        lines.append("No unit's delta is significant; nothing is blamed.")
    for rank, u in enumerate(sig[:3]):
        share = f", {u['share']:+.0%} of the whole delta" if u["share"] is not None and w["significant"] else ""
        lead = "The top unit is" if rank == 0 else "Next,"
        lines.append(f"{lead} {_side(u['kernels_b'])} in {B} against {_side(u['kernels_a'])} in {A}: "
                     f"{_fmt_us(u['time_b_ns']['median'])} vs {_fmt_us(u['time_a_ns']['median'])}, "
                     f"{u['delta_ns']['median'] / 1e3:+.1f} us {_ci(u['delta_ns'])} per call{share} "
                     f"(aligned by {u['method']}).")
        lines.extend(f"  - {f['sentence']}" for f in u["findings"])
    r = att.residual
    lines.append(f"Residual (launch overhead, gaps, host): {_fmt_us(r['b']['median'])} in {B} vs "
                 f"{_fmt_us(r['a']['median'])} in {A}, {r['delta_ns']['median'] / 1e3:+.1f} us "
                 f"{_ci(r['delta_ns'])}; {r['launches_per_call']['b']:g} vs "
                 f"{r['launches_per_call']['a']:g} launches per call.")
    lines.extend(f"  - {f['sentence']}" for f in att.findings if f["unit"] is None)
    if att.closure is not None:
        lines.append(f"Closure: units + residual explain {att.closure:.0%} of the whole-graph delta "
                     f"({w['unit_delta_sum_ns'] / 1e3:+.1f} us from units, "
                     f"{r['delta_ns']['median'] / 1e3:+.1f} us residual).")
    for note in att.cannot_conclude:
        lines.append(f"Cannot conclude: {note}.")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    catalog_a, manifest_a = load_catalog(args.catalog_a)
    catalog_b, manifest_b = load_catalog(args.catalog_b)
    labels = (args.label_a or manifest_a.get("name") or "A", args.label_b or manifest_b.get("name") or "B")
    if labels[0] == labels[1]:
        labels = (f"{labels[0]} (A)", f"{labels[1]} (B)")
    split_notes: list[str] = []
    events_a = profile_events(args.profile_a, args.calls, split_notes, labels[0])
    events_b = profile_events(args.profile_b, args.calls, split_notes, labels[1])
    entry_a = args.entry_a or manifest_a.get("entry")
    entry_b = args.entry_b or manifest_b.get("entry")
    whole_a, whole_b, measured = load_measurement(args.measurement, labels)
    environment = run_environment(args.profile_a, args.profile_b)
    device = resolve_device(args.device, environment)
    alignment = align(events_a, events_b, catalog_a, catalog_b, entry_a, entry_b)
    att = attribute(events_a, events_b, alignment, whole_a, whole_b, labels=labels, environment=environment)
    att.notes[:0] = split_notes
    try:
        diagnose(att, alignment, catalog_a, catalog_b, device, entry_a, entry_b)
    except KeyError as err:
        raise UsageError(f"--device: {err.args[0]}") from None
    for v, path, cat, ev in (("a", args.profile_a, args.catalog_a, events_a),
                             ("b", args.profile_b, args.catalog_b, events_b)):
        att.variants[v].update({"profile": str(path), "catalog": cat, "entry": entry_a if v == "a" else entry_b,
                                "source": sorted(set(ev["source"].astype(str)))})
    att.device, att.measurement, att.command = device, measured, command_line(_argv(args))
    written = write_outputs(att.to_dict(), Path(args.out), args.title)
    print(summary(att))
    print("\nwrote " + ", ".join(map(str, written)))
    return 0
