"""The KernelEvents table every profiler reader returns: its columns and one way to build it.

One row per kernel launch. Times are nanoseconds on the profiler's own clock. This module is
the single source of truth for the column list; rootcause.model re-exports it as
KERNEL_EVENT_COLUMNS so stages outside parsers/ see the same names.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from parsers.base import ParseError

if TYPE_CHECKING:  # pandas is imported where a table is built, so rootcause.model stays light
    import pandas as pd

EVENT_COLUMNS: dict[str, str] = {
    "kernel": "kernel (function) name as launched, demangled where the profiler demangles",
    "start_ns": "launch start, ns (int64); ncu has no timeline: its rows are laid back to back",
    "end_ns": "launch end, ns (int64)",
    "duration_ns": "end_ns - start_ns (int64)",
    "grid_x": "grid (blocks / workgroups) x; NA where the profiler has none",
    "grid_y": "grid y",
    "grid_z": "grid z",
    "block_x": "block (threads / workgroup size) x",
    "block_y": "block y",
    "block_z": "block z",
    "registers": "registers per thread (VGPRs on AMD), NA when not recorded",
    "shared_bytes": "static + dynamic shared memory (LDS) per block, bytes",
    "local_bytes": "local (scratch) memory per thread, bytes",
    "stream": "stream / queue id",
    "device": "device id",
    "correlation_id": "host-side launch correlation id, NA when absent",
    "call": "graph call index (0..n-1) after splitting into graph calls, -1 when not split",
    "source": "which importer produced the row: cupti, ncu, rocprof, nsys, chrome, iree-profile",
    # Added for traces that hold more than kernels (Kineto): the rows above keep their meaning.
    "kind": "kernel, memcpy or memset (categorical; copies and fills are GPU rows too, read from Chrome/Kineto so far)",
    "external_id": "Kineto 'External id' linking the row to its CPU op, NA when absent",
    "bytes": "bytes copied or set (memcpy / memset rows), NA for kernels",
    "cpu_op": "name of the CPU op that launched the row (Kineto), missing (None/NaN) when the trace does not say",
    "module_path": "the nn.Module instances around the launch, outermost first, joined by '.' ('BertModel_0."
                   "BertEncoder_0.BertLayer_1'; Kineto's python_function 'nn.Module: X_n' spans, with_modules / "
                   "with_stack), missing where the trace records none",
    # Hardware counters of the launch (ncu's raw page, the metrics named in parsers/ncu_csv.py
    # COUNTERS), NA where the profile did not count them: activity tracers never do.
    "global_sectors": "32-byte L1 sectors the global loads and stores touched",
    "global_requests": "global load and store requests (one per warp-wide instruction)",
    "l2_sectors": "L2 sectors read and written",
    "shared_wavefronts": "shared-memory wavefronts of loads and stores (more than one an instruction: bank conflicts)",
    "shared_instructions": "warp-level shared-memory load and store instructions executed",
}

INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
# Required, never NA: a launch without a name or an interval is not an event.
TIME_COLUMNS = ("start_ns", "end_ns", "duration_ns")
# Hardware-counter columns (see EVENT_COLUMNS): NA unless a counter profile recorded them.
COUNTER_COLUMNS = ("global_sectors", "global_requests", "l2_sectors", "shared_wavefronts", "shared_instructions")
# Nullable integers (pandas Int64): absent in some formats.
OPTIONAL_INT_COLUMNS = (
    "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z", "registers",
    "shared_bytes", "local_bytes", "stream", "device", "correlation_id", "external_id", "bytes",
    *COUNTER_COLUMNS,
)
KINDS = ("kernel", "memcpy", "memset")
# The least value a launch can have: CUDA and HIP refuse a zero grid or block dimension.
LEAST = {**{f"{p}_{a}": 1 for p in ("grid", "block") for a in "xyz"},
         "registers": 0, "shared_bytes": 0, "local_bytes": 0, "bytes": 0,
         **{c: 0 for c in COUNTER_COLUMNS}}


def empty() -> pd.DataFrame:
    return frame({"kernel": [], "start_ns": [], "end_ns": []}, source="")


def frame(columns: dict[str, Any], source: str,
          rows: tuple[str, str, Sequence[int]] | None = None) -> pd.DataFrame:
    """A KernelEvents table from column arrays; missing optional columns become NA.

    `columns` needs kernel, start_ns and end_ns (duration_ns is derived when absent). Integer
    arrays may hold None/NaN for absent values. Rows keep the given order. rows = (file, unit,
    labels): float arrays (from CSV and SQL readers) are checked to hold whole int64 values
    first, the first bad one named f"{unit} {labels[i]}", so none wraps silently.
    """
    import numpy as np
    import pandas as pd

    if rows is not None:
        for name in (*TIME_COLUMNS, *OPTIONAL_INT_COLUMNS):
            values = columns.get(name)
            if values is not None and getattr(values, "dtype", None) is not None:
                check_int64(values, *rows, name, required=name in TIME_COLUMNS)
    n = len(columns["kernel"])
    out: dict[str, Any] = {"kernel": pd.array(columns["kernel"], dtype=object)}
    start = np.asarray(columns["start_ns"], dtype=np.int64)
    end = np.asarray(columns["end_ns"], dtype=np.int64)
    out["start_ns"] = start
    out["end_ns"] = end
    dur = columns.get("duration_ns")
    out["duration_ns"] = end - start if dur is None else np.asarray(dur, dtype=np.int64)
    for name in OPTIONAL_INT_COLUMNS:
        values = columns.get(name)
        if values is None:  # all NA, built without a million-element list
            out[name] = pd.arrays.IntegerArray(np.zeros(n, dtype=np.int64), np.ones(n, dtype=bool))
        else:
            out[name] = pd.array(_ints(values), dtype="Int64")
    out["call"] = np.full(n, -1, dtype=np.int64)
    out["source"] = pd.array([source] * n, dtype=object)
    kind = columns.get("kind")
    codes = np.zeros(n, dtype=np.int8) if kind is None else pd.Categorical(kind, categories=KINDS).codes
    if (codes < 0).any():
        raise ValueError(f"kind: not one of {KINDS}")  # a reader's own bug, not the input's
    out["kind"] = pd.Categorical.from_codes(codes, categories=KINDS)  # a byte a row, not an object
    op = columns.get("cpu_op")
    out["cpu_op"] = pd.array([None] * n if op is None else op, dtype=object)
    module = columns.get("module_path")
    out["module_path"] = pd.array([None] * n if module is None else module, dtype=object)
    return pd.DataFrame(out, columns=list(EVENT_COLUMNS), copy=False)  # readers hand over arrays they do not reuse


def _ints(values: Any) -> Any:
    """Values for an Int64 array: floats with NaN (from CSV readers) become ints with NA."""
    import numpy as np
    import pandas as pd

    if isinstance(values, pd.Series):
        values = values.to_numpy()
    if isinstance(values, np.ndarray) and values.dtype.kind == "f":
        mask = np.isnan(values)
        return pd.arrays.IntegerArray(np.where(mask, 0, values).astype(np.int64), mask)
    return values


def to_int(value: Any, file: str, where: str, column: str, optional: bool = True) -> int | None:
    """One record's integer field, or a ParseError naming the file, record and column."""
    if value is None:
        if optional:
            return None
        raise ParseError(file, where, f"column {column!r}: missing")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ParseError(file, where, f"column {column!r}: expected an integer, got {value!r}")
    if isinstance(value, float):
        if not math.isfinite(value) or value != int(value):
            raise ParseError(file, where, f"column {column!r}: expected an integer, got {value!r}")
        value = int(value)
    if not INT64_MIN <= value <= INT64_MAX:
        raise ParseError(file, where, f"column {column!r}: {value} is beyond the int64 range")
    return value


def check_int64(values: Any, file: str, unit: str, labels: Sequence[int], column: str,
                required: bool = False) -> None:
    """A float or integer array must hold whole numbers within int64 (NaN allowed unless
    required): the first value that is not names its row, so nothing wraps to INT64_MIN."""
    import numpy as np

    arr = np.asarray(values)
    if arr.dtype.kind == "i":
        return
    if arr.dtype.kind == "u":
        bad = arr > INT64_MAX
    else:
        arr = arr.astype(float, copy=False)
        with np.errstate(invalid="ignore"):
            bad = ~np.isnan(arr) & ((arr >= 2.0 ** 63) | (arr < -2.0 ** 63) | (arr != np.round(arr)))
            if required:
                bad |= np.isnan(arr)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        value = arr[i].item()  # a Python number, printed plainly
        what = "missing" if value != value else (f"{value!r} is beyond the int64 range" if abs(value) >= 2.0 ** 63
                                                 else f"expected an integer, got {value!r}")
        raise ParseError(file, f"{unit} {labels[i]}", f"column {column!r}: {what}")


def require_columns(present: Iterable[str], required: Iterable[str], file: str, where: str) -> None:
    missing = [c for c in required if c not in set(present)]
    if missing:
        raise ParseError(file, where, f"missing required column(s): {', '.join(missing)}")


def check_intervals(df: pd.DataFrame, file: str, unit: str = "record",
                    labels: Sequence[int] | None = None) -> pd.DataFrame:
    """end >= start for every row, and launch values a launch can have (grid and block
    dimensions >= 1, registers and byte counts >= 0, where known); the first bad row is named
    (labels[i] when given)."""
    import numpy as np

    bad = np.flatnonzero(df["end_ns"].to_numpy() < df["start_ns"].to_numpy())
    if bad.size:
        i = int(bad[0])
        raise ParseError(file, f"{unit} {labels[i] if labels is not None else i}", f"end {df['end_ns'].iat[i]} before start {df['start_ns'].iat[i]}")
    for column, least in LEAST.items():
        values = df[column].array
        low = np.flatnonzero(~values.isna() & (values.fillna(least).to_numpy() < least))
        if low.size:
            i = int(low[0])
            raise ParseError(file, f"{unit} {labels[i] if labels is not None else i}",
                             f"column {column!r}: {values[i]} (a launch has at least {least})")
    return df


def int_column(values: list, labels: list[int], unit: str, file: str, column: str,
               optional: bool = True) -> Any:
    """An int64 array (required) or pandas Int64 array (optional) from one field of records.

    The fast path converts the whole list at once; only when that fails is the list walked to
    name the first bad record (`f"{unit} {labels[i]}"`) and its value.
    """
    import numpy as np
    import pandas as pd

    types = set(map(type, values))
    if types == {int}:  # the common case, ~2x faster than np.array
        try:
            return np.fromiter(values, dtype=np.int64, count=len(values))
        except OverflowError:  # past int64: the walk below names it
            pass
    if optional and types in ({int, type(None)}, {type(None)}):  # a field some or all records lack
        try:
            ints = np.fromiter((0 if v is None else v for v in values), dtype=np.int64, count=len(values))
        except OverflowError:
            pass
        else:
            return pd.arrays.IntegerArray(ints, np.fromiter((v is None for v in values), dtype=bool, count=len(values)))
    try:  # a huge int or an odd object falls to the walk below, which names it
        arr = np.array(values) if values else np.zeros(0, dtype=np.int64)
    except (OverflowError, ValueError, TypeError):
        arr = np.zeros(0, dtype=object)
    if arr.ndim == 1 and len(arr) == len(values) and (
            arr.dtype.kind == "i" or arr.dtype.kind == "u" and (not arr.size or arr.max() <= INT64_MAX)):
        return arr.astype(np.int64, copy=False)
    ints, mask = [], []
    for label, value in zip(labels, values):
        got = to_int(value, file, f"{unit} {label}", column, optional)
        ints.append(0 if got is None else got)
        mask.append(got is None)
    if not optional:
        return np.array(ints, dtype=np.int64)
    return pd.arrays.IntegerArray(np.array(ints, dtype=np.int64), np.array(mask, dtype=bool))


def str_column(values: list, labels: Sequence[int], unit: str, file: str, column: str) -> Any:
    """A required string field of records as an object array; equal names share one object
    (a million launches of a few kernels cost a few strings, not a million)."""
    import numpy as np
    import pandas as pd

    try:  # fromiter: a list value stays one object (np.array would nest it)
        codes, names = pd.factorize(np.fromiter(values, dtype=object, count=len(values)))
        ok = not (codes < 0).any() and all(isinstance(name, str) for name in names)
    except TypeError:  # an unhashable value (a list, an object)
        ok = False
    if not ok:
        for i, value in enumerate(values):  # name the first bad record
            if not isinstance(value, str):
                what = "missing" if value is None else f"expected a string, got {value!r}"
                raise ParseError(file, f"{unit} {labels[i]}", f"column {column!r}: {what}")
    return names.take(codes)
