"""A capture file (or one segment of it) as the graph calls of one variant.

'FILE#N' selects call segment N (one run of identical calls: one variant) of a capture that
holds several variants, as split_calls numbers them. A profile written by `rootcause run` is
cut into the number of calls the run recorded for it (measurement.json beside it,
profiles.<variant>.calls); --calls N overrides; otherwise split_calls finds the repeating
kernel sequence.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from rootcause.artifacts.rundir import run_record
from rootcause.errors import UsageError
from rootcause.profilers import load
from rootcause.profilers.calls import split_calls


def load_profile(path: str) -> pd.DataFrame:
    """KernelEvents of a capture file or of its 'FILE#N' segment; UsageError when it holds none."""
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
    events = load(p)
    if len(events) == 0:
        raise UsageError(f"{path}: the profile holds no kernel launches")
    return events


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
