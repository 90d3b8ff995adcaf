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
import json
import os
from typing import TYPE_CHECKING, Any

from parsers.base import ParseError
from parsers.events import check_intervals, frame, int_column, str_column

if TYPE_CHECKING:
    import pandas as pd

SOURCE = "iree-profile"
_DISPATCH_TYPES = {("type", "host_dispatch_event"), ("record_type", "host_execution_event")}


def matches(data: bytes) -> bool:
    head = data[:4096].lstrip()
    return head[:1] == b"{" and (b'"host_dispatch_event"' in head or b'"format":"ireeperf-jsonl"' in head
                                 or b'"type":"dispatch_summary"' in head or b'"iree_host_time_ns"' in head)


def read_path(path: str | os.PathLike) -> "pd.DataFrame":
    with open(path, "rb") as f:
        return _read(f, str(path))


def events(data: bytes, file: str = "<bytes>") -> "pd.DataFrame":
    return _read(io.BytesIO(data), file)


def _read(stream, file: str) -> "pd.DataFrame":
    cols: dict[str, list] = {k: [] for k in ("kernel", "start_ns", "end_ns", "wg", "ws", "stream", "device", "id")}
    labels: list[int] = []
    device_rows = 0
    for lineno, raw in enumerate(stream, 1):
        if not raw.strip():
            continue
        try:
            row = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise ParseError(file, f"line {lineno}", f"bad JSON Lines record: {getattr(err, 'msg', err)}") from None
        except RecursionError:
            raise ParseError(file, f"line {lineno}", "bad JSON Lines record: nested too deeply") from None
        if not isinstance(row, dict):
            raise ParseError(file, f"line {lineno}", f"expected an object, got {type(row).__name__}")
        kind = ("type", row["type"]) if "type" in row else ("record_type", row.get("record_type"))
        if not isinstance(kind[1], (str, type(None))):
            raise ParseError(file, f"line {lineno}", f"column {kind[0]!r}: expected a string, got {kind[1]!r}")
        if kind[1] == "dispatch_event":
            device_rows += 1
            continue
        if kind not in _DISPATCH_TYPES or (kind[0] == "record_type" and row.get("op") != "dispatch"):
            continue
        if row.get("valid") is False:
            continue
        labels.append(lineno)
        cols["kernel"].append(row.get("key"))
        cols["start_ns"].append(row.get("start_host_time_ns"))
        cols["end_ns"].append(row.get("end_host_time_ns"))
        cols["wg"].append(_triple(row, "workgroup_count", file, lineno))
        cols["ws"].append(_triple(row, "workgroup_size", file, lineno))
        cols["stream"].append(row.get("stream_id"))
        cols["device"].append(row.get("physical_device_ordinal"))
        cols["id"].append(row.get("event_id"))
    if device_rows and not labels:
        raise ParseError(file, "line 1", f"{device_rows} device-timestamped dispatch_event rows: not supported "
                                         "(host-execution profiles only)")
    out: dict[str, Any] = {
        "kernel": str_column(cols["kernel"], labels, "line", file, "key"),
        "start_ns": int_column(cols["start_ns"], labels, "line", file, "start_host_time_ns", optional=False),
        "end_ns": int_column(cols["end_ns"], labels, "line", file, "end_host_time_ns", optional=False),
        "stream": int_column(cols["stream"], labels, "line", file, "stream_id"),
        "device": int_column(cols["device"], labels, "line", file, "physical_device_ordinal"),
        "correlation_id": int_column(cols["id"], labels, "line", file, "event_id"),
    }
    for prefix, key, name in (("grid", "wg", "workgroup_count"), ("block", "ws", "workgroup_size")):
        for k, axis in enumerate("xyz"):
            out[f"{prefix}_{axis}"] = int_column([t[k] for t in cols[key]], labels, "line", file, name)
    return check_intervals(frame(out, SOURCE), file, "line", labels)


def _triple(row: dict, key: str, file: str, lineno: int) -> list:
    value = row.get(key)
    if value is None:
        return [None, None, None]
    if not isinstance(value, list) or len(value) != 3:
        raise ParseError(file, f"line {lineno}", f"column {key!r}: expected [x, y, z], got {value!r}")
    return value
