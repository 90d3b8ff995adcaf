"""A capture file (or one segment of it) as the graph calls of one variant.

'FILE#N' selects call segment N (one run of identical calls: one variant) of a capture that
holds several variants, as split_calls numbers them. Calls, in order of precedence: --calls N;
the count `rootcause run` recorded for the profile (measurement.json beside it,
profiles.<variant>.calls); the trace's own ProfilerStep#N spans (Kineto), each GPU row going
to the step during which it started; without them the iterations the trace marks otherwise
(profilers.iterations: repeated annotations, graph launches, data-loader fetches, optimizer
steps; --iterations NAME picks an annotation); otherwise split_calls finds the repeating sequence.

A trace with steps also gives the whole-graph time of a call: the steps' wall time, host
included (the data loader, the Python between launches), which is what a user of the trace
means by "slower". A trace whose launches can only be taken one a call gives the interval from
one launch to the next, host included, for the same reason. memcpy and memset rows stay in the events: they are units like kernels.
A capture holding several GPUs is never merged: one is chosen (device_id) or it is an error.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from dataclasses import dataclass, field

from rootcause.artifacts.rundir import run_record
from rootcause.errors import UsageError
from rootcause.model import WholeGraph
from rootcause.profilers import load_capture
from rootcause.profilers.calls import split_calls
from rootcause.profilers.iterations import ITERATION_CATS, SOURCES, choose as choose_iterations, stem


@dataclass
class Profile:
    """One variant's profile: its GPU rows cut into calls, and what the trace says besides."""

    events: pd.DataFrame
    whole: WholeGraph | None = None  # per-call wall time from ProfilerStep spans, when the trace has them
    devices: dict[int, str] = field(default_factory=dict)  # device id -> GPU name (Kineto deviceProperties)
    steps: int = 0
    step_spans: pd.DataFrame | None = None  # the steps themselves (parsers.chrome_trace.STEP_COLUMNS)
    host: pd.DataFrame | None = None  # host spans (parsers.chrome_trace.HOST_COLUMNS), where the format has them


def load_profile(path: str, device_id: int | None = None
                 ) -> tuple[pd.DataFrame, pd.DataFrame, dict[int, str], pd.DataFrame | None]:
    """(GPU rows, ProfilerStep spans, GPU names, host spans) of a capture file or of its 'FILE#N'
    segment; UsageError when it holds no kernel, or rows of several devices and no device_id."""
    p = Path(path)
    if not p.is_file() and "#" in path:
        base, _, seg = path.rpartition("#")
        if not seg.isdigit():
            raise UsageError(f"{path}: '#{seg}': a segment is a number")
        events, _, devices, _ = load_profile(base, device_id)
        events = split_calls(events)
        chosen = events[events["segment"] == int(seg)]
        if chosen.empty:
            raise UsageError(f"{path}: no segment {seg} (the capture has "
                             f"{events['segment'].max() + 1} segment(s))")
        return chosen.assign(call=chosen["call"] - chosen["call"].min()).reset_index(drop=True), \
            pd.DataFrame(), devices, None
    if not p.is_file():
        raise UsageError(f"{path}: no such profile file")
    capture = load_capture(p)
    events = _one_device(capture.events, device_id, path)
    kernels = (events["kind"] == "kernel").any() if "kind" in events.columns else len(events) > 0
    if not kernels:
        raise UsageError(f"{path}: the profile holds no kernel launches")
    return events.reset_index(drop=True), _host_steps(capture.steps), capture.devices, capture.host


def _one_device(events: pd.DataFrame, device_id: int | None, path: str) -> pd.DataFrame:
    if "device" not in events.columns:
        return events
    ids = sorted(int(d) for d in events["device"].dropna().unique())
    if device_id is not None:
        if device_id not in ids:
            raise UsageError(f"{path}: no rows of device {device_id} (it holds {', '.join(map(str, ids)) or 'none'})")
        return events[events["device"] == device_id]
    if len(ids) > 1:
        raise UsageError(f"{path}: rows of {len(ids)} devices ({', '.join(map(str, ids))}): compare one device "
                         "at a time (--device-id N)")
    return events


def _host_steps(steps: pd.DataFrame) -> pd.DataFrame:
    """The host-side ProfilerStep spans (one per step), in order."""
    if steps is None or steps.empty:
        return pd.DataFrame()
    host = steps[steps["cat"] != "gpu_user_annotation"] if "cat" in steps else steps
    return host.drop_duplicates("step").sort_values("start_ns", kind="stable").reset_index(drop=True)


def steps_as_calls(events: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """Each row gets the step during which it started: from a step's start to the next one's
    (the last step: to its end plus its own length, for GPU work still draining); rows outside
    every step get call -1."""
    starts = steps["start_ns"].to_numpy("int64")
    idx = np.searchsorted(starts, events["start_ns"].to_numpy("int64"), side="right") - 1
    last_end = int(steps["end_ns"].iloc[-1])
    if not _iterations(steps):  # an iteration ends where the next fetch starts: later rows are the next one's
        last_end += int(steps["duration_ns"].iloc[-1])
    idx = np.where(events["start_ns"].to_numpy("int64") > last_end, -1, idx)
    return events.assign(call=idx.astype("int64"))


def _without_cut_steps(events: pd.DataFrame, steps: pd.DataFrame, notes: list[str], label: str) -> pd.DataFrame:
    """steps less the last ones in which no GPU row starts, where earlier steps have some: the
    profiler stopped in them (a ProfilerStep a few us long, cut by the trace's end), so they are
    no step's time."""
    calls = steps_as_calls(events, steps)["call"]
    busy = set(calls[calls >= 0].tolist())
    keep = len(steps)
    while keep > 1 and (keep - 1) not in busy and busy:
        keep -= 1
    if keep < len(steps):
        cut = steps.iloc[keep:]
        spans = ", ".join(f"{d / 1e3:.1f} us" for d in cut["duration_ns"])
        notes.append(f"variant {label}: {', '.join(cut['name'])} left out ({spans}): no GPU work starts in it, "
                     "the trace ends inside it")
    return steps.iloc[:keep]


def steps_whole_graph(steps: pd.DataFrame) -> WholeGraph:
    from rootcause.stats import median_ci

    d = steps["duration_ns"].to_numpy("float64")
    lo, hi = median_ci(d) if len(d) > 1 else (float(d[0]), float(d[0]))
    source = SOURCES.get(str(steps["cat"].iloc[0]), "profiler-steps") if "cat" in steps else "profiler-steps"
    return WholeGraph(float(np.median(d)), lo, hi, source, len(d))


def _iterations(steps: pd.DataFrame) -> bool:
    """Steps from one mark to the next (data-loader fetches, annotations, graph launches, optimizer
    steps: profilers.iterations), not spans of their own like ProfilerStep's."""
    return "cat" in steps and bool(steps["cat"].isin(list(ITERATION_CATS)).all())


def _steps_words(steps: pd.DataFrame, others: list[str], named: str | None) -> str:
    """What the steps are, for the notes."""
    n, first, cat = len(steps), steps["name"].iloc[0], steps["cat"].iloc[0] if "cat" in steps else None
    if cat in ("annotation", "annotation-span"):
        why = (f"--iterations {named}" if named else "no ProfilerStep") + (
            f"; other annotations repeat at that level too ({', '.join(others[:4])}): --iterations NAME picks one"
            if others else "")
        what = ("`{}` spans, each holding its iteration's GPU work" if cat == "annotation-span" else
                "iteration(s) from one `{}` annotation to the next").format(stem(first))
        return f"{n} {what} ({why})"
    if cat in ITERATION_CATS:
        return f"{n} iteration(s) from one `{first}` to the next (the trace has no ProfilerStep)"
    return f"{n} ProfilerStep span(s) ({first} to {steps['name'].iloc[-1]})"


def call_interval_whole_graph(events: pd.DataFrame) -> WholeGraph | None:
    """Where the calls of a profile are found in it (split_calls: no markers, no steps, no count
    given), the whole-graph time of a call: the interval from one call's first GPU row to the
    next call's, the host's time between calls included, as a loop pays it. The kernels' own
    span would leave out the host between calls: a CUDA graph of 32 short kernels replayed with
    20 us of host work between replays reads 8.5x slower by spans where the loop is 4.6x slower,
    and a launch-bound loop of 32 launches from Python (each launch one call) not slower at all.
    Source 'launch-interval' where each launch is one call, else 'call-interval'; None for
    fewer than three calls."""
    from rootcause.stats import median_ci

    split = split_calls(events)
    split = split[split["call"] >= 0]
    firsts = split.groupby("call")["start_ns"].min().sort_values().to_numpy("int64")
    if len(firsts) < 3:
        return None
    d = np.diff(firsts).astype("float64")
    lo, hi = median_ci(d)
    one_each = np.bincount(split["call"].to_numpy("int64")).max() == 1
    signatures = int(split["signature"].nunique()) if "signature" in split else 1
    return WholeGraph(float(np.median(d)), lo, hi, "launch-interval" if one_each else "call-interval", len(d),
                      signatures)


def split_into(events: pd.DataFrame, calls: int, where: str) -> pd.DataFrame:
    """Events cut into `calls` equal graph calls (split_calls(calls=...)), errors naming where."""
    try:
        return split_calls(events.drop(columns=[c for c in ("segment", "signature") if c in events]),
                           calls=calls)
    except UsageError as err:
        raise UsageError(f"{where}: {err}") from None


def profile_events(path: str, calls: int | None, notes: list[str], label: str) -> pd.DataFrame:
    """The GPU rows of a profile cut into calls (module doc)."""
    return read_profile(path, calls, notes, label).events


def read_profile(path: str, calls: int | None, notes: list[str], label: str,
                 device_id: int | None = None, iterations: str | None = None) -> Profile:
    """load_profile, cut into calls (module doc), with the steps' wall time when there are steps.
    iterations: the annotation that marks the iterations (--iterations NAME), over any other kind."""
    events, steps, devices, host = load_profile(path, device_id)
    where = "--calls"
    if calls is None and not iterations:
        info, mfile = run_record(path)
        if info is not None and isinstance(info.get("calls"), int) and not isinstance(info["calls"], bool):
            calls, where = info["calls"], f"{mfile}: profiles.{info.get('variant', label)}.calls"
    if calls is None:
        try:
            steps, others = choose_iterations(steps, host, iterations, events)
        except UsageError as err:
            raise UsageError(f"{path}: {err}") from None
    if calls is None and len(steps):
        notes.append(f"variant {label}: {len(events)} GPU rows split into the trace's "
                     f"{_steps_words(steps, others, iterations)}; "
                     "the whole-graph time is the steps' wall time, host included")
        steps = _without_cut_steps(events, steps, notes, label)
        return Profile(steps_as_calls(events, steps), steps_whole_graph(steps), devices, len(steps), steps, host)
    if calls is None:
        whole = call_interval_whole_graph(events)
        if whole is not None and whole.source == "launch-interval":
            notes.append(f"variant {label}: no call markers, and the launches neither repeat in a longer sequence "
                         f"nor leave gaps between calls: each is one call, and its time is the interval to the next "
                         f"GPU row's start (median of {whole.samples}), host included, so a host-bound side shows")
        elif whole is not None:
            notes.append(f"variant {label}: no call markers: a call's time is the interval from its first GPU row to "
                         f"the next call's (median of {whole.samples}), the host between calls included")
        return Profile(events, whole, devices)
    if calls <= 0:
        raise UsageError(f"{where}: must be > 0, got {calls}")
    notes.append(f"variant {label}: {len(events)} launches split into {calls} graph call(s), the count "
                 f"{where} gives")
    return Profile(split_into(events, calls, f"{path} ({where} = {calls})"), None, devices)
