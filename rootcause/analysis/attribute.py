"""Attribute the whole-graph delta between two variants to units and a launch/host residual.

Convention: A is the baseline, B the candidate; every delta is B - A (positive: B slower).

Per unit and graph call, the unit's time is the sum of its kernels' durations in that call;
a unit's time per call is the median over calls with a bootstrap interval over calls. Per
variant, the residual is whole-graph time per call minus kernel busy time per call (the
union of kernel intervals): launch overhead, gaps between kernels, host work. Closure =
(sum of unit deltas + residual delta) / whole-graph delta. The whole-graph figure is the
measured latency when a Measurement is given, else the profiled per-call span (first kernel
start to last kernel end), and the output says which.

Bootstrap: the median of a resample of n sorted values is a pair of order statistics whose
ranks do not depend on the values, so resampled ranks are drawn once and applied to every
unit's sorted per-call times (each unit's interval is an exact percentile bootstrap; the
draws are shared across units). A and B are resampled independently (calls are unpaired).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from math import comb
from typing import Any

import numpy as np
import pandas as pd

import rootcause
from rootcause.analysis.align import INSTANCE, Alignment
from rootcause.artifacts.attribution import SCHEMA_VERSION
from rootcause.model import COUNTER_COLUMNS, KERNEL_EVENT_COLUMNS, Interval, MeasuredPair, WholeGraph
from rootcause.profilers import split_calls
from rootcause.stats import (CPU_MIN_EFFECT_SHARE, LEVEL, MIN_EFFECT_SHARE, medians_at_ranks,
                             percentile_interval, quantile, rank_draws)




@dataclass
class Attribution:
    variants: dict[str, dict[str, Any]]
    whole_graph: dict[str, Any]
    units: list[dict[str, Any]]
    residual: dict[str, Any]
    closure: float | None
    kernels: pd.DataFrame  # per (variant, kernel) launch statistics, see KERNEL_STAT_COLUMNS
    findings: list[dict[str, Any]] = field(default_factory=list)
    cannot_conclude: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    environment: dict[str, Any] | None = None
    min_effect_ns: float = 0.0
    whole_min_effect_ns: float = 0.0  # the whole graph's (larger on the CPU)
    timeline: dict[str, Any] | None = None  # per variant: one_call() of its events
    device: str | None = None  # rootcause.gpus.DEVICES key the profiles came from, when known
    device_b: str | None = None  # B's, where B's profile came from another GPU than A's
    measurement: dict[str, Any] | None = None  # where the whole-graph latency came from
    command: str | None = None  # the command line that produced this attribution
    concurrency: dict[str, Any] | None = None  # kernel time hidden by overlap on several streams
    # per unit id and side ('a', 'b'): the unit's ns in each profiled call, per launch as the
    # alignment split it (what the unit rows take medians of; confirmation judges hybrids on it)
    unit_calls_ns: dict[int, dict[str, np.ndarray]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "rootcause_version": rootcause.__version__,
            "delta_convention": "B - A in ns per graph call; positive means B is slower",
            "variants": self.variants,
            "whole_graph": self.whole_graph,
            "units": self.units,
            "residual": self.residual,
            "concurrency": self.concurrency,
            "closure": self.closure,
            "significance": {"rule": "interval excludes 0 and |delta| >= min_effect_ns (the whole graph: "
                                     "whole_min_effect_ns)",
                             "min_effect_ns": self.min_effect_ns, "level": LEVEL,
                             "whole_min_effect_ns": self.whole_min_effect_ns},
            "findings": self.findings,
            "cannot_conclude": self.cannot_conclude,
            "notes": self.notes,
            "environment": self.environment,
            "kernels": kernel_rows(self.kernels),
            "timeline": self.timeline,
            "device": self.device,
            **({"device_b": self.device_b} if self.device_b else {}),
            "measurement": self.measurement,
            "command": self.command,
        }


def _plain(x: Any) -> Any:
    """A JSON value: numpy scalars as Python numbers, NA/NaN as None, tuples as lists."""
    if isinstance(x, (tuple, list, np.ndarray)):
        return [_plain(v) for v in x]
    if x is None or x is pd.NA or (isinstance(x, (float, np.floating)) and np.isnan(x)):
        return None
    return x.item() if isinstance(x, np.generic) else x


def kernel_rows(kernels: pd.DataFrame) -> list[dict[str, Any]]:
    """KERNEL_STAT_COLUMNS rows as plain JSON objects (attribution.json 'kernels')."""
    cols = [c for c in KERNEL_STAT_COLUMNS if c in kernels.columns]
    return [{c: _plain(v) for c, v in zip(cols, row)} for row in kernels[cols].itertuples(index=False)]


def one_call(ev: pd.DataFrame) -> dict[str, Any]:
    """The graph call whose span is the median span, its kernels relative to its first launch
    (attribution.json 'timeline'; ev has 'call' numbered, every row in a call)."""
    spans = ev.groupby("call").agg(s=("start_ns", "min"), e=("end_ns", "max"))
    order = (spans.e - spans.s).sort_values(kind="stable")
    call = int(order.index[(len(order) - 1) // 2])
    g = ev[ev["call"] == call].sort_values("start_ns", kind="stable")
    t0 = int(g["start_ns"].min())
    streams = g["stream"] if "stream" in g.columns else pd.Series([None] * len(g), index=g.index)
    return {"call": call, "calls": int(len(spans)), "kernels": [
        {"kernel": str(k), "start_ns": int(s) - t0, "end_ns": int(e) - t0, "stream": _plain(st)}
        for k, s, e, st in zip(g["kernel"], g["start_ns"], g["end_ns"], streams)]}


KERNEL_STAT_COLUMNS: dict[str, str] = {
    "variant": "'a' or 'b'", "kernel": "kernel name", "unit": "unit id",
    "launches_per_call": "median launches per graph call",
    "duration_ns": "median duration of one launch", "time_per_call_ns": "median per-call sum",
    "grid": "most common (x, y, z) grid", "block": "most common (x, y, z) block",
    "registers": "most common registers per thread (NA when not recorded)",
    "shared_bytes": "most common shared memory per block", "local_bytes": "local bytes/thread",
    **{c: f"median per launch: {KERNEL_EVENT_COLUMNS[c]} (NA without a counter profile)" for c in COUNTER_COLUMNS},
}


def _with_calls(events: pd.DataFrame, label: str, notes: list[str]) -> pd.DataFrame:
    if "call" not in events.columns or (events["call"] < 0).all():
        ev = split_calls(events)
        notes.append(f"variant {label}: events were not split into graph calls; split by the "
                     f"repeating kernel sequence into {ev['call'].nunique()} call(s)")
        if ev["segment"].nunique() > 1:
            notes.append(f"variant {label}: the profile holds {ev['segment'].nunique()} different "
                         f"call signatures (variants?); select one with PROFILE#SEGMENT")
        events = ev
    dropped = int((events["call"] < 0).sum())
    if dropped:
        notes.append(f"variant {label}: {dropped} launch(es) outside any graph call ignored")
    return events[events["call"] >= 0]


def _interval(point: np.ndarray, boot: np.ndarray) -> list[Interval]:
    lo, hi = percentile_interval(boot)
    return [Interval(float(p), float(a), float(b)) for p, a, b in zip(point, lo, hi)]


def _earlier_end(ev: pd.DataFrame, first: int) -> tuple[pd.DataFrame, np.ndarray]:
    """The events sorted by call and start, and per launch the latest end of its call's earlier
    launches (`first` for a call's first launch). int64 throughout: epoch-ns timestamps (~1.8e18)
    lose ~256 ns as float64."""
    order = ev.sort_values(["call", "start_ns"], kind="stable")
    prev_end = (order.groupby("call")["end_ns"].cummax().astype("int64")
                .groupby(order["call"]).shift(fill_value=first))
    return order, prev_end.to_numpy(dtype="int64")


def _busy_per_call(ev: pd.DataFrame) -> pd.Series:
    """Union of kernel intervals per call (concurrent kernels are not double-counted)."""
    order, prev_end = _earlier_end(ev, np.iinfo(np.int64).min)
    begin = np.maximum(order["start_ns"].to_numpy(dtype="int64"), prev_end)
    covered = np.clip(order["end_ns"].to_numpy() - begin, 0, None)
    return pd.Series(covered, index=order.index).groupby(order["call"]).sum()


def _covered_in_group(ev: pd.DataFrame, group: np.ndarray) -> np.ndarray:
    """Per launch, in the events' order: the time it adds to the union of its group's launches
    (a unit's launches within one call): its duration less what earlier-starting launches of the
    group already cover. A unit whose kernels run concurrently (IREE's task system running two
    dispatches of one executable side by side, two streams) takes the time it occupies, not the
    sum; overlap between units stays the concurrency line's."""
    start = ev["start_ns"].to_numpy(dtype="int64")
    end = ev["end_ns"].to_numpy(dtype="int64")
    order = np.lexsort((start, group))
    g, st, en = group[order], start[order], end[order]
    prev_end = pd.Series(en).groupby(g).cummax().groupby(g).shift(fill_value=np.iinfo(np.int64).min)
    covered = np.clip(en - np.maximum(st, prev_end.to_numpy(dtype="int64")), 0, None).astype("float64")
    out = np.empty(len(order), dtype="float64")
    out[order] = covered
    return out


def _idle_before(ev: pd.DataFrame) -> np.ndarray:
    """Per launch, in the events' order: the device's idle time before it within its call (its start
    less the latest end of the call's earlier launches; 0 for a call's first launch or a launch
    that overlaps one before it). What the host did between two launches shows here."""
    order, prev_end = _earlier_end(ev, np.iinfo(np.int64).max)
    idle = np.clip(order["start_ns"].to_numpy(dtype="int64") - prev_end, 0, None)
    return pd.Series(idle.astype("float64"), index=order.index).reindex(ev.index).to_numpy()


def _span_per_call(ev: pd.DataFrame) -> pd.Series:
    g = ev.groupby("call")
    return (g["end_ns"].max() - g["start_ns"].min()).astype("float64")


LAUNCH_COLUMNS = ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z", "registers", "shared_bytes",
                  "local_bytes")


def most_common_launch(ev: pd.DataFrame, codes: np.ndarray) -> pd.DataFrame:
    """Per kernel code: the launch columns of its most common launch (the whole tuple of grid,
    block, registers, shared and local bytes; ties go to the one launched first). The one
    definition of a kernel's launch that tables, reports and rules use."""
    cols = [c for c in LAUNCH_COLUMNS if c in ev.columns]
    frame = ev[cols].reset_index(drop=True).assign(_code=codes, _order=np.arange(len(ev)))
    keys = ["_code", *cols]
    groups = frame.groupby(keys, dropna=False, sort=False)["_order"].agg(["size", "min"]).reset_index()
    groups = groups.sort_values(["_code", "size", "min"], ascending=[True, False, True], kind="stable")
    return groups.drop_duplicates("_code").set_index("_code")[cols]


def _kernel_stats(ev: pd.DataFrame, variant: str, codes: np.ndarray, names: np.ndarray,
                  unit_of: dict[str, int], call_idx: np.ndarray, n_calls: int) -> pd.DataFrame:
    """Per kernel: launches and time per call, median launch, launch config of its most common launch."""
    n_k = len(names)
    dur = ev["duration_ns"].to_numpy(dtype="float64")
    per_call = np.bincount(codes * n_calls + call_idx, weights=dur, minlength=n_k * n_calls)
    base = [k.rpartition(INSTANCE)[0] or k for k in names]
    stats = pd.DataFrame({
        "variant": variant, "kernel": base, "unit": [unit_of[k] for k in names],
        "launches_per_call": np.bincount(codes, minlength=n_k) / n_calls,
        "duration_ns": pd.Series(dur).groupby(codes).median().reindex(range(n_k)).to_numpy(),
        "time_per_call_ns": np.median(per_call.reshape(n_k, n_calls), axis=1),
    })
    head = most_common_launch(ev, codes).reindex(range(n_k))
    for col in ("grid", "block"):
        cols = [f"{col}_{a}" for a in "xyz"]
        if set(cols) <= set(head.columns):
            stats[col] = [None if pd.isna(r).any() else tuple(int(x) for x in r)
                          for r in head[cols].to_numpy(dtype=object)]
        else:
            stats[col] = None
    for col in ("registers", "shared_bytes", "local_bytes"):
        stats[col] = head[col].to_numpy() if col in head.columns else None
    for col in COUNTER_COLUMNS:
        values = ev[col].astype("Float64") if col in ev.columns else None
        counted = values is not None and values.notna().any()
        stats[col] = (values.groupby(codes).median().reindex(range(n_k)).to_numpy(dtype=float, na_value=np.nan)
                      if counted else np.nan)
    return stats


def profiled_call_ns(ev: pd.DataFrame) -> float | None:
    """A call as profiled where the profiler runs the calls back to back: the median call's busy
    time plus the time outside kernels between calls (a call's first launch to the next call's,
    less its busy time: launches, gaps, the host between calls) at its FLOOR_QUANTILE. On a loaded
    CPU most gaps between calls can hold a stall of milliseconds (the runtime's threads waiting for
    a core), which is the machine's, not the code's: the loop's own gap is the low one. None under
    three calls."""
    starts = ev.groupby("call")["start_ns"].min().sort_index()
    if len(starts) < 3:
        return None
    busy = _busy_per_call(ev).reindex(starts.index).to_numpy(dtype="float64")
    outside = np.diff(starts.to_numpy(dtype="float64")) - busy[:-1]
    return float(np.median(busy) + max(quantile(outside, FLOOR_QUANTILE), 0.0))


def _scaled_to(ev: pd.DataFrame, whole: WholeGraph, label: str, notes: list[str],
               timed: tuple[float, str] | None = None) -> pd.DataFrame:
    """Kernel times of a profile taken apart from the measurement, scaled to the measurement (module
    doc of attribute). timed: the profile session's own call in ns and how it was timed (its calls
    timed without the profiler, or the period of calls the profiler ran back to back): scaled by
    the measured latency over it, so that the residual is the time the profile shows outside
    kernels, scaled alike, and a profile that disagrees with the measurement is said to, by how
    much. Without it, down to the measured latency when the median call's busy time exceeds it."""
    busy = float(_busy_per_call(ev).median())
    if timed:
        own, how = timed
        s = whole.median_ns / own
        agree = ("they agree within the measured interval" if whole.low_ns <= own <= whole.high_ns else
                 f"the profile disagrees with the measurement by {(own - whole.median_ns) / 1e3:+.1f} us "
                 f"({own / whole.median_ns - 1:+.0%}; the machine's speed then against during the measurement)")
        note = (f"variant {label}: profiled apart from the measurement; the profile session's calls took "
                f"{own / 1e3:.1f} us ({how}) against the measured {whole.median_ns / 1e3:.1f} us "
                f"[{whole.low_ns / 1e3:.1f}, {whole.high_ns / 1e3:.1f}]: {agree}; its kernel times are scaled by "
                f"{s:.3f} to the measurement, so the residual is the profile's own time outside kernels "
                f"({max(own - busy, 0.0) / 1e3:.1f} us a call as profiled), scaled alike")
    elif busy > whole.median_ns:
        s = whole.median_ns / busy
        note = (f"variant {label}: the profiled kernels take {busy / 1e3:.1f} us per call, more than the "
                f"measured {whole.median_ns / 1e3:.1f} us (the profiler's instrumented calls ran slower than "
                f"the timed ones): kernel times scaled by {s:.3f} to the measurement, shares kept; its "
                "residual (host, gaps) is not measured")
    else:
        return ev
    t0 = ev.groupby("call")["start_ns"].transform("min")
    start = t0 + ((ev["start_ns"] - t0) * s).round().astype("int64")
    dur = (ev["duration_ns"] * s).round().astype("int64")
    notes.append(note)
    return ev.assign(start_ns=start, end_ns=start + dur, duration_ns=dur)


def _as_profiled(att: Attribution, raw: Attribution) -> None:
    """A unit of sides scaled to their measured latencies (each by its own factor) stays significant
    only where the kernel times as profiled show the delta too, with its sign: the factors come from
    two measured medians, which a loaded machine can put apart while the kernels are alike. Two
    builds of one TVM graph, scaled by 1.057 and 1.037, put their one kernel 1.6% apart in both pairs
    of profiles; as profiled, the kernels were 75 ns apart, not significant."""
    as_profiled = {u["unit"]: u for u in raw.units}
    for u in att.units:
        r = as_profiled.get(u["unit"])
        if not u["significant"] or (r is not None and r["significant"]
                                    and (r["delta_ns"]["median"] > 0) == (u["delta_ns"]["median"] > 0)):
            continue
        u["significant"] = False
        names = " + ".join(u["kernels_b"] or u["kernels_a"])[:80]
        seen = "no such unit" if r is None else _delta_text(r["delta_ns"]) + ("" if r["significant"] else
                                                                            " (not significant)")
        att.cannot_conclude.append(
            f"unit {u['unit']} ({names}): {_delta_text(u['delta_ns'])} once scaled to the measured latencies, "
            f"but {seen} as profiled: the difference comes from the two sides' scale factors, not from the "
            "kernels, so it is not called significant")


def _unit_keys(alignment: Alignment, v: str, ev: pd.DataFrame) -> tuple[dict[str, int], np.ndarray]:
    """(alignment key -> unit, each event's key): the kernel name, or KERNEL#@i for the i-th
    launch in its call of a kernel the alignment split per source op."""
    rows = alignment.kernels[alignment.kernels.variant == v]
    unit_of: dict[str, int] = {}
    split: dict[str, int] = {}
    for kernel, unit, instance in zip(rows.kernel, rows.unit, rows.instance):
        if instance is None or pd.isna(instance):
            unit_of[kernel] = unit
        else:
            unit_of[f"{kernel}{INSTANCE}{int(instance)}"] = unit
            split[kernel] = split.get(kernel, 0) + 1
    keys = ev["kernel"].astype(str).to_numpy(dtype=object)
    if split:
        order = ev.sort_values("start_ns", kind="stable").groupby(["call", "kernel"]).cumcount()
        ordinal = order.reindex(ev.index).to_numpy()
        keys = np.array([f"{k}{INSTANCE}{o % split[k]}" if k in split else k
                         for k, o in zip(keys, ordinal)], dtype=object)
    return unit_of, keys


def _ival(x: Interval) -> dict[str, float]:
    return x.to_dict()


def attribute(events_a: pd.DataFrame, events_b: pd.DataFrame, alignment: Alignment,
              whole_a: WholeGraph | None = None, whole_b: WholeGraph | None = None,
              labels: tuple[str, str] = ("A", "B"), n_boot: int = 2000, seed: int = 0,
              environment: dict[str, Any] | None = None, scale_to_whole: tuple[str, ...] = (),
              timed_apart: dict[str, float] | None = None, timed_how: dict[str, str] | None = None,
              whole_min_effect_share: float = MIN_EFFECT_SHARE,
              measured_pair: MeasuredPair | None = None) -> Attribution:
    """Per-unit times and deltas, residual and closure (module doc). `whole_a`/`whole_b`:
    measured whole-graph latency per variant; both or neither. scale_to_whole: the variants
    ('a', 'b') profiled apart from their measurement (a CPU profiler's instrumented calls):
    when their kernels' busy time per call exceeds the measured latency, kernel times are
    scaled down to it (shares kept, said in the notes). timed_apart: per such variant, the median ns
    of the profile session's own calls (timed_how: how they were timed; default without the
    profiler): the kernel times are then scaled
    by the measured latency over it, and closure outside CLOSURE_BAND says why in cannot_conclude.
    whole_min_effect_share: the share of A's whole-graph time the whole-graph delta must reach to
    be significant (a unit's: MIN_EFFECT_SHARE); the CPU's is larger. measured_pair: where the
    measurement timed A and B side by side, the delta's own interval (else the whole-graph delta's
    interval is the difference of the two intervals, which cannot pair them)."""
    if (whole_a is None) != (whole_b is None):
        raise ValueError("give the whole-graph measurement of both variants or of neither")
    notes: list[str] = list(alignment.notes)
    rng = np.random.default_rng(seed)
    evs = {"a": _with_calls(events_a, labels[0], notes), "b": _with_calls(events_b, labels[1], notes)}
    for v, whole in (("a", whole_a), ("b", whole_b)):
        if v in scale_to_whole and whole is not None:
            own = (timed_apart or {}).get(v)
            timed = (own, (timed_how or {}).get(v) or "timed without the profiler") if own else None
            evs[v] = _scaled_to(evs[v], whole, labels[0 if v == "a" else 1], notes, timed)
    unit_ids = alignment.units["unit"].to_numpy()
    per = {}
    k = len(unit_ids)
    for v, ev in evs.items():
        unit_of, keys = _unit_keys(alignment, v, ev)
        codes, names = pd.factorize(keys)
        names = np.asarray([str(n) for n in names], dtype=object)
        missing = [n for n in names if n not in unit_of]
        if missing:
            raise ValueError(f"variant {v}: kernels not in the alignment: {missing[:3]}")
        pos = {u: j for j, u in enumerate(unit_ids)}
        unit_pos = np.array([pos[unit_of[n]] for n in names], dtype=np.int64)[codes]
        calls, call_idx = np.unique(ev["call"].to_numpy(), return_inverse=True)
        n = len(calls)
        flat = call_idx * k + unit_pos
        times = np.bincount(flat, weights=_covered_in_group(ev, flat), minlength=n * k)
        launches = np.bincount(flat, minlength=n * k)
        ev = ev.assign(call=call_idx)
        idle = np.bincount(flat, weights=_idle_before(ev), minlength=n * k)
        per[v] = {
            "times": times.reshape(n, k), "launches": launches.reshape(n, k), "idle": idle.reshape(n, k),
            "busy": _busy_per_call(ev).reindex(range(n)).to_numpy(dtype="float64"),
            "span": _span_per_call(ev).reindex(range(n)).to_numpy(dtype="float64"),
            "count": np.bincount(call_idx, minlength=n),
            "ranks": rank_draws(n, n_boot, rng), "n": n,
            "stats": _kernel_stats(ev, v, codes, names, unit_of, call_idx, n),
            "timeline": one_call(ev),
            "profilers": sorted(str(x) for x in ev["source"].dropna().unique()),
        }
        if n < 2:
            notes.append(f"variant {labels[0 if v == 'a' else 1]}: {n} profiled graph call: per-unit "
                         "intervals are that one call's values (no spread to bound them); profile more calls")
    if min(per["a"]["n"], per["b"]["n"]) >= 2 and not separable(per["a"]["n"], per["b"]["n"]):
        notes.append(f"{per['a']['n']} and {per['b']['n']} profiled graph calls: even when every call of one side "
                     f"is slower than every call of the other, chance orders them so once in "
                     f"{comb(per['a']['n'] + per['b']['n'], per['a']['n'])}, more than {1 - LEVEL:.0%}: no unit's delta "
                     "is called significant; profile more calls (3 a side at least)")
    att = _assemble(per, alignment, whole_a, whole_b, labels, notes, environment, whole_min_effect_share,
                    measured_pair)
    if scale_to_whole and whole_a is not None:
        _as_profiled(att, attribute(events_a, events_b, alignment, labels=labels, n_boot=n_boot, seed=seed))
    if scale_to_whole and whole_a is not None:
        why = _closure_why(att, labels)
        if why:
            att.cannot_conclude.append(why)
    att.timeline = {v: per[v]["timeline"] for v in "ab"}
    att.unit_calls_ns = {int(u): {v: per[v]["times"][:, j] for v in "ab"} for j, u in enumerate(unit_ids)}
    per_launch = {v: per[v]["n"] > 1 and per[v]["count"].max() == 1 and (
        "call" not in ev.columns or (ev["call"] < 0).all()) for v, ev in (("a", events_a), ("b", events_b))}
    for i, v in enumerate("ab"):
        if not per_launch[v]:
            continue
        other = "b" if v == "a" else "a"
        if not per_launch[other] and per[other]["n"] == per[v]["n"]:
            att.cannot_conclude.append(
                f"variant {labels[i]}: the trace has no call markers and its launches neither repeat in a longer "
                f"sequence nor leave gaps between calls; its {per[v]['n']} launches are taken as {per[v]['n']} calls "
                f"because {labels[1 - i]}'s calls, which repeat, are as many; give --calls N if they are not")
            continue
        att.cannot_conclude.append(
            f"variant {labels[i]}: the trace has no call markers and its launches neither repeat in a longer "
            f"sequence nor leave gaps between calls, so each of its {per[v]['n']} launches was taken as one "
            "call: per-call times are per-launch times; give --calls N (or profile with ProfilerStep markers)")
        _undetermined(att, f"{labels[i]}'s graph calls could not be told apart (no call markers, no repeating "
                           "sequence, no gaps), so its times are per launch, not per call: give --calls N")
    samples = {v: (w.samples if w is not None and w.samples else per[v]["n"]) for v, w in (("a", whole_a), ("b", whole_b))}
    if min(samples.values()) == 1:
        _undetermined(att, f"{samples['a']} against {samples['b']} sample(s) of the whole graph: with one a side "
                           "there is no interval, so no significance; the delta is that of the single samples")
    elif not separable(samples["a"], samples["b"]):
        _undetermined(att, f"{samples['a']} against {samples['b']} samples of the whole graph are too few for the test "
                           f"(complete separation happens by chance once in {comb(samples['a'] + samples['b'], samples['a'])})"
                           ", so there is no verdict either way")
    if whole_a is not None and whole_b is not None:
        _shared_basis(att, whole_a, whole_b, labels)
    return att


def require_clear_of_floor(att: Attribution) -> None:
    """No whole-graph verdict where the delta's interval excludes 0 but holds the practical
    threshold: the delta may or may not reach it, and which of the two a run says would follow the
    machine's load, not the code. An interval that holds 0 is 'not significant'; one away from 0
    but entirely under the threshold too (the report says the threshold); one entirely beyond it,
    significant. Asked last, after the checks whose reasons say more (require_repeat,
    require_floor)."""
    if att.whole_graph.get("undetermined") or (not att.whole_graph["significant"] and att.cannot_conclude):
        return
    d, floor = att.whole_graph["delta_ns"], att.whole_min_effect_ns
    near, far = sorted((abs(d["low"]), abs(d["high"])))
    if floor <= 0 or d["low"] <= 0 <= d["high"] or not near < floor <= far:
        return
    share = floor / att.whole_graph["a"]["median"] if att.whole_graph["a"]["median"] else 0.0
    _whole_not_significant(att, f"holds in its interval the practical threshold of "
                                f"{floor / 1e3:.1f} us ({share:.0%} of A's call): whether the difference reaches it "
                                "cannot be told from this measurement (measure longer: --budget-s)")


BASES = {"measured": "measured calls", "profiled-span": "profiled spans", "profiler-steps": "ProfilerStep spans",
         "loader-iterations": "data-loader iterations", "annotation-iterations": "annotated iterations",
         "graph-launches": "graph launches, one an iteration", "optimizer-steps": "optimizer steps",
         "launch-interval": "launches, one a call",
         "call-interval": "calls found in the repeating kernel sequence"}


# Bases of one kind: calls found in the kernel sequence, of one launch or of several (a fused side
# that launches one dispatch a call against the split side's three).
_KIND = {"launch-interval": "sequence", "call-interval": "sequence"}


def _shared_basis(att: Attribution, whole_a: WholeGraph, whole_b: WholeGraph, labels: tuple[str, str]) -> None:
    """A whole-graph verdict only on one basis both sides share: the same kind of iteration, and,
    where the calls were found in the kernel sequence (no markers), calls of one signature a side:
    calls of several signatures are a guess at the iterations, and a ratio of guesses is no verdict."""
    att.whole_graph["basis"] = {"a": whole_a.source, "b": whole_b.source}
    if _KIND.get(whole_a.source, whole_a.source) != _KIND.get(whole_b.source, whole_b.source):
        _undetermined(att, f"{labels[0]} has {whole_a.samples or '?'} {BASES.get(whole_a.source, whole_a.source)}, "
                           f"{labels[1]} has {whole_b.samples or '?'} {BASES.get(whole_b.source, whole_b.source)}: "
                           "the two times are not of one kind")
        return
    for i, w in enumerate((whole_a, whole_b)):
        if w.source == "call-interval" and (w.signatures or 1) > 1:
            _undetermined(att, f"{labels[i]}'s calls, found in its repeating kernel sequence (no ProfilerStep or call "
                               f"markers), have {w.signatures} different signatures: they are a guess at its "
                               "iterations, not the trace's own")
            return


# What the whole-graph time is, by its source (WholeGraph.source)
WHOLE_NOTES = {
    "measured": "measured whole-graph latency (Measurement)",
    "profiler-steps": "the trace's ProfilerStep spans: each step's wall time, host included",
    "loader-iterations": "the trace's iterations, from one data-loader fetch to the next (no ProfilerStep): "
                         "each one's wall time, host included",
    "annotation-iterations": "the trace's iterations, from one repeated annotation to the next (no ProfilerStep): "
                             "each one's wall time, host included",
    "graph-launches": "the trace's iterations, from one graph launch to the next (no ProfilerStep or repeated "
                      "annotation): each one's wall time, host included",
    "optimizer-steps": "the trace's iterations, from one optimizer step to the next (no ProfilerStep): each one's "
                       "wall time, host included",
    "launch-interval": "one launch a call (no call markers): the interval from one launch's start to the next, "
                       "host included",
    "call-interval": "calls found in the profile (no call markers): the interval from one call's first GPU row "
                     "to the next call's, host included",
}


def _undetermined(att: Attribution, reason: str) -> None:
    """No whole-graph verdict: the headline says why instead of a direction (the first reason kept)."""
    att.whole_graph["significant"] = False
    att.whole_graph.setdefault("undetermined", reason)
    att.closure = None


CLOSURE_BAND = (0.95, 1.05)  # a profile taken apart from the measurement closes within this


def _closure_why(att: Attribution, labels: tuple[str, str]) -> str | None:
    """The one line on why the closure of a profile taken apart from the measurement (a CPU
    profile) does not conclude, the deepest cause first: the profiler's own cost inside the kernel
    times (a negative residual), no significant delta to explain, or units and residual outside
    CLOSURE_BAND; None when it closes."""
    d = att.whole_graph["delta_ns"]
    # a residual whose whole interval is below zero: one that only touches zero is no evidence
    over = [(-att.residual[v]["median"], att.residual["launches_per_call"][v], labels[i])
            for i, v in enumerate("ab") if att.residual[v]["high"] < 0]
    if over:
        extra, n, label = max(over)
        return (f"closure is no check here: {label}'s profiled kernels take {extra / 1e3:.1f} us per call more than "
                f"its measured latency (scaled to it; {extra / n / 1e3:.1f} us or more per launch, {n:g} launches per "
                "call): the profiler's own cost lands inside the kernel times, so the residual is not measured and "
                f"the units carry up to that bias against a {abs(d['median']) / 1e3:.1f} us delta")
    if att.closure is None:
        return (f"closure not computed: the measured whole-graph delta {d['median'] / 1e3:+.1f} us "
                f"[{d['low'] / 1e3:+.1f}, {d['high'] / 1e3:+.1f}] is not significant, so there is no delta for "
                "the units and the residual to explain")
    if CLOSURE_BAND[0] <= att.closure <= CLOSURE_BAND[1]:
        return None
    wide = max((b["high"] - b["low"]) / 2 for b in (att.variants[v]["kernel_busy_ns"] for v in "ab"))
    calls = min(att.variants[v]["calls"] for v in "ab")
    return (f"closure {att.closure:.0%} is outside {CLOSURE_BAND[0]:.0%}-{CLOSURE_BAND[1]:.0%}: the profiled kernel "
            f"time per call is known to +-{wide / 1e3:.1f} us (95% interval over {calls} calls) against a "
            f"{abs(d['median']) / 1e3:.1f} us delta, so the units' medians do not add up to the measured delta; "
            "profile more calls (--profile-calls) or on a quieter machine")


def require_repeat(att: Attribution, repeat: Attribution, how: str,
                   timed: dict[str, tuple[float, float]] | None = None) -> None:
    """Keep a delta significant only where it stands out of what a profile session alone does.

    repeat: a second pair of profiles of A and B, taken apart from the first (`how` says how).
    Calls profiled one after another in one session share that session's state (the machine's
    load, where the buffers landed), so a session can shift one kernel for all of its calls and the
    interval over its calls will not show it (on a loaded CPU, tens of percent of a kernel:
    benchmarks/README.md#a-against-a-on-the-cpu-2026-12-04). A unit stays significant when the second
    pair finds it significant with the same sign and both its deltas are larger than the change of
    either side's own time for that unit between its two sessions. timed: per
    side, the median call of each of its two sessions as it timed them; the measured whole-graph
    delta stays significant when both pairs of sessions show its sign and their mirrored delta
    reaches the CPU's share (_sessions_disagree)."""
    again = {u["unit"]: u for u in repeat.units}
    for u in att.units:
        r = again.get(u["unit"])
        u["repeat_delta_ns"] = r["delta_ns"] if r is not None else None
        if not u["significant"]:
            continue
        names = " + ".join(u["kernels_b"] or u["kernels_a"])[:80]
        if r is None or not r["significant"] or (r["delta_ns"]["median"] > 0) != (u["delta_ns"]["median"] > 0):
            again_text = "no such unit" if r is None else _delta_text(r["delta_ns"]) + \
                ("" if r["significant"] else " (not significant)")
            why = f"but {again_text} in {how}: the difference does not reproduce between profile sessions"
        else:
            # both pairs' deltas must stand out: the smaller is what reproduces
            spread = max(abs(r[f"time_{v}_ns"]["median"] - u[f"time_{v}_ns"]["median"]) for v in "ab")
            if min(abs(u["delta_ns"]["median"]), abs(r["delta_ns"]["median"])) > spread:
                continue
            why = (f"and {_delta_text(r['delta_ns'])} in {how}, while the same code's time for it moved by up to "
                   f"{spread / 1e3:.1f} us between a side's two sessions: the difference is within what a session "
                   "alone does")
        u["significant"] = False
        att.cannot_conclude.append(f"unit {u['unit']} ({names}): {_delta_text(u['delta_ns'])} in the first pair of "
                                   f"profiles {why}, so it is not called significant")
    whole = att.whole_graph
    if timed and set(timed) == {"a", "b"} and whole["significant"]:
        why = _sessions_disagree(att, timed)
        if why:
            _whole_not_significant(att, why)


def _whole_not_significant(att: Attribution, why: str) -> None:
    """Withdraw the whole graph's significance, saying why (after 'the measured delta ...')."""
    whole = att.whole_graph
    whole["significant"] = False
    whole.setdefault("undetermined", f"the measured delta {why}")
    att.closure = None
    # the closure line attribute() wrote judged a significant delta: say it again for this one
    att.cannot_conclude = [c for c in att.cannot_conclude if not c.startswith("closure ")]
    closure = _closure_why(att, (att.variants["a"]["label"], att.variants["b"]["label"]))
    att.cannot_conclude += [f"whole graph: the measured delta {_delta_text(whole['delta_ns'])} {why}, so it is not "
                            "called significant"] + ([closure] if closure else [])


# On a loaded CPU a call now and then stalls for a millisecond or more (the runtime's worker threads
# wake late), and how often differs from one process to another, so two processes' medians can
# differ by the stalls alone; the fastest tenth of each side's calls is what the code decides.
# benchmarks/README.md#one-source-two-releases-the-version-family-2026-12-06
FLOOR_QUANTILE = 0.1


def require_floor(att: Attribution, samples: dict[str, list[float]], apart: str) -> None:
    """Keep a whole-graph delta measured in two processes significant only where the sides' fastest
    calls (their FLOOR_QUANTILE) differ the same way by CPU_MIN_EFFECT_SHARE of A's or more: else the
    delta is how often each process's calls stalled, not the code. samples: per side ('a', 'b') the
    measured seconds per call; apart: which processes timed the sides, in words."""
    whole = att.whole_graph
    if not whole["significant"]:
        return
    floor = {v: quantile(samples[v], FLOOR_QUANTILE) * 1e9 for v in "ab"}
    moved, d = floor["b"] - floor["a"], whole["delta_ns"]["median"]
    if (moved > 0) == (d > 0) and abs(moved) >= CPU_MIN_EFFECT_SHARE * floor["a"]:
        return
    label = {v: att.variants[v]["label"] for v in "ab"}
    _whole_not_significant(att, (
        f"rests on how often calls stalled, not on the code's time: {apart}, and the fastest tenth of their calls "
        f"take {floor['a'] / 1e3:.1f} us ({label['a']}) and {floor['b'] / 1e3:.1f} us ({label['b']}), "
        f"{moved / floor['a']:+.1%} apart, where the medians are {whole['a']['median'] / 1e3:.1f} us and "
        f"{whole['b']['median'] / 1e3:.1f} us; on this machine how often a process's calls stall differs from "
        "process to process"))


def _sessions_disagree(att: Attribution, timed: dict[str, tuple[float, float]]) -> str | None:
    """Why the profile sessions' own timed calls do not back the measured whole-graph delta, or None.

    Each pair of sessions (A then B, then B then A) times the calls of both sides: each pair must
    show the delta's sign, and the mirrored order's delta, (B1 + B2 - A1 - A2) / 2, in which a
    machine that speeds up or slows down steadily across the four sessions cancels out, must reach
    the CPU's practical share of A's time in the same direction. A side's change between its own
    two sessions is not held against the delta: in the mirrored order it is that drift, which the
    pairs' order cancels and the interleaved measurement never saw."""
    whole = att.whole_graph
    d, base = whole["delta_ns"]["median"], whole["a"]["median"]
    (a1, a2), (b1, b2) = timed["a"], timed["b"]
    label = {v: att.variants[v]["label"] for v in "ab"}
    if (b1 - a1 > 0) != (d > 0) or (b2 - a2 > 0) != (d > 0):
        return (f"({d / base:+.1%}) is not what both pairs of profile sessions show with their own timed calls: "
                f"{label['b']} - {label['a']} = {(b1 - a1) / 1e3:+.1f} us in the first pair and "
                f"{(b2 - a2) / 1e3:+.1f} us in the second (mirrored order)")
    mirrored = (b1 + b2 - a1 - a2) / 2
    floor = CPU_MIN_EFFECT_SHARE * (a1 + a2) / 2
    if abs(mirrored) < floor:
        return (f"({d / base:+.1%}) is more than the profile sessions show: in the mirrored order (A, B, B, A), "
                f"which cancels a steady drift of the machine, {label['b']} - {label['a']} = {mirrored / 1e3:+.1f} us "
                f"({mirrored / ((a1 + a2) / 2):+.1%}), under the {CPU_MIN_EFFECT_SHARE:.0%} a CPU delta must reach")
    return None


def _delta_text(d: dict[str, Any]) -> str:
    return f"{d['median'] / 1e3:+.1f} us [{d['low'] / 1e3:+.1f}, {d['high'] / 1e3:+.1f}]"


def separable(n_a: int, n_b: int, level: float = LEVEL) -> bool:
    """Whether n_a against n_b samples can show a difference at `level`: complete separation of
    the two (every sample of one side above every sample of the other) happens by chance once in
    C(n_a + n_b, n_a) orderings, which must be rarer than 1 - level (3 against 3 at 95%: 1 in 20).
    Fewer calls than that and a percentile interval excludes 0 more often than it says; one call
    a side has no spread at all."""
    return min(n_a, n_b) >= 2 and comb(n_a + n_b, n_a) >= 1 / (1 - level) - 1e-9  # the epsilon absorbs 1 / 0.05 rounding up


def _assemble(per, alignment, whole_a, whole_b, labels, notes, environment, whole_share,
              pair: MeasuredPair | None = None) -> Attribution:
    med, boot = {}, {}
    for v, p in per.items():
        # columns: units..., busy, span, residual-vs-span, overlap (summed durations - busy)
        cols = np.column_stack([p["times"], p["busy"], p["span"], p["span"] - p["busy"],
                                p["times"].sum(axis=1) - p["busy"]])
        med[v] = np.median(cols, axis=0)
        boot[v] = medians_at_ranks(cols, p["ranks"])
    k = len(alignment.units)
    ia, ib = _interval(med["a"], boot["a"]), _interval(med["b"], boot["b"])
    idelta = _interval(med["b"] - med["a"], boot["b"] - boot["a"])

    if whole_a is not None:
        whole = {"a": whole_a.interval(), "b": whole_b.interval()}
        source = whole_a.source
        wd = whole["b"].median - whole["a"].median
        if pair is not None:  # timed side by side: the pair's own interval
            whole_delta = Interval(wd, pair.delta_ns.low, pair.delta_ns.high)
        else:  # no joint samples: the widest difference of the two intervals (conservative)
            whole_delta = Interval(wd, whole["b"].low - whole["a"].high, whole["b"].high - whole["a"].low)
        resid = {v: Interval(whole[v].median - med[v][k], whole[v].low - (ia if v == "a" else ib)[k].high,
                             whole[v].high - (ia if v == "a" else ib)[k].low) for v in "ab"}
        rd = resid["b"].median - resid["a"].median
        resid_delta = Interval(rd, resid["b"].low - resid["a"].high, resid["b"].high - resid["a"].low)
        whole_note = WHOLE_NOTES.get(source, WHOLE_NOTES["measured"])
        if pair is not None:
            whole_note += ("; A and B were timed side by side, so the delta's interval is the pair's own "
                           "(paired by block), not the difference of their two intervals")
        for i, v in enumerate("ab"):
            if resid[v].median < 0:
                notes.append(f"variant {labels[i]}: profiled kernel busy time per call ({med[v][k] / 1e3:.1f} us) "
                             f"exceeds the measured whole-graph latency ({whole[v].median / 1e3:.1f} us): "
                             "kernels ran slower under the profiler than when measured, so the residual "
                             "is negative")
    else:
        whole = {"a": ia[k + 1], "b": ib[k + 1]}
        source = "profiled-span"
        whole_delta = idelta[k + 1]
        resid = {"a": ia[k + 2], "b": ib[k + 2]}
        resid_delta = idelta[k + 2]
        whole_note = ("no measurement given: whole-graph time is the profiled span per call "
                      "(first kernel start to last kernel end), which includes profiler overhead "
                      "and excludes host time before the first launch")
    min_effect = MIN_EFFECT_SHARE * abs(whole["a"].median)
    whole_min_effect = whole_share * abs(whole["a"].median)

    # Too few calls a side prove nothing: one has a zero-width interval, and a bootstrap of two
    # or three calls a side is as sure of a difference as of complete separation (separable).
    spread = separable(per["a"]["n"], per["b"]["n"])
    whole_spread = spread if whole_a is None else separable(whole_a.samples or 3, whole_b.samples or 3)

    def significant(x: Interval, enough: bool = spread, floor: float = min_effect) -> bool:
        return enough and x.excludes_zero() and abs(x.median) >= floor

    launches_med = {v: np.median(per[v]["launches"], axis=0) for v in "ab"}
    idle_med = {v: np.median(per[v]["idle"], axis=0) for v in "ab"}
    unit_rows = []
    for j, row in enumerate(alignment.units.itertuples(index=False)):
        d = idelta[j]
        unit_rows.append({
            "unit": int(row.unit), "kernels_a": list(row.kernels_a), "kernels_b": list(row.kernels_b),
            "source_ops": list(row.source_ops), "method": row.method, "flagged": bool(row.flagged),
            "time_a_ns": _ival(ia[j]), "time_b_ns": _ival(ib[j]),
            "launches_a": float(launches_med["a"][j]), "launches_b": float(launches_med["b"][j]),
            # median per profiled call: the device's idle time just before the unit's launches
            "idle_before_a_ns": float(idle_med["a"][j]), "idle_before_b_ns": float(idle_med["b"][j]),
            "delta_ns": _ival(d), "significant": significant(d),
            "share": d.median / whole_delta.median if whole_delta.median else None,
            "findings": [],
        })
    unit_rows.sort(key=lambda u: -abs(u["delta_ns"]["median"]))
    unit_sum = float(sum(u["delta_ns"]["median"] for u in unit_rows))
    # Kernels on several streams overlap: the units' summed time exceeds the busy time by the
    # overlap, which the whole graph does not pay. whole = units - overlap + residual.
    overlap = {"a": ia[k + 3], "b": ib[k + 3]}
    overlap_delta = idelta[k + 3]
    closure = ((unit_sum - overlap_delta.median + resid_delta.median) / whole_delta.median
               if whole_delta.median and significant(whole_delta, whole_spread, whole_min_effect) else None)
    if closure is None:
        notes.append("closure not computed: the whole-graph delta is not significant")

    launches = {v: float(np.median(per[v]["count"])) for v in "ab"}
    variants = {v: {"label": labels[i], "calls": int(per[v]["n"]), "profilers": per[v]["profilers"],
                    "launches_per_call": launches[v],
                    "kernel_busy_ns": _ival((ia, ib)[i][k]), "span_ns": _ival((ia, ib)[i][k + 1])}
                for i, v in enumerate("ab")}
    concurrency = {"a": _ival(overlap["a"]), "b": _ival(overlap["b"]), "delta_ns": _ival(overlap_delta),
                   "significant": significant(overlap_delta),
                   "what": "kernel time hidden by units running concurrently (several streams or threads): the "
                           "units' summed time minus the busy time (their union); a unit's own time is already "
                           "the union of its kernels"}
    residual = {"a": _ival(resid["a"]), "b": _ival(resid["b"]), "delta_ns": _ival(resid_delta),
                "significant": significant(resid_delta),
                "share": resid_delta.median / whole_delta.median if whole_delta.median else None,
                "launches_per_call": launches,
                "what": "whole-graph time minus kernel busy time: launch overhead, gaps, host"}
    whole_graph = {"source": source, "note": whole_note, "a": _ival(whole["a"]),
                   "b": _ival(whole["b"]), "delta_ns": _ival(whole_delta),
                   "significant": significant(whole_delta, whole_spread, whole_min_effect),
                   "ratio": whole["b"].median / whole["a"].median if whole["a"].median else None,
                   "unit_delta_sum_ns": unit_sum}
    if pair is not None and whole_a is not None:
        whole_graph["delta_interval"] = "paired"
        whole_graph["ratio_b_over_a"] = _ival(pair.ratio_b_over_a)
    kernels = pd.concat([per["a"]["stats"], per["b"]["stats"]], ignore_index=True)
    return Attribution(variants=variants, whole_graph=whole_graph, units=unit_rows,
                       residual=residual, concurrency=concurrency, closure=closure, kernels=kernels, notes=notes,
                       environment=environment, min_effect_ns=min_effect, whole_min_effect_ns=whole_min_effect)
