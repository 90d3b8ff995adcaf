"""ROCm profiler kernel traces -> KernelEvents.

- rocprofv3 `--kernel-trace --output-format csv` (`*_kernel_trace.csv`): Kind, Agent_Id,
  Queue_Id, Stream_Id, Thread_Id, Dispatch_Id, Kernel_Id, Kernel_Name, Correlation_Id,
  Start_Timestamp, End_Timestamp, then either LDS_Block_Size, Scratch_Size, VGPR_Count,
  Accum_VGPR_Count, SGPR_Count (newer) or Private_Segment_Size, Group_Segment_Size (older),
  Workgroup_Size_X..Z, Grid_Size_X..Z. Agent_Id is an integer or "Agent N".
- rocprof v1/v2 `results.csv`: Index, KernelName, gpu-id, queue-id, ..., grd, wgr, lds, scr,
  arch_vgpr (or vgpr), sgpr, ..., BeginNs, EndNs.

ROCm grid sizes count work-items; KernelEvents counts workgroups (as CUDA grids count
blocks), so grid = ceil(grid size / workgroup size). Only KERNEL_DISPATCH rows are kept.
"""
from __future__ import annotations

import csv
import io
import re
import warnings
from typing import TYPE_CHECKING

from parsers.base import ParseError
from parsers.events import check_int64, check_intervals, frame

if TYPE_CHECKING:
    import pandas as pd

SOURCE = "rocprof"
V3_REQUIRED = ("Kernel_Name", "Start_Timestamp", "End_Timestamp")
V1_REQUIRED = ("KernelName", "BeginNs", "EndNs")
_V3 = {"registers": ("VGPR_Count",), "shared_bytes": ("LDS_Block_Size", "Group_Segment_Size"),
       "local_bytes": ("Scratch_Size", "Private_Segment_Size"), "stream": ("Stream_Id", "Queue_Id"),
       "correlation_id": ("Correlation_Id",)}
_V1 = {"registers": ("arch_vgpr", "vgpr"), "shared_bytes": ("lds",), "local_bytes": ("scr",),
       "stream": ("queue-id",), "device": ("gpu-id",)}


def matches(data: bytes) -> bool:
    first = data[:4096].split(b"\n", 1)[0]
    return (b"Kernel_Name" in first and b"Start_Timestamp" in first) or (b"KernelName" in first and b"BeginNs" in first)


def events(data: bytes, file: str = "<bytes>") -> "pd.DataFrame":
    return _events(io.BytesIO(data), data.split(b"\n", 1)[0], file)


def read_path(path) -> "pd.DataFrame":
    """Events of a trace file, parsed from the file (not read whole into memory first)."""
    with open(path, "rb") as f:
        first = f.readline()
        f.seek(0)
        return _events(f, first, str(path))


def _events(source, first_line: bytes, file: str) -> "pd.DataFrame":
    import pandas as pd

    v3 = b"Kernel_Name" in first_line
    required = V3_REQUIRED if v3 else V1_REQUIRED
    # Names, kinds and agents repeat: as categories the C parser keeps one string per value,
    # not one per row (a million rows hold a few hundred kernels).
    try:
        with warnings.catch_warnings():  # a row longer than the header: an error, not lost fields
            warnings.simplefilter("error", pd.errors.ParserWarning)
            table = pd.read_csv(source, dtype={required[0]: "category", "Kind": "category", "Agent_Id": "category"},
                                keep_default_na=False, na_values=[""], low_memory=False, index_col=False)
    except pd.errors.ParserWarning:
        raise ParseError(file, "line 2+", "bad CSV: a row has more fields than the header") from None
    except pd.errors.ParserError as err:
        msg = str(err).strip()
        m = re.search(r"line (\d+)", msg) or re.search(r"row (\d+)", msg)
        at = int(m.group(1)) + (0 if "line" in m.group(0) else 1) if m else 1
        raise ParseError(file, f"line {at}", f"bad CSV: {msg.split('. ', 1)[-1]}") from None
    except (UnicodeDecodeError, ValueError, OverflowError, csv.Error) as err:
        raise ParseError(file, "line 1", f"bad CSV: {str(err).splitlines()[0] if str(err) else type(err).__name__}") from None
    missing = [c for c in required if c not in table.columns]
    if missing:
        raise ParseError(file, "line 1", f"missing required column(s): {', '.join(missing)}")
    if "Kind" in table:
        table = table[table["Kind"] == "KERNEL_DISPATCH"]
    lines = table.index.to_numpy() + 2  # file line of each row (header is line 1)
    name_col, start_col, end_col = required
    names = table[name_col]
    if names.isna().any():
        raise ParseError(file, f"line {lines[names.isna().to_numpy().argmax()]}", f"column {name_col!r}: missing")
    cols = {"kernel": names.tolist(),
            "start_ns": _ints(table, start_col, file, lines, required=True),
            "end_ns": _ints(table, end_col, file, lines, required=True)}
    for col, candidates in (_V3 if v3 else _V1).items():
        for c in candidates:
            if c in table:
                cols[col] = _ints(table, c, file, lines)
                break
    if v3:
        if "Agent_Id" in table:
            cols["device"] = _agents(table["Agent_Id"], file, lines)
        for axis in "xyz":
            grid, wg = f"Grid_Size_{axis.upper()}", f"Workgroup_Size_{axis.upper()}"
            if wg in table:
                cols[f"block_{axis}"] = _ints(table, wg, file, lines)
                if grid in table:
                    cols[f"grid_{axis}"] = _ceil_div(_ints(table, grid, file, lines), cols[f"block_{axis}"])
    elif "wgr" in table:
        cols["block_x"] = _ints(table, "wgr", file, lines)
        if "grd" in table:
            cols["grid_x"] = _ceil_div(_ints(table, "grd", file, lines), cols["block_x"])
    labels = lines.tolist()
    return check_intervals(frame(cols, SOURCE, (file, "line", labels)), file, "line", labels)


def _ints(table: "pd.DataFrame", column: str, file: str, lines, required: bool = False):
    """A column as float64 holding integers (NaN when empty); anything else names its line."""
    import numpy as np
    import pandas as pd

    col = table[column]
    if col.dtype.kind == "i":  # no empty field: int64 as it is (nothing to check)
        return col.to_numpy(dtype=np.int64)
    if col.dtype.kind == "u":
        check_int64(col.to_numpy(), file, "line", lines, column)
        return col.to_numpy(dtype=np.int64) if required else col.to_numpy(dtype=float)
    values = pd.to_numeric(col, errors="coerce")
    bad = (values.isna() & col.notna()) | (values.notna() & (values != values.round()))
    if required:
        bad |= col.isna()
    if bad.any():
        i = int(bad.to_numpy().argmax())
        what = "missing" if pd.isna(col.iat[i]) else f"expected an integer, got {col.iat[i]!r}"
        raise ParseError(file, f"line {lines[i]}", f"column {column!r}: {what}")
    if values.dtype.kind in "uif":  # a value past int64 is read as uint64 or float: refuse it
        check_int64(values.to_numpy(), file, "line", lines, column, required)
    else:  # past uint64: pandas keeps Python ints
        check_int64(values.to_numpy(dtype=float), file, "line", lines, column, required)
    return values.to_numpy(dtype=np.int64) if required else values.to_numpy(dtype=float)


def _agents(col: "pd.Series", file: str, lines):
    """Agent_Id (a categorical column) as N or 'Agent N': each distinct value parsed once."""
    import numpy as np

    if not len(col.cat.categories):  # every value empty
        return np.full(len(col), np.nan)
    cats = col.cat.categories.astype(str).str.strip()
    digits = cats.str.extract(r"^(?:Agent\s+)?(\d+)$", expand=False).astype(float).to_numpy()
    codes = col.cat.codes.to_numpy()
    bad = np.flatnonzero((codes >= 0) & np.isnan(digits[codes]))
    if bad.size:
        i = int(bad[0])
        raise ParseError(file, f"line {lines[i]}", f"column 'Agent_Id': expected N or 'Agent N', got {col.iat[i]!r}")
    return np.where(codes >= 0, digits[codes], np.nan)


def _ceil_div(total, size):
    import numpy as np

    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(size > 0, np.ceil(total / np.where(size > 0, size, 1)), np.nan)
