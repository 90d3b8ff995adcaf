"""CUPTI kernel activity records dumped as JSON (a list of objects) or JSON Lines.

The records are what cupti-python's activity buffers hold for CUPTI_ACTIVITY_KIND_KERNEL /
CONCURRENT_KERNEL, one object per launch with the fields of CUpti_ActivityKernel: name,
start, end (ns, device timestamps), grid_x..z, block_x..z, registers_per_thread,
static_shared_memory, dynamic_shared_memory, local_memory_per_thread, correlation_id,
stream_id, device_id. The camelCase spelling of the C struct (gridX, registersPerThread, ...)
is accepted too. Records of another activity kind (memcpy, memset) are skipped.
"""
from __future__ import annotations

import io
import os
from typing import TYPE_CHECKING, BinaryIO

from parsers.base import ParseError
from parsers.events import check_intervals, frame, int_column, str_column
from parsers.jsonstream import iter_records

if TYPE_CHECKING:
    import pandas as pd

SOURCE = "cupti"
# CUpti_ActivityKind values of kernel records.
KERNEL_KINDS = (3, 10)

# event column -> (snake_case key, camelCase key)
_FIELDS = {
    "grid_x": ("grid_x", "gridX"), "grid_y": ("grid_y", "gridY"), "grid_z": ("grid_z", "gridZ"),
    "block_x": ("block_x", "blockX"), "block_y": ("block_y", "blockY"), "block_z": ("block_z", "blockZ"),
    "registers": ("registers_per_thread", "registersPerThread"),
    "static_shared": ("static_shared_memory", "staticSharedMemory"),
    "dynamic_shared": ("dynamic_shared_memory", "dynamicSharedMemory"),
    "local_bytes": ("local_memory_per_thread", "localMemoryPerThread"),
    "stream": ("stream_id", "streamId"),
    "device": ("device_id", "deviceId"),
    "correlation_id": ("correlation_id", "correlationId"),
}


def matches(data: bytes) -> bool:
    head = data[:4096].lstrip()
    return head[:1] in (b"[", b"{") and b'"name"' in head and (b'"grid_x"' in head or b'"gridX"' in head)


def events(data: bytes, file: str = "<bytes>") -> "pd.DataFrame":
    return read_stream(io.BytesIO(data), file)


def read_path(path: str | os.PathLike) -> "pd.DataFrame":
    with open(path, "rb") as stream:
        return read_stream(stream, str(path))


def read_stream(stream: BinaryIO, file: str) -> "pd.DataFrame":
    unit, records = iter_records(stream, file)
    cols: dict[str, list] = {k: [] for k in ("kernel", "start_ns", "end_ns", *_FIELDS)}
    labels: list[int] = []
    keys = None
    for label, rec in records:
        if not isinstance(rec, dict):
            raise ParseError(file, f"{unit} {label}", f"expected an object, got {type(rec).__name__}")
        if rec.get("kind", 10) not in KERNEL_KINDS:
            continue
        if keys is None:  # spelling chosen once, from the first kernel record
            camel = "name" in rec and "gridX" in rec and "grid_x" not in rec
            keys = [(col, pair[1] if camel else pair[0]) for col, pair in _FIELDS.items()]
        labels.append(label)
        get = rec.get
        cols["kernel"].append(get("name"))
        cols["start_ns"].append(get("start"))
        cols["end_ns"].append(get("end"))
        for col, key in keys:
            cols[col].append(get(key))
    out = {
        "kernel": str_column(cols["kernel"], labels, unit, file, "name"),
        "start_ns": int_column(cols["start_ns"], labels, unit, file, "start", optional=False),
        "end_ns": int_column(cols["end_ns"], labels, unit, file, "end", optional=False),
    }
    for col, key in keys or []:
        out[col] = int_column(cols[col], labels, unit, file, key)
    if keys:
        out["shared_bytes"] = out.pop("static_shared") + out.pop("dynamic_shared")
    df = frame(out, SOURCE)
    return check_intervals(df, file, unit, labels)
