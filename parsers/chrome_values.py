"""The numbers of a Chrome trace (parsers.chrome_trace): microseconds to int64 nanoseconds, ids
to ints, [x, y, z] triples, each checked, the first bad value named with its event."""
from __future__ import annotations

import math
from itertools import chain
from operator import attrgetter
from typing import Any

from parsers.base import ParseError


MAX_US = 2.0 ** 63 / 1000  # microseconds whose ns still fit int64


def times(events: list) -> tuple:
    """(start us, end us, ok) float arrays of events' ts and ts + dur; ok: both finite numbers."""
    import numpy as np

    ts = floats(list(map(attrgetter("ts"), events)))
    dur = floats(list(map(attrgetter("dur"), events)))
    ok = np.isfinite(ts) & np.isfinite(dur) & (dur >= 0) & (np.abs(ts) < MAX_US)
    return ts, ts + np.where(ok, dur, 0), ok


def floats(values: list) -> Any:
    """Numbers as float64, NaN where a value is not an int or float (a bool, a string...)."""
    import numpy as np

    if set(map(type, values)) <= {int, float}:
        try:
            return np.array(values, dtype=float)
        except OverflowError:  # an int past a float's range
            pass
    return np.array([v if type(v) in (int, float) and abs(v) < MAX_US else np.nan for v in values], dtype=float)


def ns_column(values: list, labels: list, file: str, key: str):
    """Microseconds (ints or floats) -> int64 ns, the first bad value named."""
    import numpy as np

    types = set(map(type, values))
    if types == {int}:  # whole microseconds: exact in int64
        try:
            us = np.array(values, dtype=np.int64)
        except OverflowError:
            us = None
        if us is not None and (np.abs(us) < MAX_US - 1).all():
            return us * 1000
    try:
        us = np.array(values, dtype=float) if values else np.zeros(0)
    except (OverflowError, TypeError, ValueError):  # an int past a float's range, a string...
        us = None
    if us is not None and types <= {int, float}:
        if np.isfinite(us).all() and (np.abs(us) < MAX_US - 1).all():
            # whole microseconds times 1000 exactly, plus the fraction's ns: a float's
            # product (us * 1000) would lose up to 128 ns at today's epoch times
            whole = np.floor(us)
            ints = np.array([v if type(v) is int else 0 for v in values], dtype=np.int64)
            is_int = np.array([type(v) is int for v in values], dtype=bool)
            ints = np.where(is_int, ints, whole.astype(np.int64))
            return ints * 1000 + np.where(is_int, 0, np.rint((us - whole) * 1000)).astype(np.int64)
    for label, value in zip(labels, values):
        us_to_ns(value, file, label, key)
    return np.array([us_to_ns(v, file, k, key) for k, v in zip(labels, values)], dtype=np.int64)


def us_to_ns(value: Any, file: str, index: int, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        what = "missing" if value is None else f"expected a number of microseconds, got {value!r}"
        raise ParseError(file, f"event {index}", f"column {key!r}: {what}")
    if isinstance(value, float) and not math.isfinite(value) or not abs(value) < MAX_US - 1:
        raise ParseError(file, f"event {index}", f"column {key!r}: {value!r} microseconds is beyond the int64 ns range")
    whole = math.floor(value)
    return whole * 1000 + round((value - whole) * 1000)


def minus(end: Any, start: Any, file: str, index: int) -> Any:
    if not finite(end) or not finite(start):
        raise ParseError(file, f"event {index}", "column 'ts': 'B'/'E' pair without numeric ts")
    return end - start


def finite(value: Any) -> bool:
    return (type(value) is int or type(value) is float) and math.isfinite(value) and abs(value) < MAX_US


def plain(value: Any) -> bool:
    """A pid or tid usable as a key (a mutated file may hold a list there)."""
    return value is None or type(value) in (int, str, float)


def int_or_none(value: Any) -> int | None:
    return value if type(value) is int and -(1 << 63) <= value < (1 << 63) else None


def triples(values: list, labels: list, file: str, key: str) -> list[list]:
    """[xs, ys, zs] of [x, y, z] values (None: all three NA)."""
    if values and set(map(type, values)) == {list} and set(map(len, values)) == {3}:
        flat = list(chain.from_iterable(values))  # a flat list converts far faster than nested ones
        if set(map(type, flat)) == {int}:
            return [flat[0::3], flat[1::3], flat[2::3]]
    out: list[list] = [[], [], []]
    for label, value in zip(labels, values):
        if value is None:
            value = (None, None, None)
        elif not isinstance(value, list) or len(value) != 3:
            raise ParseError(file, f"event {label}", f"column 'args.{key}': expected [x, y, z], got {value!r}")
        for n in range(3):
            out[n].append(value[n])
    return out
