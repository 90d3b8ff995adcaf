"""Profiler captures -> one KernelEvents table (parsers/events.py), split into graph calls.

load(path) sniffs the format from the file's first bytes (the extension only breaks ties),
calls the pure reader in parsers/, and returns the events sorted by start with 'source' set.
"""
from __future__ import annotations

import importlib
import os
from pathlib import Path

import pandas as pd

from parsers import ParseError
from rootcause.errors import UsageError
from rootcause.profilers.calls import call_summary, split_calls

__all__ = ["FORMATS", "load", "load_ncu", "sniff", "split_calls", "call_summary"]

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
    """The format whose magic check accepts these first bytes, or None."""
    for fmt in FORMATS:
        try:
            if _reader(fmt).matches(head):
                return fmt
        except ModuleNotFoundError:
            continue
    return None


def load(path: str | os.PathLike, format: str = "auto") -> pd.DataFrame:
    """KernelEvents of one capture file, sorted by start_ns."""
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"{path}: no such file")
    if format != "auto" and format not in FORMATS:
        raise UsageError(f"{path}: unknown profile format {format!r} (known: {', '.join(FORMATS)})")
    with open(path, "rb") as f:
        head = f.read(_HEAD_BYTES)
    fmt = sniff(head, path.name) if format == "auto" else format
    if fmt is None:
        raise ParseError(str(path), "byte 0", f"not a profile format rootcause reads ({', '.join(FORMATS)})")
    reader = _reader(fmt)
    if hasattr(reader, "read_path"):  # streams: a huge capture is never held whole
        events = reader.read_path(path)
    else:
        events = reader.events(path.read_bytes(), str(path))
    return events.sort_values("start_ns", kind="stable").reset_index(drop=True)


def load_ncu(path: str | os.PathLike, metrics: bool | list[str] = True):
    """An ncu CSV with its wide metrics table (parsers.ncu_csv.NcuReport): every metric column,
    or only the named ones the file has (cheaper on a wide capture)."""
    from parsers import ncu_csv

    path = Path(path)
    if not path.is_file():
        raise UsageError(f"{path}: no such file")
    return ncu_csv.read_report(path, metrics)
