"""What a report shows, read from an attribution.json document (rootcause.attribute, schema 1).

The report reads only the file: keys that may be absent (findings, environment, closure, a
unit's share or method, the 'kernels', 'timeline', 'device', 'measurement', 'command' and
'confirmation' sections) are shown as 'not available', never guessed. rootcause compare and
analyze write all of them: 'kernels' (attribute.KERNEL_STAT_COLUMNS rows: variant, kernel,
unit, launches_per_call, duration_ns, time_per_call_ns, grid, block, registers, shared_bytes,
local_bytes), 'timeline' ({'a'|'b': {'call', 'calls', 'kernels': [{kernel, start_ns, end_ns,
stream}]}}, times relative to the call's first launch), 'device' (a rootcause.gpus.DEVICES
key), 'measurement' ({file, protocol, rounds, budget_s}), 'command' (the command line), and,
from analyze, 'confirmation' (confirm.evaluate's verdict per hybrid).

Older files without those sections are still read: per-kernel facts and the timeline are then
recomputed from each variant's `profile` (rootcause.compare's loader, 'FILE#SEGMENT' as in
`rootcause compare`), and the environment from the env.json and measurement.json that
`rootcause run` writes next to its profiles. Schedule facts (TVM rule, IREE pipeline and
lowering_config) always come from each variant's `catalog` (a bundle directory or manifest.json).
"""
from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from parsers import ParseError
from rootcause.attribute import one_call
from rootcause.errors import UsageError

SUPPORTED_SCHEMAS = (1,)

# Keys every report needs: (dotted path, expected type). Everything else is optional.
_REQUIRED: tuple[tuple[str, type | tuple[type, ...]], ...] = (
    ("schema_version", int),
    ("variants", dict), ("variants.a", dict), ("variants.b", dict),
    ("whole_graph", dict), ("whole_graph.a.median", (int, float)), ("whole_graph.b.median", (int, float)),
    ("whole_graph.delta_ns.median", (int, float)),
    ("units", list),
    ("residual", dict), ("residual.delta_ns.median", (int, float)),
)
# Sections compare and analyze add (schema 1, additive): checked when present and not null.
_OPTIONAL: tuple[tuple[str, type], ...] = (
    ("kernels", list), ("timeline", dict), ("device", str), ("measurement", dict), ("command", str),
    ("confirmation", dict),
)
_UNIT_REQUIRED: tuple[tuple[str, type | tuple[type, ...]], ...] = (
    ("unit", int), ("kernels_a", list), ("kernels_b", list),
    ("time_a_ns.median", (int, float)), ("time_b_ns.median", (int, float)),
    ("delta_ns.median", (int, float)),
)


def get(doc: Any, path: str, default: Any = None) -> Any:
    """doc['a']['b'] for path 'a.b', or default when any step is missing."""
    for key in path.split("."):
        if not isinstance(doc, dict) or key not in doc:
            return default
        doc = doc[key]
    return doc


def _require(doc: Any, path: str, kind, file: str, where: str = "") -> None:
    value, cur = doc, ""
    for key in path.split("."):
        cur = f"{cur}.{key}" if cur else key
        if not isinstance(value, dict) or key not in value:
            raise UsageError(f"{file}: key '{where}{cur}': missing")
        value = value[key]
    if isinstance(value, bool) or not isinstance(value, kind):
        name = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise UsageError(f"{file}: key '{where}{path}': expected {name}, got {type(value).__name__}")
    if isinstance(value, float) and not math.isfinite(value):
        raise UsageError(f"{file}: key '{where}{path}': {value} is not a finite number")


def check(doc: Any, file: str = "attribution.json") -> None:
    """Raise UsageError (one line: file and key) unless doc is an attribution a report can show."""
    if not isinstance(doc, dict):
        raise UsageError(f"{file}: not an attribution: the top level is a {type(doc).__name__}, not an object")
    _require(doc, "schema_version", int, file)
    if doc["schema_version"] not in SUPPORTED_SCHEMAS:
        raise UsageError(f"{file}: key 'schema_version': {doc['schema_version']} is not a schema this "
                         f"report reads (supported: {', '.join(map(str, SUPPORTED_SCHEMAS))})")
    for path, kind in _REQUIRED:
        _require(doc, path, kind, file)
    for path, kind in _OPTIONAL:
        if doc.get(path) is not None:
            _require(doc, path, kind, file)
    for i, unit in enumerate(doc["units"]):
        if not isinstance(unit, dict):
            raise UsageError(f"{file}: key 'units[{i}]': expected an object")
        for path, kind in _UNIT_REQUIRED:
            _require(unit, path, kind, file, f"units[{i}].")


def load(path: str | Path) -> dict[str, Any]:
    """Read and check attribution.json; bad JSON or schema -> UsageError naming file and key."""
    from rootcause.compare import read_json

    p = Path(path)
    doc = read_json(p, "no such attribution file")
    check(doc, str(p))
    return doc


# --- formatting shared by the HTML and Markdown renderers -------------------------------------

def fmt_time(ns: float | None, signed: bool = False) -> str:
    if ns is None:
        return "n/a"
    sign = "+" if signed and ns > 0 else ""
    a = abs(ns)
    if a >= 1e9:
        return f"{sign}{ns / 1e9:.3g} s"
    if a >= 1e6:
        return f"{sign}{ns / 1e6:.3g} ms"
    if a >= 1e3:
        return f"{sign}{ns / 1e3:.1f} us"
    return f"{sign}{ns:.0f} ns"


def fmt_interval(x: dict[str, Any] | None, signed: bool = True) -> str:
    """'+38.9 us [+37.0, +40.1]' from {median, low, high}."""
    if not isinstance(x, dict) or x.get("median") is None:
        return "n/a"
    text = fmt_time(x["median"], signed)
    if x.get("low") is not None and x.get("high") is not None:
        text += f" [{fmt_time(x['low'], signed)}, {fmt_time(x['high'], signed)}]"
    return text


def fmt_share(share: float | None) -> str:
    if share is None:
        return "n/a"
    return f"{share:+.1%}" if abs(share) < 0.095 else f"{share:+.0%}"


def fmt_dims(t: Any) -> str:
    if t is None:
        return "n/a"
    dims = [int(x) for x in t]
    while len(dims) > 1 and dims[-1] == 1:
        dims.pop()
    return " x ".join(f"{d:,}" for d in dims)


def fmt_value(v: Any) -> str:
    if v is None:
        return "n/a"
    if isinstance(v, float) and v.is_integer():
        return f"{int(v):,}"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, (list, tuple)):
        return fmt_dims(v) if all(isinstance(x, int) for x in v) else ", ".join(map(str, v))
    return str(v)


def short(name: str, limit: int = 48) -> str:
    return name if len(name) <= limit else name[: limit - 1] + "\u2026"


# --- verdict ----------------------------------------------------------------------------------

def verdict(doc: dict[str, Any]) -> dict[str, Any]:
    """Which variant is faster, by how much (ratio with a conservative interval), the closure."""
    w = doc["whole_graph"]
    A, B = label(doc, "a"), label(doc, "b")
    a, b = w["a"], w["b"]
    significant = w.get("significant")
    delta = w["delta_ns"]["median"]
    b_slower = delta > 0
    slow, fast = (b, a) if b_slower else (a, b)
    ratio = slow["median"] / fast["median"] if fast["median"] else None
    # No joint samples: the widest ratio of the two intervals, as attribute does for the delta.
    lo = hi = None
    if all(isinstance(x.get(k), (int, float)) for x in (slow, fast) for k in ("low", "high")) and fast["low"] > 0:
        lo, hi = slow["low"] / fast["high"], slow["high"] / fast["low"]
    return {"a": A, "b": B, "significant": significant, "slower": B if b_slower else A,
            "faster": A if b_slower else B, "ratio": ratio, "ratio_low": lo, "ratio_high": hi,
            "time_a": a, "time_b": b, "delta": w["delta_ns"], "source": w.get("source", "not available"),
            "source_note": w.get("note"), "closure": doc.get("closure"),
            "unit_sum_ns": w.get("unit_delta_sum_ns"), "residual": get(doc, "residual.delta_ns")}


def verdict_sentence(v: dict[str, Any]) -> str:
    """One plain-text line, the first thing both reports say."""
    times = f"{fmt_time(v['time_b']['median'])} vs {fmt_time(v['time_a']['median'])} per graph call"
    source = {"measured": "measured", "profiled-span": "profiled span"}.get(v["source"], str(v["source"]))
    if v["significant"] is False or v["ratio"] is None:
        text = f"No significant whole-graph difference between {v['b']} and {v['a']}: {times}"
    else:
        verb = "slower" if v["slower"] == v["b"] else "faster"
        rng = (f" (interval {v['ratio_low']:.2f}x-{v['ratio_high']:.2f}x)"
               if v["ratio_low"] is not None else "")
        text = f"{v['b']} is {v['ratio']:.2f}x {verb} than {v['a']}{rng}: {times}"
    text += f", delta {fmt_interval(v['delta'])} ({source}, B - A)"
    if isinstance(v["closure"], (int, float)):
        text += f"; closure {v['closure']:.0%} (units + residual explain that share of the delta)"
    else:
        text += "; closure not available"
    return text + "."


def label(doc: dict[str, Any], v: str) -> str:
    return str(get(doc, f"variants.{v}.label") or v.upper())


# --- units ------------------------------------------------------------------------------------

def units_sorted(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return sorted(doc["units"], key=lambda u: -abs(u["delta_ns"]["median"]))


def unit_label(u: dict[str, Any], limit: int = 28) -> str:
    """'#1 fused_pool2d_add2 | pool2d+1': B side first (the candidate), then A."""
    def side(ks: list[str]) -> str:
        if not ks:
            return "-"
        head = re.sub(r"_kernel\d*$", "", ks[0])
        return short(head, limit) + (f"+{len(ks) - 1}" if len(ks) > 1 else "")
    return f"#{u['unit']} {side(u['kernels_b'])} | {side(u['kernels_a'])}"


def fold(units: list[dict[str, Any]], top: int) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """The top units and one 'other' row summing the rest (None when nothing is folded)."""
    if len(units) <= top:
        return units, None
    rest = units[top:]
    other = {"unit": None, "count": len(rest),
             "time_a_ns": {"median": sum(u["time_a_ns"]["median"] for u in rest)},
             "time_b_ns": {"median": sum(u["time_b_ns"]["median"] for u in rest)},
             "delta_ns": {"median": sum(u["delta_ns"]["median"] for u in rest)},
             "kernels_a": [k for u in rest for k in u["kernels_a"]],
             "kernels_b": [k for u in rest for k in u["kernels_b"]]}
    return units[:top], other


# --- counterfactual hybrids (rootcause analyze's doc['confirmation']) ------------------------

CONFIRMATION_COLUMNS = ("hybrid", "change", "unit", "hybrid per call", "graph vs A, B", "recovered [95%]", "of",
                        "whole-graph share [95%]", "verdict")


def fmt_recovered(rec: Any) -> str:
    """'62% [48%, 75%]': the share of a delta a hybrid recovers, with its interval."""
    if not isinstance(rec, dict) or not isinstance(rec.get("median"), (int, float)):
        return "n/a"
    text = f"{rec['median']:.0%}"
    if isinstance(rec.get("low"), (int, float)) and isinstance(rec.get("high"), (int, float)):
        text += f" [{rec['low']:.0%}, {rec['high']:.0%}]"
    return text


def _speed(x: Any) -> str:
    """T_side / T_h as '4.9x faster' or '1.24x slower'."""
    if not isinstance(x, (int, float)) or x <= 0:
        return "n/a"
    word, r = ("faster", x) if x >= 1 else ("slower", 1 / x)
    return f"{r:.0f}x {word}" if r >= 10 else f"{r:.1f}x {word}" if r >= 2 else f"{r:.2f}x {word}"


def _against(r: dict[str, Any]) -> str:
    """What the judged share is a share of: the unit's delta or the whole A-B delta."""
    rec, med = r.get("recovered"), r.get("median_s")
    of = rec.get("of") if isinstance(rec, dict) else None
    if of == "unit" and isinstance(r.get("unit_delta_s"), (int, float)):
        return f"unit {fmt_value(r.get('unit'))}'s {fmt_time(abs(r['unit_delta_s']) * 1e9)}"
    if isinstance(med, dict) and all(isinstance(med.get(k), (int, float)) for k in "ab"):
        return f"A-B delta {fmt_time(abs(med['a'] - med['b']) * 1e9)}"
    return "A-B delta"


def confirmation(doc: dict[str, Any]) -> dict[str, Any] | None:
    """doc['confirmation'] as plain cells for both renderers; None when the document has none
    (rootcause compare does not build hybrids). Older documents (one whole-graph share, no
    unit share) show that share and n/a for the rest."""
    conf = doc.get("confirmation")
    if not isinstance(conf, dict):
        return None
    rows = []
    for r in conf.get("hybrids") or []:
        if not isinstance(r, dict):
            continue
        t_h = get(r, "median_s.h")
        verdict_ = str(r.get("verdict", "n/a"))
        if r.get("error"):
            verdict_ += f" ({r['error']})"
        speed = r.get("speedup") if isinstance(r.get("speedup"), dict) else {}
        rows.append({"hybrid": str(r.get("name", "n/a")), "change": str(r.get("description", "n/a")),
                     "unit": fmt_value(r.get("unit")),
                     "hybrid per call": fmt_time(t_h * 1e9) if isinstance(t_h, (int, float)) else "n/a",
                     "graph vs A, B": (f"{_speed(speed.get('vs_a'))}, {_speed(speed.get('vs_b'))}"
                                       if speed else "n/a"),
                     "recovered [95%]": fmt_recovered(r.get("recovered")),
                     "of": _against(r) if r.get("recovered") else "n/a",
                     "whole-graph share [95%]": fmt_recovered(r.get("recovered_graph", r.get("recovered"))),
                     "verdict": verdict_, "state": str(r.get("verdict", "")),
                     "sentence": str(r.get("sentence", ""))})
    return {"rule": str(conf.get("rule") or "rule not recorded"), "formula": conf.get("formula"),
            "rows": rows, "notes": [str(n) for n in conf.get("notes") or []]}


# --- per-kernel facts from the profiles and catalogs --------------------------------------------

def _resolve(path: str, base: Path | None) -> str | None:
    """The profile path as given (relative to where compare ran), else relative to
    attribution.json's directory or one of its parents (a repository root)."""
    file, sep, seg = path.rpartition("#") if "#" in path else (path, "", "")
    if not Path(file).is_file() and Path(path).is_file():
        file, sep, seg = path, "", ""  # a '#' that is part of the file name
    roots = [Path(".")] + ([base.resolve(), *base.resolve().parents] if base is not None else [])
    for root in roots:
        candidate = root / file
        if candidate.is_file():
            return f"{candidate}{sep}{seg}"
    return None


def _mode(values: list) -> Any:
    values = [v for v in values if v is not None]
    return max(set(values), key=values.count) if values else None


def _events(path: str):
    """Events of an older attribution's profile, cut into calls the way compare cuts them."""
    from rootcause.compare import profile_events
    from rootcause.profilers import split_calls

    ev = profile_events(path, None, [], "")
    if (ev["call"] < 0).all():
        ev = split_calls(ev)
    return ev[ev["call"] >= 0]


def _int_or_none(x: Any) -> int | None:
    try:
        return None if x is None or x != x else int(x)  # NA != NA
    except (TypeError, ValueError):
        return None


def _stats(ev) -> list[dict[str, Any]]:
    """Per kernel: launches and time per call, most common launch shape and resources."""
    import pandas as pd

    n_calls = max(1, ev["call"].nunique())
    rows = []
    per_call = ev.groupby(["kernel", "call"])["duration_ns"].sum()
    for name, g in ev.groupby("kernel", sort=False):
        def col(c):
            return [_int_or_none(x) for x in g[c]] if c in g.columns else []
        grid = _mode([tuple(r) for r in zip(col("grid_x"), col("grid_y"), col("grid_z")) if None not in r])
        block = _mode([tuple(r) for r in zip(col("block_x"), col("block_y"), col("block_z")) if None not in r])
        rows.append({"kernel": str(name), "launches_per_call": len(g) / n_calls,
                     "duration_ns": float(g["duration_ns"].median()),
                     "time_per_call_ns": float(pd.Series(per_call.loc[name]).median()),
                     "grid": list(grid) if grid else None, "block": list(block) if block else None,
                     "registers": _mode(col("registers")), "shared_bytes": _mode(col("shared_bytes")),
                     "local_bytes": _mode(col("local_bytes"))})
    return rows


def profiles(doc: dict[str, Any], base: Path | None) -> dict[str, dict[str, Any]]:
    """Per variant: {'kernels': [...], 'timeline': {...} | None, 'error': str | None}."""
    out: dict[str, dict[str, Any]] = {}
    given_kernels = doc.get("kernels") if isinstance(doc.get("kernels"), list) else None
    for v in "ab":
        entry: dict[str, Any] = {"kernels": None, "timeline": get(doc, f"timeline.{v}"), "error": None}
        if given_kernels is not None:
            entry["kernels"] = [k for k in given_kernels if isinstance(k, dict) and k.get("variant") == v]
        if entry["kernels"] is None or entry["timeline"] is None:
            path = get(doc, f"variants.{v}.profile")
            resolved = _resolve(path, base) if isinstance(path, str) else None
            if resolved is None:
                entry["error"] = (f"profile {path!r} not found" if path else
                                  "attribution.json names no profile")
            else:
                try:
                    ev = _events(resolved)
                    entry["kernels"] = entry["kernels"] if entry["kernels"] is not None else _stats(ev)
                    entry["timeline"] = entry["timeline"] or one_call(ev)
                except (UsageError, ParseError, ValueError, KeyError) as err:
                    entry["error"] = f"profile {path}: {err}"
        out[v] = entry
    return out


def catalogs(doc: dict[str, Any], base: Path | None) -> dict[str, dict[str, Any]]:
    """Per variant: {'kernels': {name: CatalogKernel dict}, 'manifest': {...}, 'error': ...}."""
    from rootcause.compare import load_catalog

    out = {}
    for v in "ab":
        path = get(doc, f"variants.{v}.catalog")
        entry: dict[str, Any] = {"kernels": {}, "manifest": {}, "error": None}
        if not path:
            entry["error"] = "no catalog (bundle manifest) was given to compare"
        else:
            p = Path(path)
            if not p.exists() and base is not None:
                p = next((r / path for r in (base.resolve(), *base.resolve().parents) if (r / path).exists()), p)
            try:
                kernels, manifest = load_catalog(str(p))
                for k in kernels or []:
                    entry["kernels"].setdefault(k.name, k.to_dict())
                    entry["kernels"].setdefault(re.sub(r"_kernel\d*$", "", k.name), k.to_dict())
                entry["manifest"] = manifest
            except UsageError as err:
                entry["error"] = str(err)
        out[v] = entry
    return out


def schedule_text(cat: dict[str, Any] | None) -> str | None:
    """TVM rule, or IREE pipeline / workgroup / subgroup / lowering_config, in one line."""
    sched = (cat or {}).get("schedule") or {}
    parts = []
    for key in ("rule", "pipeline", "workgroup_size", "subgroup_size"):
        if sched.get(key) not in (None, [], {}):
            parts.append(f"{key} {fmt_value(sched[key])}" if key != "rule" else str(sched[key]))
    lc = sched.get("lowering_config")
    if isinstance(lc, dict) and lc:
        parts.append("lowering_config " + ", ".join(f"{k}={v}" for k, v in lc.items()))
    elif lc:
        parts.append(f"lowering_config {lc}")
    return "; ".join(parts) or None


def device(doc: dict[str, Any], given: str | None = None, env: dict[str, Any] | None = None) -> str | None:
    """A rootcause.gpus.DEVICES key: the one given, attribution's 'device', or the GPU named in
    the environment ('NVIDIA H200' -> 'H200')."""
    from rootcause.compare import env_gpu_names, find_device

    return find_device(given, doc.get("device"), *env_gpu_names(env or doc.get("environment") or {}))


def occupancy(dev: str | None, row: dict[str, Any], cat: dict[str, Any] | None) -> tuple[str | None, str | None]:
    """(theoretical occupancy, limiter) of one kernel on the device, from rootcause.gpus."""
    from rootcause import gpus

    if dev is None or not row.get("block"):
        return None, None
    res = (cat or {}).get("resources") or {}
    regs = row.get("registers") if row.get("registers") is not None else res.get("registers")
    smem = row.get("shared_bytes") if row.get("shared_bytes") is not None else res.get("shared_bytes")
    if regs is None:
        return None, None
    arch = gpus.DEVICES[dev][0]
    threads = 1
    for d in row["block"]:
        threads *= int(d)
    try:
        occ = gpus.occupancy(arch, threads, int(regs), int(smem or 0))
    except (ValueError, KeyError):
        return None, None
    return f"{occ.occupancy:.0%}", occ.limiter


RESOURCE_COLUMNS = ("launches", "time/call", "grid", "block", "registers", "shared B", "local B",
                    "occupancy", "limiter", "schedule")


def kernel_index(prof: dict) -> dict[str, dict[str, dict[str, Any]]]:
    """variant -> kernel name -> its launch facts (profiles()' 'kernels' rows)."""
    return {v: {k["kernel"]: k for k in (prof[v]["kernels"] or [])} for v in "ab"}


def resource_rows(unit: dict[str, Any], index: dict, cats: dict, dev: str | None) -> list[dict[str, Any]]:
    """One row per kernel of the unit (A then B), each cell a string; 'changed' names the
    columns whose value differs from the other variant's dominant kernel. index: kernel_index()."""
    rows = []
    for v in "ab":
        stats = index[v]
        for name in unit[f"kernels_{v}"]:
            s = stats.get(name, {"kernel": name})
            cat = cats[v]["kernels"].get(name) or cats[v]["kernels"].get(re.sub(r"_kernel\d*$", "", name))
            res = (cat or {}).get("resources") or {}
            occ, lim = occupancy(dev, s, cat)
            regs = s.get("registers") if s.get("registers") is not None else res.get("registers")
            smem = s.get("shared_bytes") if s.get("shared_bytes") is not None else res.get("shared_bytes")
            local = s.get("local_bytes") if s.get("local_bytes") is not None else res.get("local_bytes")
            cells = {"launches": fmt_value(round(s["launches_per_call"], 2)) if "launches_per_call" in s else "n/a",
                     "time/call": fmt_time(s.get("time_per_call_ns")),
                     "grid": fmt_dims(s.get("grid") or (cat or {}).get("launch", {}).get("grid")),
                     "block": fmt_dims(s.get("block") or (cat or {}).get("launch", {}).get("block")),
                     "registers": fmt_value(regs), "shared B": fmt_value(smem), "local B": fmt_value(local),
                     "occupancy": occ or "n/a", "limiter": lim or "n/a",
                     "schedule": schedule_text(cat) or "n/a"}
            rows.append({"variant": v, "kernel": name, "time": s.get("time_per_call_ns") or 0.0,
                         "cells": cells, "changed": set(), "dominant": False})
    dominant = {}
    for v in "ab":
        mine = [r for r in rows if r["variant"] == v]
        if mine:
            top = max(mine, key=lambda r: r["time"])
            top["dominant"] = True
            dominant[v] = top
    for r in rows:
        other = dominant.get("b" if r["variant"] == "a" else "a")
        if other is None:
            continue
        r["changed"] = {c for c in RESOURCE_COLUMNS if c not in ("launches", "time/call")
                        and r["cells"][c] != other["cells"][c]}
    return rows


# --- environment ----------------------------------------------------------------------------

def _snapshots(env: Any) -> list[dict[str, Any]]:
    """The NVML snapshots of an env.json ({'before': {...}, 'after': {...}}) or one snapshot."""
    if not isinstance(env, dict):
        return []
    if "gpus" in env:
        return [env]
    return [s for s in env.values() if isinstance(s, dict) and "gpus" in s]


def environment(doc: dict[str, Any], base: Path | None, cats: dict) -> dict[str, Any]:
    """{'snapshots': {name: {...}}, 'versions': {...}, 'measurement': ..., 'source': str}."""
    env, source = doc.get("environment"), "attribution.json"
    measurement = doc.get("measurement") if isinstance(doc.get("measurement"), dict) else None
    if not env:
        env, source = None, "not available"
        for v in "ab":
            path = get(doc, f"variants.{v}.profile")
            resolved = _resolve(path, base) if isinstance(path, str) else None
            if resolved is None:
                continue
            folder = Path(resolved.partition("#")[0]).parent
            if (folder / "env.json").is_file():
                try:
                    env = json.loads((folder / "env.json").read_text())
                    source = str(folder / "env.json")
                except (OSError, json.JSONDecodeError):
                    env = None
                if measurement is None and (folder / "measurement.json").is_file():
                    try:
                        m = json.loads((folder / "measurement.json").read_text())
                        measurement = m.get("measurement") if isinstance(m, dict) else None
                    except (OSError, json.JSONDecodeError):
                        pass
                break
    snaps = {}
    if isinstance(env, dict):
        snaps = ({"snapshot": env} if "gpus" in env else
                 {k: s for k, s in env.items() if isinstance(s, dict) and "gpus" in s})
    versions = {}
    for v in "ab":
        for k, ver in (cats[v]["manifest"].get("versions") or {}).items():
            versions.setdefault(k, set()).add(str(ver))
    return {"env": env, "snapshots": snaps, "source": source, "measurement": measurement,
            "versions": {k: " / ".join(sorted(s)) for k, s in versions.items()},
            "rootcause_version": doc.get("rootcause_version")}


def snapshot_line(name: str, s: dict[str, Any]) -> str:
    """'before (2026-12-02T14:28:35Z): NVIDIA H200, SM 345 MHz, mem 3201 MHz, 35 C, GpuIdle'."""
    parts = []
    for g in s.get("gpus") or []:
        if not isinstance(g, dict):
            continue
        text = str(g.get("name", "GPU"))
        if g.get("sm_clock_mhz") is not None:
            text += f", SM {g['sm_clock_mhz']} MHz"
            if g.get("sm_clock_max_mhz"):
                text += f" (max {g['sm_clock_max_mhz']})"
        if g.get("mem_clock_mhz") is not None:
            text += f", memory {g['mem_clock_mhz']} MHz"
        if g.get("temperature_c") is not None:
            text += f", {g['temperature_c']} C"
        if g.get("power_w") is not None:
            text += f", {g['power_w']:.0f} W"
        reasons = g.get("clock_event_reasons")
        if reasons:
            text += f", clock reasons {', '.join(map(str, reasons))}"
        parts.append(text)
    when = s.get("time_utc")
    return f"{name}{f' ({when})' if when else ''}: " + ("; ".join(parts) or "no GPU listed")


def host_line(env: dict[str, Any]) -> str | None:
    snaps = _snapshots(env)
    if not snaps:
        return None
    s = snaps[0]
    bits = [f"{k} {s[k]}" for k in ("driver", "cuda_driver_version", "python", "platform") if s.get(k)]
    return ", ".join(bits).replace("cuda_driver_version", "CUDA") or None


def reproduce_command(doc: dict[str, Any]) -> str:
    """The `rootcause compare` command that wrote this attribution (from its variants)."""
    if isinstance(doc.get("command"), str):
        return doc["command"]
    args = ["rootcause", "compare", str(get(doc, "variants.a.profile", "PROFILE_A")),
            str(get(doc, "variants.b.profile", "PROFILE_B"))]
    for v in "ab":
        if get(doc, f"variants.{v}.catalog"):
            args += [f"--catalog-{v}", str(get(doc, f"variants.{v}.catalog"))]
        args += [f"--label-{v}", label(doc, v)]
    if doc.get("device"):
        args += ["--device", str(doc["device"])]
    args += ["--out", "DIR"]
    import shlex
    text = " ".join(shlex.quote(a) for a in args)
    if get(doc, "whole_graph.source") == "measured":
        text += "  # plus --measurement FILE (its path is not recorded in attribution.json)"
    return text
