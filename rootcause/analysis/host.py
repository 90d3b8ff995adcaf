"""Host units: what the host thread that runs the steps spends each step on, A against B.

Where a trace has steps (ProfilerStep#N, or iterations between data-loader fetches) and host
spans (parsers.chrome_trace.HOST_COLUMNS), the step's thread is the one holding the step's own
span. Inside each step, its top-level spans on that thread (the ones no other span of the thread
encloses: `enumerate(DataLoader)#...__next__`, `Optimizer.step#SGD.step`, `aten::conv2d`,
`cudaStreamSynchronize`, a `.item()`'s `aten::item`) are summed by name, inclusive of what they
enclose; what the step spends outside them is the unit 'outside host ops' (Python between ops,
gaps). Names are aligned across the two sides, with the data loader's iterator class elided (a
single-process and a multi-process loader are the same fetch). Each unit gets the median per
step a side, the interval of that median, and the conservative interval of the delta, as the
whole graph's; a unit is significant when the delta's interval excludes 0, the steps are
enough to separate (verdict.separable) and the delta reaches MIN_EFFECT_SHARE of A's step.
Per step the units add up to the step's wall time, so they split the whole-graph delta.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from parsers.chrome_trace import LOADER_PREFIX
from rootcause.analysis.verdict import separable
from rootcause.stats import MIN_EFFECT_SHARE, median_ci

OUTSIDE = "(outside host ops)"


def op_key(name: str) -> str:
    """The name two sides share: 'enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__' and
    its multi-process twin are one fetch."""
    return f"{LOADER_PREFIX}__next__" if name.startswith(LOADER_PREFIX) else name


def step_thread(steps: pd.DataFrame, host: pd.DataFrame) -> tuple[str, str] | None:
    """(pid, tid) of the host span that is the first step's own (same name and start)."""
    first = steps.iloc[0]
    hit = host[(host["name"] == first["name"]) & (host["start_ns"] == int(first["start_ns"]))]
    if hit.empty:
        return None
    return str(hit["pid"].iloc[0]), str(hit["tid"].iloc[0])


def per_step(steps: pd.DataFrame, host: pd.DataFrame) -> pd.DataFrame | None:
    """steps x op keys: ns of top-level host spans per step (module doc), with OUTSIDE; None
    when the step's thread is not among the host spans."""
    thread = step_thread(steps, host)
    if thread is None:
        return None
    mine = host[(host["pid"] == thread[0]) & (host["tid"] == thread[1])]
    mine = mine.sort_values(["start_ns", "duration_ns"], ascending=[True, False], kind="stable")
    starts, ends, names = (mine[c].to_numpy() for c in ("start_ns", "end_ns", "name"))
    rows = []
    for s in steps.itertuples(index=False):
        lo, hi = np.searchsorted(starts, [s.start_ns, s.end_ns], side="left")
        row: dict[str, float] = {}
        reach = -1
        for i in range(lo, hi):
            if ends[i] > s.end_ns or starts[i] < reach:
                continue  # runs past the step, or is inside a span already counted
            if names[i] == s.name and starts[i] == s.start_ns:
                continue  # the step's own span
            key = op_key(names[i])
            row[key] = row.get(key, 0.0) + float(ends[i] - starts[i])
            reach = ends[i]
        row[OUTSIDE] = float(s.duration_ns) - sum(row.values())
        rows.append(row)
    return pd.DataFrame(rows).fillna(0.0)


def _ival(x: np.ndarray) -> dict[str, float]:
    lo, hi = median_ci(x)  # one step: both ends are that step
    return {"median": float(np.median(x)), "low": lo, "high": hi}


def host_units(steps_a: pd.DataFrame, host_a: pd.DataFrame | None, steps_b: pd.DataFrame,
               host_b: pd.DataFrame | None, top: int = 12) -> dict[str, Any] | None:
    """The 'host' section of attribution.json (module doc), the largest |delta| first; None when
    either side has no steps or no host spans on the steps' thread."""
    if host_a is None or host_b is None or steps_a.empty or steps_b.empty:
        return None
    a, b = per_step(steps_a, host_a), per_step(steps_b, host_b)
    if a is None or b is None:
        return None
    keys = sorted(set(a.columns) | set(b.columns))
    a, b = a.reindex(columns=keys, fill_value=0.0), b.reindex(columns=keys, fill_value=0.0)
    enough = separable(len(a), len(b))
    floor = MIN_EFFECT_SHARE * float(np.median(steps_a["duration_ns"].to_numpy("float64")))
    units = []
    for key in keys:
        ia, ib = _ival(a[key].to_numpy()), _ival(b[key].to_numpy())
        delta = {"median": ib["median"] - ia["median"], "low": ib["low"] - ia["high"], "high": ib["high"] - ia["low"]}
        units.append({"name": key, "a": ia, "b": ib, "delta_ns": delta,
                      "significant": bool(enough and (delta["low"] > 0 or delta["high"] < 0)
                                          and abs(delta["median"]) >= floor)})
    units.sort(key=lambda u: -abs(u["delta_ns"]["median"]))
    return {"what": "per step, the top-level spans of the host thread that runs the steps, inclusive, summed by "
                    f"name; '{OUTSIDE}' is the rest of the step; B - A per step",
            "steps": {"a": len(a), "b": len(b)}, "units": units[:top], "units_total": len(units)}
