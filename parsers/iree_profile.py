"""IREE HAL-native profile JSONL (IREE 3.13 `iree-profile`), dispatch rows -> KernelEvents.

Two JSONL streams of the same .ireeprof bundle are read:
- `iree-profile dispatch --dispatch_events --format=jsonl`: rows keyed by "type";
  "host_dispatch_event" rows (host-execution profiling on local-task) carry key (the dispatch
  function), start_host_time_ns, end_host_time_ns, workgroup_count, workgroup_size,
  stream_id, physical_device_ordinal, event_id; a "dispatch_summary" row ends the stream.
- `iree-profile export --format=ireeperf-jsonl`: rows keyed by "record_type", the first a
  "schema" row; "host_execution_event" rows with op == "dispatch" have the same fields
  (allocations, fills and copies are other ops and are skipped).
Rows with valid == false are skipped (IREE marks events it could not time). Device-timestamped
"dispatch_event" rows (GPU backends) are refused by name: no real capture of them was at hand.
"""
from __future__ import annotations

import io
import os
from itertools import chain
from operator import attrgetter
from typing import TYPE_CHECKING, Any

import msgspec

from parsers.base import ParseError
from parsers.events import check_intervals, frame, int_column, str_column
from parsers.jsonstream import iter_batches

if TYPE_CHECKING:
    import pandas as pd

SOURCE = "iree-profile"


def matches(data: bytes) -> bool:
    head = data[:4096].lstrip()
    return head[:1] == b"{" and (b'"host_dispatch_event"' in head or b'"format":"ireeperf-jsonl"' in head
                                 or b'"type":"dispatch_summary"' in head or b'"iree_host_time_ns"' in head)


def read_path(path: str | os.PathLike) -> "pd.DataFrame":
    with open(path, "rb") as f:
        return _read(f, str(path))


def events(data: bytes, file: str = "<bytes>") -> "pd.DataFrame":
    return _read(io.BytesIO(data), file)


# The keys read from each row; the other ~15 are skipped unbuilt (parsers.jsonstream).
_Row = msgspec.defstruct("_Row", [(k, Any, None) for k in (
    "type", "record_type", "op", "valid", "key", "start_host_time_ns", "end_host_time_ns", "workgroup_count",
    "workgroup_size", "stream_id", "physical_device_ordinal", "event_id")], gc=False)


def _read(stream, file: str) -> "pd.DataFrame":
    _, batches = iter_batches(stream, file, _Row)
    kept: list = []
    labels: list = []
    device_rows = 0
    for numbers, rows in batches:
        types, record_types = list(map(_TYPE, rows)), list(map(_RECORD_TYPE, rows))
        if not set(map(type, types)) | set(map(type, record_types)) <= {str, type(None)}:
            _first_odd_type(numbers, types, record_types, file)
        seen = set(types) | set(record_types)
        device_rows += types.count("dispatch_event") + record_types.count("dispatch_event")
        if "host_dispatch_event" in seen or "host_execution_event" in seen:
            valids, ops = list(map(_VALID, rows)), list(map(_OP, rows))
            keep = [k for k, (t, r, v, op) in enumerate(zip(types, record_types, valids, ops))
                    if v is not False and (t == "host_dispatch_event" or (t is None and r == "host_execution_event"
                                                                         and op == "dispatch"))]
            kept.extend(rows[k] for k in keep)
            labels.extend(numbers[k] for k in keep)
    if device_rows and not labels:
        raise ParseError(file, "line 1", f"{device_rows} device-timestamped dispatch_event rows: not supported "
                                         "(host-execution profiles only)")
    get = lambda key: list(map(attrgetter(key), kept))  # noqa: E731
    out: dict[str, Any] = {
        "kernel": str_column(get("key"), labels, "line", file, "key"),
        "start_ns": int_column(get("start_host_time_ns"), labels, "line", file, "start_host_time_ns", optional=False),
        "end_ns": int_column(get("end_host_time_ns"), labels, "line", file, "end_host_time_ns", optional=False),
        "stream": int_column(get("stream_id"), labels, "line", file, "stream_id"),
        "device": int_column(get("physical_device_ordinal"), labels, "line", file, "physical_device_ordinal"),
        "correlation_id": int_column(get("event_id"), labels, "line", file, "event_id"),
    }
    for prefix, key in (("grid", "workgroup_count"), ("block", "workgroup_size")):
        triples = _triples(get(key), labels, file, key)
        for k, axis in enumerate("xyz"):
            out[f"{prefix}_{axis}"] = int_column(triples[k], labels, "line", file, key)
    return check_intervals(frame(out, SOURCE), file, "line", labels)


_TYPE, _RECORD_TYPE, _VALID, _OP = (attrgetter(k) for k in ("type", "record_type", "valid", "op"))


def _first_odd_type(numbers, types: list, record_types: list, file: str) -> None:
    for lineno, t, r in zip(numbers, types, record_types):
        col, kind = ("type", t) if t is not None else ("record_type", r)
        if not isinstance(kind, (str, type(None))):
            raise ParseError(file, f"line {lineno}", f"column {col!r}: expected a string, got {kind!r}")


def _triples(values: list, labels: list, file: str, key: str) -> list[list]:
    """[xs, ys, zs] of [x, y, z] values (None: all three NA), the first bad one named."""
    if values and set(map(type, values)) == {list} and set(map(len, values)) == {3}:
        flat = list(chain.from_iterable(values))
        return [flat[0::3], flat[1::3], flat[2::3]]
    out: list[list] = [[], [], []]
    for lineno, value in zip(labels, values):
        if value is None:
            value = (None, None, None)
        elif not isinstance(value, list) or len(value) != 3:
            raise ParseError(file, f"line {lineno}", f"column {key!r}: expected [x, y, z], got {value!r}")
        for n in range(3):
            out[n].append(value[n])
    return out


