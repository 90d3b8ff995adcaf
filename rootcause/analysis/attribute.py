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

from math import comb
from typing import Any, Callable

import numpy as np
import pandas as pd

from rootcause.analysis.align import INSTANCE, Alignment
from rootcause.analysis.result import (Attribution, Concurrency, Residual, Unit, Variant, WholeGraphDelta,
                                       Withdrawal, json_column)
from rootcause.analysis.verdict import (
    FLOOR_QUANTILE,
    WHOLE_NOTES,
    closure_why,
    delta_text,
    carry_measured_interval,
    require_shared_basis,
    separable,
    unit_names,
    withdraw,
)
from rootcause.model import COUNTER_COLUMNS, Interval, MeasuredPair, WholeGraph
from rootcause.profilers import split_calls
from rootcause.stats import LEVEL, MIN_EFFECT_SHARE, medians_at_ranks, percentile_interval, quantile, rank_draws


def one_call(ev: pd.DataFrame) -> dict[str, Any]:
    """The graph call whose span is the median span, its kernels relative to its first launch
    (attribution.json 'timeline'; ev has 'call' numbered, every row in a call)."""
    spans = ev.groupby("call").agg(s=("start_ns", "min"), e=("end_ns", "max"))
    order = (spans.e - spans.s).sort_values(kind="stable")
    call = int(order.index[(len(order) - 1) // 2])
    g = ev[ev["call"] == call].sort_values("start_ns", kind="stable")
    t0 = int(g["start_ns"].min())
    streams = json_column(g["stream"]) if "stream" in g.columns else [None] * len(g)
    return {"call": call, "calls": int(len(spans)), "kernels": [
        {"kernel": str(k), "start_ns": s, "end_ns": e, "stream": st}
        for k, s, e, st in zip(g["kernel"].tolist(), (g["start_ns"] - t0).tolist(), (g["end_ns"] - t0).tolist(),
                               streams)]}


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
    """Each column's interval; boot is partitioned in place (a bootstrap of 700 units a side is
    12 MB, and its rows are not used after)."""
    lo, hi = percentile_interval(boot, in_place=True)
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
            missing = head[cols].isna().any(axis=1).to_numpy()
            stats[col] = [None if gap else tuple(int(x) for x in r)
                          for gap, r in zip(missing, head[cols].to_numpy(dtype=object))]
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


def _as_profiled(att: Attribution, raw: Attribution) -> list[Withdrawal]:
    """A unit of sides scaled to their measured latencies (each by its own factor) stays significant
    only where the kernel times as profiled show the delta too, with its sign: the factors come from
    two measured medians, which a loaded machine can put apart while the kernels are alike. Two
    builds of one TVM graph, scaled by 1.057 and 1.037, put their one kernel 1.6% apart in both pairs
    of profiles; as profiled, the kernels were 75 ns apart, not significant."""
    as_profiled = {u.unit: u for u in raw.units}
    out = []
    for u in att.units:
        r = as_profiled.get(u.unit)
        if not u.significant or (r is not None and r.significant
                                 and (r.delta_ns.median > 0) == (u.delta_ns.median > 0)):
            continue
        names = unit_names(u)
        seen = "no such unit" if r is None else delta_text(r.delta_ns) + ("" if r.significant else
                                                                         " (not significant)")
        out.append(Withdrawal(
            "as-profiled", f"unit {u.unit} ({names}): {delta_text(u.delta_ns)} once scaled to the measured "
            f"latencies, but {seen} as profiled: the difference comes from the two sides' scale factors, not from "
            "the kernels, so it is not called significant", unit=u.unit))
    return out


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


def _per_call_tables(alignment: Alignment, v: str, ev: pd.DataFrame, unit_ids: np.ndarray, n_boot: int,
                     rng: np.random.Generator) -> dict[str, Any]:
    """One variant's per-call tables (calls x units): each unit's time (the union of its kernels
    within the call), launches and idle time before them; the call's busy time and span; the
    bootstrap's rank draws; the per-kernel statistics and one call's timeline."""
    k = len(unit_ids)
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
    return {
        "times": times.reshape(n, k), "launches": launches.reshape(n, k), "idle": idle.reshape(n, k),
        "busy": _busy_per_call(ev).reindex(range(n)).to_numpy(dtype="float64"),
        "span": _span_per_call(ev).reindex(range(n)).to_numpy(dtype="float64"),
        "count": np.bincount(call_idx, minlength=n),
        "ranks": rank_draws(n, n_boot, rng), "n": n,
        "stats": _kernel_stats(ev, v, codes, names, unit_of, call_idx, n),
        "timeline": one_call(ev),
        "profilers": sorted(str(x) for x in ev["source"].dropna().unique()),
    }


def _require_calls(att: Attribution, per: dict[str, dict[str, Any]], events_a: pd.DataFrame,
                   events_b: pd.DataFrame, labels: tuple[str, str]) -> list[Withdrawal]:
    """No whole-graph verdict where a side's calls could not be told apart (no call markers, no
    repeating sequence, no gaps: each launch was taken as a call), unless the other side's calls,
    which repeat, are as many. Either way a cannot-conclude line says how the calls were taken."""
    out = []
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
        out.append(Withdrawal("calls", f"{labels[i]}'s graph calls could not be told apart (no call markers, no "
                              "repeating sequence, no gaps), so its times are per launch, not per call: give --calls N"))
    return out


def _require_samples(per: dict[str, dict[str, Any]], whole_a: WholeGraph | None,
                     whole_b: WholeGraph | None) -> list[Withdrawal]:
    """No whole-graph verdict on one sample a side, or on too few to separate by chance."""
    samples = {v: (w.samples if w is not None and w.samples else per[v]["n"]) for v, w in (("a", whole_a), ("b", whole_b))}
    if min(samples.values()) == 1:
        return [Withdrawal("samples", f"{samples['a']} against {samples['b']} sample(s) of the whole graph: with one "
                           "sample on a side there is no interval, so no significance; the delta is that of the single samples")]
    if not separable(samples["a"], samples["b"]):
        return [Withdrawal("samples", f"{samples['a']} against {samples['b']} samples of the whole graph are too few "
                           "for the test (complete separation happens by chance once in "
                           f"{comb(samples['a'] + samples['b'], samples['a'])}), so there is no verdict either way")]
    return []


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
    for v, ev in evs.items():
        per[v] = _per_call_tables(alignment, v, ev, unit_ids, n_boot, rng)
        if per[v]["n"] < 2:
            notes.append(f"variant {labels[0 if v == 'a' else 1]}: {per[v]['n']} profiled graph call: per-unit "
                         "intervals are that one call's values (no spread to bound them); profile more calls")
    if min(per["a"]["n"], per["b"]["n"]) >= 2 and not separable(per["a"]["n"], per["b"]["n"]):
        notes.append(f"{per['a']['n']} and {per['b']['n']} profiled graph calls: even when every call of one side "
                     f"is slower than every call of the other, chance orders them so once in "
                     f"{comb(per['a']['n'] + per['b']['n'], per['a']['n'])}, more than {1 - LEVEL:.0%}: no unit's delta "
                     "is called significant; profile more calls (3 a side at least)")
    att = _assemble(per, alignment, whole_a, whole_b, labels, notes, environment, whole_min_effect_share,
                    measured_pair)
    if scale_to_whole and whole_a is not None:
        withdraw(att, _as_profiled(att, attribute(events_a, events_b, alignment, labels=labels, n_boot=n_boot,
                                                  seed=seed)))
        withdraw(att, carry_measured_interval(att))
        why = closure_why(att, labels)
        if why:
            att.cannot_conclude.append(why)
    att.timeline = {v: per[v]["timeline"] for v in "ab"}
    att.unit_calls_ns = {int(u): {v: per[v]["times"][:, j] for v in "ab"} for j, u in enumerate(unit_ids)}
    withdraw(att, _require_calls(att, per, events_a, events_b, labels))
    withdraw(att, _require_samples(per, whole_a, whole_b))
    if whole_a is not None and whole_b is not None:
        withdraw(att, require_shared_basis(att, whole_a, whole_b, labels))
    return att


def _whole_and_residual(med, ia, ib, idelta, k, whole_a, whole_b, pair, labels, notes) -> tuple:
    """The whole graph's time a side, its delta, each side's residual and the residual's delta,
    from the measurement where there is one (the delta's interval the pair's own where A and B
    were timed side by side), else from the profiled span; the source and what it is."""
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
    return whole, source, whole_delta, resid, resid_delta, whole_note


def _unit_rows(alignment: Alignment, per, ia, ib, idelta, whole_delta: Interval,
               significant: Callable[[Interval], bool]) -> list[Unit]:
    """Each unit's times, launches, idle time before it and delta (in the alignment's order)."""
    launches_med = {v: np.median(per[v]["launches"], axis=0) for v in "ab"}
    idle_med = {v: np.median(per[v]["idle"], axis=0) for v in "ab"}
    unit_rows = []
    for j, row in enumerate(alignment.units.itertuples(index=False)):
        d = idelta[j]
        unit_rows.append(Unit(
            unit=int(row.unit), kernels_a=list(row.kernels_a), kernels_b=list(row.kernels_b),
            source_ops=list(row.source_ops), method=row.method, flagged=bool(row.flagged),
            time_a_ns=ia[j], time_b_ns=ib[j],
            launches_a=float(launches_med["a"][j]), launches_b=float(launches_med["b"][j]),
            idle_before_a_ns=float(idle_med["a"][j]), idle_before_b_ns=float(idle_med["b"][j]),
            delta_ns=d, significant=significant(d),
            share=d.median / whole_delta.median if whole_delta.median else None))
    return unit_rows


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
    idelta = _interval(med["b"] - med["a"], boot["b"] - boot["a"])  # before each side's is partitioned
    ia, ib = _interval(med["a"], boot["a"]), _interval(med["b"], boot["b"])

    whole, source, whole_delta, resid, resid_delta, whole_note = _whole_and_residual(
        med, ia, ib, idelta, k, whole_a, whole_b, pair, labels, notes)
    min_effect = MIN_EFFECT_SHARE * abs(whole["a"].median)
    whole_min_effect = whole_share * abs(whole["a"].median)

    # Too few calls a side prove nothing: one has a zero-width interval, and a bootstrap of two
    # or three calls a side is as sure of a difference as of complete separation (separable).
    spread = separable(per["a"]["n"], per["b"]["n"])
    whole_spread = spread if whole_a is None else separable(whole_a.samples or 3, whole_b.samples or 3)

    def significant(x: Interval, enough: bool = spread, floor: float = min_effect) -> bool:
        return enough and x.excludes_zero() and abs(x.median) >= floor

    unit_rows = _unit_rows(alignment, per, ia, ib, idelta, whole_delta, significant)
    unit_rows.sort(key=lambda u: -abs(u.delta_ns.median))
    unit_sum = float(sum(u.delta_ns.median for u in unit_rows))
    # Kernels on several streams overlap: the units' summed time exceeds the busy time by the
    # overlap, which the whole graph does not pay. whole = units - overlap + residual.
    overlap = {"a": ia[k + 3], "b": ib[k + 3]}
    overlap_delta = idelta[k + 3]
    closure = ((unit_sum - overlap_delta.median + resid_delta.median) / whole_delta.median
               if whole_delta.median and significant(whole_delta, whole_spread, whole_min_effect) else None)
    if closure is None:
        notes.append("closure not computed: the whole-graph delta is not significant")

    launches = {v: float(np.median(per[v]["count"])) for v in "ab"}
    variants = {v: Variant(labels[i], int(per[v]["n"]), per[v]["profilers"], launches[v], (ia, ib)[i][k],
                           (ia, ib)[i][k + 1]) for i, v in enumerate("ab")}
    concurrency = Concurrency(overlap["a"], overlap["b"], overlap_delta, significant(overlap_delta))
    residual = Residual(resid["a"], resid["b"], resid_delta, significant(resid_delta),
                        resid_delta.median / whole_delta.median if whole_delta.median else None, launches)
    whole_graph = WholeGraphDelta(
        source, whole_note, whole["a"], whole["b"], whole_delta,
        significant(whole_delta, whole_spread, whole_min_effect),
        whole["b"].median / whole["a"].median if whole["a"].median else None, unit_sum,
        ratio_b_over_a=pair.ratio_b_over_a if pair is not None and whole_a is not None else None)
    kernels = pd.concat([per["a"]["stats"], per["b"]["stats"]], ignore_index=True)
    return Attribution(variants=variants, whole_graph=whole_graph, units=unit_rows,
                       residual=residual, concurrency=concurrency, closure=closure, kernels=kernels, notes=notes,
                       environment=environment, min_effect_ns=min_effect, whole_min_effect_ns=whole_min_effect)
