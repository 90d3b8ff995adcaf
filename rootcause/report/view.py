"""What a report shows, read from an attribution document (rootcause.artifacts.attribution).

Pure: the document in, plain values out; no file is read here (artifacts.attribution.load
migrates older files before they get here). Keys that may be absent (findings, environment,
closure, a unit's share or method, the 'kernels', 'timeline', 'device', 'measurement',
'command', 'confirmation' and 'catalogs' sections) are shown as 'not available', never guessed.
Schedule facts (TVM rule, IREE pipeline and lowering_config) come from the 'catalogs' section.
"""
from __future__ import annotations

import re
from typing import Any

from rootcause.names import cut, short
from rootcause.stats import CONFIRM_THRESHOLD, CPU_MIN_EFFECT_SHARE, MIN_EFFECT_SHARE





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


# --- verdict ----------------------------------------------------------------------------------

def verdict(doc: dict[str, Any]) -> dict[str, Any]:
    """Which variant is faster, by how much (ratio with the pair's own interval where A and B were
    timed side by side, else the conservative one of the two intervals), the closure."""
    w, significance = doc["whole_graph"], _section(doc, "significance")
    A, B = label(doc, "a"), label(doc, "b")
    a, b = w["a"], w["b"]
    significant = w.get("significant")
    delta = w["delta_ns"]["median"]
    b_slower = delta > 0
    slow, fast = (b, a) if b_slower else (a, b)
    ratio = slow["median"] / fast["median"] if fast["median"] else None
    lo = hi = None
    paired = w.get("ratio_b_over_a")
    if isinstance(paired, dict) and paired.get("low", 0) > 0:  # A and B timed side by side: the pair's own
        lo, hi = (paired["low"], paired["high"]) if b_slower else (1 / paired["high"], 1 / paired["low"])
    elif all(isinstance(x.get(k), (int, float)) for x in (slow, fast) for k in ("low", "high")) and fast["low"] > 0:
        # no joint samples: the widest ratio of the two intervals, as attribute does for the delta
        lo, hi = slow["low"] / fast["high"], slow["high"] / fast["low"]
    return {"a": A, "b": B, "significant": significant, "slower": B if b_slower else A,
            "faster": A if b_slower else B, "ratio": ratio, "ratio_low": lo, "ratio_high": hi,
            "time_a": a, "time_b": b, "delta": w["delta_ns"], "source": w.get("source", "not available"),
            "basis": w.get("basis") if isinstance(w.get("basis"), dict) else None,
            "source_note": w.get("note"), "closure": doc.get("closure"), "undetermined": w.get("undetermined"),
            "unit_sum_ns": w.get("unit_delta_sum_ns"), "residual": doc["residual"]["delta_ns"],
            "min_effect_ns": significance.get("whole_min_effect_ns") or significance.get("min_effect_ns")}


def _within_threshold(v: dict[str, Any]) -> str:
    """' (its interval lies within the practical threshold of 530 ns either way)' where that is
    what the verdict rests on (verdict.require_clear_of_floor: no difference that large, whether or
    not the interval holds 0); else '' (no threshold in the document, or one written before the
    rule whose interval reaches past it)."""
    d, floor = v["delta"], v.get("min_effect_ns")
    if not isinstance(floor, (int, float)) or floor <= 0 or not all(
            isinstance(d.get(k), (int, float)) for k in ("low", "high")):
        return ""
    if -floor < d["low"] and d["high"] < floor:
        return f" (its interval lies within the practical threshold of {fmt_time(floor)} either way)"
    return ""


SOURCES = {"measured": "measured", "profiled-span": "profiled span", "profiler-steps": "ProfilerStep wall time",
           "loader-iterations": "iteration wall time, data-loader fetch to fetch",
           "annotation-iterations": "iteration wall time, annotation to annotation",
           "graph-launches": "iteration wall time, graph launch to graph launch",
           "optimizer-steps": "iteration wall time, optimizer step to optimizer step",
           "launch-interval": "launch-to-launch interval, host included",
           "call-interval": "call-to-call interval, host included"}


def verdict_sentence(v: dict[str, Any]) -> str:
    """One plain-text line, the first thing both reports say."""
    times = f"{fmt_time(v['time_b']['median'])} vs {fmt_time(v['time_a']['median'])} per graph call"
    source = SOURCES.get(v["source"], str(v["source"]))
    basis = v.get("basis") or {}
    if basis.get("a") and basis.get("b") and basis["a"] != basis["b"]:  # each side's own, named
        source = (f"{v['a']}: {SOURCES.get(basis['a'], basis['a'])}; "
                  f"{v['b']}: {SOURCES.get(basis['b'], basis['b'])}")
    if v.get("undetermined"):
        text = f"No whole-graph verdict: {v['undetermined']}. {v['b']} against {v['a']}: {times}"
    elif v["significant"] is False or v["ratio"] is None:
        text = f"No significant whole-graph difference between {v['b']} and {v['a']}{_within_threshold(v)}: {times}"
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


def _section(doc: dict[str, Any], key: str) -> dict[str, Any]:
    """A section the schema does not check (significance, run): {} unless it is an object."""
    value = doc.get(key)
    return value if isinstance(value, dict) else {}


def label(doc: dict[str, Any], v: str) -> str:
    return str(doc["variants"][v].get("label") or v.upper())


# --- units ------------------------------------------------------------------------------------

def units_sorted(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return sorted(doc["units"], key=lambda u: -abs(u["delta_ns"]["median"]))


def unit_label(u: dict[str, Any], limit: int = 28) -> str:
    """'#1 pool2d+1 → fused_pool2d_add2': A's kernels, then B's, as the tables order them; a
    model's unit starts with the module it computes: '#3 layers.*.mlp.down: ... → fused_matmul5_add4'."""
    def side(ks: list[str]) -> str:
        if not ks:
            return "-"
        head = re.sub(r"_kernel\d*$", "", ks[0])
        return short(head, limit) + (f"+{len(ks) - 1}" if len(ks) > 1 else "")
    if u.get("members"):  # a repeated module's units (group_repeats): the module says it
        return f"{unit_module(u)[:-2]} ({len(u['members'])} units)"
    return f"#{u['unit']} {unit_module(u)}{side(u['kernels_a'])} → {side(u['kernels_b'])}"


def unit_module(u: dict[str, Any]) -> str:
    """'layers.*.mlp.down x8: ' (the unit's innermost common module, its first when several, and how
    many of the model's repeats it computes), 'layers.3.mlp.down: ' where it computes one of them,
    'layers.*.attn.k x8 +1 module: ' where its kernels compute other modules too (module_paths lists
    them), or ''."""
    paths = u.get("module_paths") or []
    if not paths:
        return ""
    repeats, instances, more = u.get("repeats") or 1, u.get("instances") or [], len(paths) - 1
    first = instances[0] if len(instances) == 1 else paths[0]
    extra = f" +{more} module{'s' if more > 1 else ''}" if more else ""
    return f"{first}{f' x{repeats}' if repeats > 1 else ''}{extra}: "


def unit_cell(u: dict[str, Any]) -> str:
    """A table's unit cell: its number, then its module ('4 layers.*.mlp.down x8')."""
    return f"{u['unit']} {unit_module(u)[:-2]}".rstrip()


def group_repeats(units: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows the report lists: each unit, except that the units of one repeated module (the same
    module_paths, a '*' in them: a compiler that gives each layer its own kernels makes one unit a
    layer) become one row. A group row sums its members' medians (no interval: the members' own
    intervals and significance stay in their rows of attribution.json); 'members' holds them."""
    by_module: dict[Any, list[dict[str, Any]]] = {}
    for u in units:
        paths = tuple(u.get("module_paths") or ())
        by_module.setdefault(paths if any("*" in p for p in paths) else id(u), []).append(u)
    rows = [group[0] if len(group) == 1 else _group(group) for group in by_module.values()]
    return sorted(rows, key=lambda r: -abs(r["delta_ns"]["median"]))


def _summed(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The rows' medians summed (no interval) and their kernels: a group's or 'other's numbers."""
    sums = {key: {"median": sum(r[key]["median"] for r in rows)} for key in ("time_a_ns", "time_b_ns", "delta_ns")}
    return {**sums, "kernels_a": [k for r in rows for k in r["kernels_a"]],
            "kernels_b": [k for r in rows for k in r["kernels_b"]]}


def _group(members: list[dict[str, Any]]) -> dict[str, Any]:
    shares = [m.get("share") for m in members]
    significant = sum(1 for m in members if m.get("significant"))
    # the module's instances the members compute: a trace's units are one op of one instance each
    # (6 units a layer's attention), a compiler's one layer each
    instances = {p for m in members for p in m.get("instances") or ()}
    repeats = len(instances) if all(m.get("instances") for m in members) else \
        sum(m.get("repeats") or 1 for m in members)
    return {"unit": f"{members[0]['unit']} +{len(members) - 1}", "members": members,
            "module_paths": members[0]["module_paths"], "repeats": repeats,
            **_summed(members), "share": None if None in shares else sum(shares),
            "method": f"{len(members)} units of one module, {significant} significant"}


def members(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The units behind report rows (group_repeats), in row order."""
    return [m for r in rows for m in (r.get("members") or [r])]


def fold(units: list[dict[str, Any]], top: int) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """The top rows (units or group_repeats' groups) and one 'other' row summing the rest, its
    count in units (None when nothing is folded)."""
    if len(units) <= top:
        return units, None
    rest = units[top:]
    return units[:top], {"unit": None, "count": len(members(rest)), **_summed(rest)}


# --- counterfactual hybrids (rootcause analyze's doc['confirmation']) ------------------------

CONFIRMATION_COLUMNS = ("hybrid", "change", "unit", "hybrid per call", "graph vs A, B", "recovered [95%]", "of",
                        "whole-graph share [95%]", "verdict")


def fmt_recovered(rec: Any) -> str:
    """'62% [48%, 75%]': the share of a delta a hybrid recovers, with its interval."""
    if not isinstance(rec, dict) or not isinstance(rec.get("median"), (int, float)):
        return "n/a"
    if rec.get("shown") is False:
        return "- (delta not significant)"
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
        t_h = (r.get("median_s") or {}).get("h")
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
                     "whole-graph share [95%]": fmt_recovered(r.get("recovered_graph", r.get("recovered"))
                                                              if (r.get("recovered") or {}).get("shown", True)
                                                              else r.get("recovered")),
                     "verdict": verdict_, "state": str(r.get("verdict", "")),
                     "sentence": str(r.get("sentence", ""))})
    return {"rule": str(conf.get("rule") or "rule not recorded"), "formula": conf.get("formula"),
            "rows": rows, "notes": [str(n) for n in conf.get("notes") or []]}


# --- environment ----------------------------------------------------------------------------

def _snapshots(env: Any) -> list[dict[str, Any]]:
    """The NVML snapshots of an env.json ({'before': {...}, 'after': {...}}) or one snapshot."""
    if not isinstance(env, dict):
        return []
    if "gpus" in env:
        return [env]
    return [s for s in env.values() if isinstance(s, dict) and "gpus" in s]


def environment(doc: dict[str, Any], cats: dict) -> dict[str, Any]:
    """{'env', 'snapshots': {name: {...}}, 'versions': {...}, 'measurement', 'source': str}."""
    env = doc.get("environment") or None
    measurement = doc.get("measurement") if isinstance(doc.get("measurement"), dict) else None
    snaps: dict[str, Any] = {}
    if isinstance(env, dict):
        snaps = ({"snapshot": env} if "gpus" in env or "cpu" in env else
                 {k: s for k, s in env.items() if isinstance(s, dict) and ("gpus" in s or "cpu" in s)})
    versions: dict[str, set] = {}
    for v in "ab":
        for k, ver in (cats[v]["versions"] or {}).items():
            versions.setdefault(k, set()).add(str(ver))
    return {"env": env, "snapshots": snaps, "source": "attribution.json" if env else "not available",
            "measurement": measurement, "versions": {k: " / ".join(sorted(s)) for k, s in versions.items()},
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
    cpu = s.get("cpu") if isinstance(s.get("cpu"), dict) else None
    if not parts and cpu:  # a CPU run: the machine and its load, which moves a CPU's times
        text = f"{cpu.get('model') or 'CPU'}, {cpu.get('logical_cpus', '?')} logical CPUs"
        load = cpu.get("loadavg")
        if isinstance(load, list) and load and isinstance(load[0], (int, float)):
            text += f", load average {load[0]:.2f}"
        parts.append(text)
    when = s.get("time_utc")
    return f"{name}{f' ({when})' if when else ''}: " + ("; ".join(parts) or "no GPU listed")


def on_cpu(doc: dict[str, Any]) -> bool:
    """Whether the run behind the report ran on the CPU (an llvm target)."""
    target = _section(doc, "run").get("target")
    return isinstance(target, str) and target.startswith("llvm")


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
    variants = doc["variants"]
    args = ["rootcause", "compare", str(variants["a"].get("profile") or "PROFILE_A"),
            str(variants["b"].get("profile") or "PROFILE_B")]
    for v in "ab":
        if variants[v].get("catalog"):
            args += [f"--catalog-{v}", str(variants[v]["catalog"])]
        args += [f"--label-{v}", label(doc, v)]
    if doc.get("device"):
        args += ["--gpu", str(doc["device"])]
    args += ["--out", "DIR"]
    import shlex
    text = " ".join(shlex.quote(a) for a in args)
    if doc["whole_graph"].get("source") == "measured":
        text += "  # plus --measurement FILE (its path is not recorded in attribution.json)"
    return text


HOST_COLUMNS = ("host op (per step)", "A", "B", "delta (B - A)", "significant")


def host_rows(doc: dict[str, Any], limit: int = 8) -> list[list[str]]:
    """The host section's units as table cells (analysis.host), the largest |delta| first."""
    rows = []
    for u in ((doc.get("host") or {}).get("units") or [])[:limit]:
        rows.append([cut(u["name"], 64), fmt_time(u["a"]["median"]), fmt_time(u["b"]["median"]),
                     fmt_interval(u["delta_ns"]), "yes" if u["significant"] else "no"])
    return rows


def protocol_text(protocol: Any) -> str:
    """A measurement protocol as a reader wants it: 'interleaved, 40 blocks x 5 repeats, 75 warm-up calls
    (2 s), 95% intervals'; a text protocol as it is."""
    if not isinstance(protocol, dict):
        return str(protocol) if protocol else "protocol not recorded"
    parts = ["interleaved"]
    if protocol.get("blocks") is not None and protocol.get("repeats") is not None:
        parts.append(f"{protocol['blocks']} blocks x {protocol['repeats']} repeats")
    if protocol.get("warmup_calls") is not None:
        parts.append(f"{protocol['warmup_calls']} warm-up calls"
                     + (f" ({protocol['warmup_seconds']:g} s)" if isinstance(protocol.get("warmup_seconds"), (int, float)) else ""))
    if isinstance(protocol.get("confidence"), (int, float)):
        parts.append(f"{protocol['confidence']:.0%} intervals")
    return ", ".join(parts)


# What a reader needs to read a report: one line per term, shown by every renderer and the README.
READING_GUIDE = (
    ("delta", "B - A, per graph call; positive means B is slower. Intervals are 95%, from the calls measured."),
    ("unit", "the kernels of A and of B that compute the same ops (joined by provenance, names or shapes, said "
             "as 'aligned by'); a fused kernel and the kernels it replaced are one unit."),
    ("significant", f"a unit's interval excludes 0 and its delta is at least {MIN_EFFECT_SHARE:.0%} of the call; "
                    f"the whole graph's interval lies entirely beyond {MIN_EFFECT_SHARE:.0%} of the call "
                    f"({CPU_MIN_EFFECT_SHARE:.0%} on a CPU). A whole-graph interval inside that threshold either way is "
                    "no significant difference; one across its edge gets no verdict."),
    ("residual", "whole-graph time minus kernel time: launch overhead, gaps between kernels, host work."),
    ("closure", "how much of the whole-graph delta the units and the residual add up to (near 100% when the "
                "attribution accounts for the delta)."),
    ("hybrid", "a counterfactual build: one side with the other side's choice for one unit (a fusion "
               "boundary, a schedule, a configuration), measured with A and B."),
    ("recovered share", "how much of the unit's delta the hybrid reproduces; confirmed when its interval lies "
                        f"above {CONFIRM_THRESHOLD:.0%}, refuted when below."),
)

