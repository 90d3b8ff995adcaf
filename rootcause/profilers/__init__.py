"""Profiler captures -> one KernelEvents table (parsers/events.py), split into graph calls.

load(path) sniffs the format from the file's first bytes (the extension only breaks ties),
reading gzip, zstd, bz2, xz and LZ4-frame files through (told by their magic bytes), calls the
pure reader in parsers/, and returns the events sorted by start with 'source' set.
load_capture(path) gives the whole reading: memcpy/memset rows too, ProfilerStep spans and the
GPU names a Kineto trace carries.
"""
from __future__ import annotations

import gc
import importlib
import os
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

import pandas as pd

from parsers import ParseError
from rootcause.errors import UsageError
from rootcause.profilers.calls import call_summary, split_calls

__all__ = ["FORMATS", "Capture", "load", "load_capture", "load_ncu", "sniff", "split_calls", "call_summary"]

# format name -> reader module. Sniffing tries them in this order: binary and CSV formats
# first, then the JSON dialects from most to least specific.
FORMATS: dict[str, str] = {
    "nsys": "parsers.nsys_sqlite",
    "ncu": "parsers.ncu_csv",
    "rocprof": "parsers.rocprof",
    "iree-profile": "parsers.iree_profile",
    "chrome": "parsers.chrome_trace",
    "cupti": "parsers.cupti_json",
}
_HEAD_BYTES = 1 << 16


def _reader(fmt: str):
    return importlib.import_module(FORMATS[fmt])


def sniff(head: bytes, name: str = "") -> str | None:
    """The format whose magic check accepts these first (uncompressed) bytes, or None."""
    for fmt in FORMATS:
        try:
            if _reader(fmt).matches(head):
                return fmt
        except ModuleNotFoundError:
            continue
    return None


@dataclass
class Capture:
    """One capture file read: events (every row the reader gives, `kind` kernel / memcpy /
    memset), steps (ProfilerStep#N spans, parsers.chrome_trace.STEP_COLUMNS; empty where the
    format has none), devices (device id -> GPU name, from Kineto's deviceProperties), rank
    (distributedInfo.rank), format and codec (the compression read through, or None)."""

    events: pd.DataFrame
    steps: pd.DataFrame
    devices: dict[int, str] = field(default_factory=dict)
    rank: int | None = None
    format: str = ""
    codec: str | None = None
    host: pd.DataFrame | None = None  # host spans (parsers.chrome_trace.HOST_COLUMNS); None where the format has none


def load(path: str | os.PathLike, format: str = "auto",
         kinds: Iterable[str] | None = ("kernel",)) -> pd.DataFrame:
    """KernelEvents of one capture file, sorted by start_ns. kinds: the rows kept by `kind`
    (kernels only by default, as every stage so far expects; None keeps memcpy and memset too)."""
    events = load_capture(path, format).events
    if kinds is not None:
        keep = events["kind"].isin(list(kinds)).to_numpy()
        if not keep.all():
            events = events[keep].reset_index(drop=True)
    return events


def load_capture(path: str | os.PathLike, format: str = "auto") -> Capture:
    """Every row, the steps and the GPU names of one capture file, compressed or not.

    The format is sniffed from the first (decompressed) bytes; a JSON object whose first key
    is not a known one is searched for a "traceEvents" key, however long its header."""
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"{path}: no such file")
    if format != "auto" and format not in FORMATS:
        raise UsageError(f"{path}: unknown profile format {format!r} (known: {', '.join(FORMATS)})")
    with _gc_paused():
        capture = _read_capture(path, format)
    if not capture.events["start_ns"].is_monotonic_increasing:
        capture.events = capture.events.sort_values("start_ns", kind="stable").reset_index(drop=True)
    return capture


@contextmanager
def _gc_paused():
    """The cycle collector off while a reader runs: a reader builds a million records that all
    stay alive until the table is built, so the collector's passes over them free nothing
    (15% of a 1M-event Chrome trace's read, 8 full passes)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _read_capture(path: Path, format: str) -> Capture:
    from parsers import compression

    with open(path, "rb") as f:
        codec = compression.codec(f.read(8))
        f.seek(0)
        data = b""
        if codec:  # every reader takes bytes; a compressed capture is read whole, once
            with compression.open_stream(f, codec, str(path)) as stream:
                data = stream.read()
        head = data[:_HEAD_BYTES] if codec else f.read(_HEAD_BYTES)
        fmt = sniff(head, path.name) if format == "auto" else format
        if fmt is None and head.lstrip()[:1] == b"{" and (
                b'"traceEvents"' in data if codec else _has_trace_events(head, f)):
            fmt = "chrome"
    if fmt is None:
        raise ParseError(str(path), "byte 0", f"not a profile format rootcause reads ({', '.join(FORMATS)})"
                         + (f", read through {codec}" if codec else ""))
    reader = _reader(fmt)
    if fmt == "chrome":
        trace = reader.read_trace(data, str(path)) if codec else reader.read_trace_path(path)
        capture = Capture(trace.events, trace.steps, trace.devices, trace.rank, host=trace.host)
    else:
        if codec:
            events = reader.events(data, str(path))
        elif hasattr(reader, "read_path"):  # streams: a huge capture is never held whole
            events = reader.read_path(path)
        else:
            events = reader.events(path.read_bytes(), str(path))
        capture = Capture(events, _no_steps())
    capture.format, capture.codec = fmt, codec
    return capture


def _has_trace_events(head: bytes, stream) -> bool:
    """Whether a "traceEvents" key follows in the stream (read on in 1 MiB pieces; the
    stream is left wherever the key was found, or at its end)."""
    tail = head[-16:]
    if b'"traceEvents"' in head:
        return True
    while True:
        piece = stream.read(1 << 20)
        if not piece:
            return False
        if b'"traceEvents"' in tail + piece:
            return True
        tail = piece[-16:]


def _no_steps() -> pd.DataFrame:
    from parsers.chrome_trace import STEP_COLUMNS

    return pd.DataFrame({c: [] for c in STEP_COLUMNS})


def load_ncu(path: str | os.PathLike, metrics: bool | list[str] = True):
    """An ncu CSV with its wide metrics table (parsers.ncu_csv.NcuReport): every metric column,
    or only the named ones the file has (cheaper on a wide capture)."""
    from parsers import ncu_csv

    path = Path(path)
    if not path.is_file():
        raise UsageError(f"{path}: no such file")
    return ncu_csv.read_report(path, metrics)
