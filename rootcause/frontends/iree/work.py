"""Threads that do work in an IREE TileAndFuse dispatch, from its catalog alone.

TileAndFuse distributes a workgroup's tile over its threads by the lowering_config's thread
tile: along each loop with a thread tile t > 0, the workgroup tile w gives w / t threads, and the
product over those loops is the workgroup size. When the op's loop range r is smaller than w,
only ceil(min(w, r) / t) of those threads own an element. The loop ranges are the static ones
IREE writes into the dispatch name (`..._matmul_8x8x16384_f32`: M, N, K; 'D' for a dynamic one;
`..._softmax_16x1024x1024xf32`).
Loops with a reduction tile are walked by each thread serially, over their whole range.
"""
from __future__ import annotations

import math
import re
from typing import Any

# the ranges end at '_', at the element type written on ('...xf32') or at the name's end
_RANGES = re.compile(r"_dispatch_\d+_[a-z_]+?_((?:\d+|D)(?:x(?:\d+|D))*)(?=_|x[a-z]|$)")


def loop_ranges(name: str) -> list[int | None] | None:
    """[8, 8, 16384] from 'main_dispatch_0_matmul_8x8x16384_f32' (None for a dynamic 'D')."""
    m = _RANGES.search(name)
    return [None if d == "D" else int(d) for d in m.group(1).split("x")] if m else None


def threads_doing_work(name: str, schedule: dict[str, Any] | None) -> dict[str, Any] | None:
    """Threads of one workgroup that own an element, and each one's serial work; None where the
    dispatch is not TileAndFuse with thread tiles, a distributed range is dynamic, or the tiles
    do not reproduce the workgroup size (then the distribution is not the one this models)."""
    sched = schedule or {}
    lc = sched.get("lowering_config") or {}
    wg, th, red = lc.get("workgroup"), lc.get("thread"), lc.get("reduction") or []
    size, ranges = sched.get("workgroup_size"), loop_ranges(name)
    if sched.get("pipeline") != "TileAndFuse" or not (wg and th and size and ranges):
        return None
    if not len(wg) == len(th) == len(ranges) or any(not isinstance(x, int) for x in (*wg, *th, *size)):
        return None
    launched, active, per_thread = 1, 1, 1
    for w, t, r in zip(wg, th, ranges):
        if t <= 0:
            continue
        if r is None or w <= 0:
            return None
        launched *= w // t
        active *= math.ceil(min(w, r) / t)
        per_thread *= min(t, r)
    if launched != math.prod(size):
        return None
    serial = [r for i, r in enumerate(ranges) if i < len(red) and red[i] > 0]
    if any(r is None for r in serial):
        return None
    return {"threads_per_workgroup": launched, "threads_with_work": active, "outputs_per_thread": per_thread,
            "serial_elements_per_thread": per_thread * math.prod(serial), "loop_ranges": ranges,
            "workgroup_tile": wg, "thread_tile": th, "reduction_tile": red}
