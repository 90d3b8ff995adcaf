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
from operator import attrgetter
from typing import TYPE_CHECKING, Any, BinaryIO

import msgspec

from parsers.events import check_intervals, frame, int_column, str_column
from parsers.jsonstream import iter_batches

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


# The keys read from each record, in both spellings; the other ~40 keys are skipped unbuilt.
# Values stay untyped (Any) here: int_column / str_column check them and name a bad record.
_Record = msgspec.defstruct(
    "_Record", [("name", Any, None), ("start", Any, None), ("end", Any, None), ("kind", Any, 10)]
    + [(key, Any, None) for pair in _FIELDS.values() for key in pair], gc=False)


def read_stream(stream: BinaryIO, file: str) -> "pd.DataFrame":
    import numpy as np

    unit, batches = iter_batches(stream, file, _Record)
    cols: dict[str, list] = {k: [] for k in ("kernel", "start_ns", "end_ns", *_FIELDS)}
    labels: list = []
    getters = None
    for numbers, recs in batches:
        kinds = list(map(attrgetter("kind"), recs))
        if not set(map(type, kinds)) <= {int} or not set(kinds) <= set(KERNEL_KINDS):  # memcpy, memset...: kernels only
            keep = [i for i, kind in enumerate(kinds) if type(kind) is int and kind in KERNEL_KINDS]
            numbers, recs = [numbers[i] for i in keep], [recs[i] for i in keep]
        if not recs:
            continue
        if getters is None:  # spelling chosen once, from the first kernel record
            first = recs[0]
            camel = first.name is not None and first.gridX is not None and first.grid_x is None
            getters = {"kernel": "name", "start_ns": "start", "end_ns": "end",
                       **{col: pair[1] if camel else pair[0] for col, pair in _FIELDS.items()}}
        labels.append(np.arange(numbers.start, numbers.stop) if isinstance(numbers, range)
                      else np.asarray(numbers, dtype=np.int64))
        for col, key in getters.items():
            cols[col].extend(map(attrgetter(key), recs))
    labels = np.concatenate(labels) if labels else np.zeros(0, dtype=np.int64)
    out = {
        "kernel": str_column(cols["kernel"], labels, unit, file, "name"),
        "start_ns": int_column(cols["start_ns"], labels, unit, file, "start", optional=False),
        "end_ns": int_column(cols["end_ns"], labels, unit, file, "end", optional=False),
    }
    for col in _FIELDS if getters else ():
        out[col] = int_column(cols[col], labels, unit, file, getters[col])
    if getters:
        out["shared_bytes"] = out.pop("static_shared") + out.pop("dynamic_shared")
    df = frame(out, SOURCE)
    return check_intervals(df, file, unit, labels)
