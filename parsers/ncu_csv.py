"""Nsight Compute CSV: `ncu --csv --page raw` (one row per kernel) and `--page details`
(one row per kernel and metric: Section Name, Metric Name, Metric Unit, Metric Value).

Raw page layout: the profiled program's output and `==PROF==` lines, a header row ("ID",
"Process ID", ..., "Kernel Name", ..., metric names), a units row (first field empty), then one
row per kernel launch; numbers carry thousands separators ("145,696").

ncu replays each kernel in isolation, so there is no timeline: gpu__time_duration.sum (raw) or
Duration (details) gives the duration, and the events are laid back to back in ID order
(start_ns = sum of earlier durations). Every other metric is kept in a wide metrics table
(one row per kernel, indexed like the events) for the diagnose stage.

A raw page has ~273 columns and the events need ~15: where the compiled cutter parsers._ncu_cut
is built (setup.py), plainly quoted rows are cut to the wanted columns in C and pandas reads only
those (1M rows: ~1.3 s CPU against ~3.6 s); any other row goes through the csv module or, where
that declines, pandas reads the page whole, as without the cutter.
"""
from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable

from parsers.base import ParseError, load_native
from parsers.events import check_int64, check_intervals, frame

_ncu_cut = load_native("_ncu_cut")  # compiled (setup.py); without it pandas reads every column

if TYPE_CHECKING:
    import pandas as pd

SOURCE = "ncu"
RAW_REQUIRED = ("ID", "Kernel Name", "gpu__time_duration.sum")
DETAILS_REQUIRED = ("ID", "Kernel Name", "Metric Name", "Metric Value")
_TIME_UNITS = {"ns": 1, "nsecond": 1, "us": 1e3, "usecond": 1e3, "ms": 1e6, "msecond": 1e6,
               "s": 1e9, "second": 1e9}
# raw metric -> event column (launch__* are the launch configuration as ncu saw it)
_RAW_LAUNCH = {
    "grid_x": "launch__grid_dim_x", "grid_y": "launch__grid_dim_y", "grid_z": "launch__grid_dim_z",
    "block_x": "launch__block_dim_x", "block_y": "launch__block_dim_y", "block_z": "launch__block_dim_z",
    "registers": "launch__registers_per_thread", "stream": "Stream", "device": "Device",
}
_RAW_SHARED = ("launch__shared_mem_per_block_static", "launch__shared_mem_per_block_dynamic")
# raw metrics -> counter column of the events: their sum, where the page has every one of them
COUNTERS = {
    "global_sectors": ("l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum", "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum"),
    "global_requests": ("l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
                        "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum"),
    "l2_sectors": ("lts__t_sectors_op_read.sum", "lts__t_sectors_op_write.sum"),
    "shared_wavefronts": ("l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
                          "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum"),
    "shared_instructions": ("smsp__inst_executed_op_shared_ld.sum", "smsp__inst_executed_op_shared_st.sum"),
}

# What `rootcause run --profile ncu` asks ncu for, the sections a diagnosis reads: duration,
# achieved occupancy and its limiters, memory throughput against peak, registers and shared
# memory as launched, and the memory-access counters of COUNTERS (sectors per request, L2
# sectors, shared wavefronts).
NCU_METRICS = (
    "gpu__time_duration.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed,"
    "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed,"
    "dram__bytes_read.sum,dram__bytes_write.sum,sm__warps_active.avg.pct_of_peak_sustained_active,"
    "launch__occupancy_limit_registers,launch__occupancy_limit_shared_mem,launch__occupancy_limit_blocks,"
    "launch__occupancy_limit_warps,launch__registers_per_thread,launch__grid_size,launch__block_size,"
    "launch__shared_mem_per_block_static,launch__shared_mem_per_block_dynamic,"
    "sm__maximum_warps_per_active_cycle_pct,"
) + ",".join(m for parts in COUNTERS.values() for m in parts)
# details metric name -> event column
_DETAILS_LAUNCH = {"registers": "Registers Per Thread"}
_DETAILS_SHARED = ("Static Shared Memory Per Block", "Dynamic Shared Memory Per Block")
_TRIPLE = re.compile(r"^\(\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*\)$")


@dataclass
class NcuReport:
    """events: KernelEvents; metrics: one row per kernel (same index), a column per metric,
    numeric where every value parses; units: metric -> unit as ncu printed it."""

    events: "pd.DataFrame"
    metrics: "pd.DataFrame"
    units: dict[str, str] = field(default_factory=dict)
    page: str = "raw"


def matches(data: bytes) -> bool:
    try:
        return _header_line(data[:1 << 20]) is not None
    except ParseError:  # an ncu header the csv module refuses: the reader says why
        return True


def events(data: bytes, file: str = "<bytes>") -> "pd.DataFrame":
    return read(data, file, metrics=False).events


def read_path(path) -> "pd.DataFrame":
    """Events of a raw or details CSV file; a raw page is streamed from the file, not read whole."""
    return read_report(path, metrics=False).events


def read_report(path, metrics: "bool | Iterable[str]" = True) -> NcuReport:
    """read() of a file; a raw page is parsed from the file, not read whole into memory."""
    with open(path, "rb") as f:
        head = f.read(1 << 20)
        found = _header_line(head, str(path))
        if found is None or b'"Metric Name"' in head[found[0]:].split(b"\n", 1)[0]:
            return read(head + f.read(), str(path), metrics)
        offset, lineno, header = found
        units = head[offset:].split(b"\n", 2)[1:2]
        f.seek(offset)
        return _raw(f, offset, lineno, header, str(path), metrics, units[0] if units else b"")


def read(data: bytes, file: str = "<bytes>", metrics: "bool | Iterable[str]" = True) -> NcuReport:
    """Parse either page. metrics: True keeps every column in the wide table, False none
    (faster on huge raw files), or the metric names to keep (those the file has). Unless every
    column is kept, a raw page's rows are cut to the needed columns (parsers/_ncu_cut.c, where
    built) before pandas reads them; without the compiled cutter pandas tokenizes every field."""
    found = _header_line(data, file)
    if found is None:
        raise ParseError(file, "line 1", 'no ncu CSV header ("ID",...,"Kernel Name",...) found')
    offset, lineno, header = found
    if "Metric Name" in header:
        return _details(data, offset, lineno, header, file, metrics)
    units = data[offset:].split(b"\n", 2)[1:2]
    return _raw(io.BytesIO(data[offset:]), offset, lineno, header, file, metrics, units[0] if units else b"")


def _header_line(data: bytes, file: str = "<bytes>") -> tuple[int, int, list[str]] | None:
    """(byte offset, 1-based line, column names) of the first line that is an ncu header."""
    offset = 0
    for lineno, line in enumerate(data.split(b"\n", 2000)[:2000], 1):
        if line.startswith(b'"ID",') and b'"Kernel Name"' in line:
            return offset, lineno, _csv_row(line, lineno, file)
        offset += len(line) + 1
    return None


def _csv_row(line: bytes, lineno: int, file: str = "") -> list[str]:
    """One CSV line's fields; a line the csv module refuses (NUL, an open quote, a huge field)
    is a ParseError, or (while sniffing, file empty) no header at all."""
    try:
        return next(csv.reader([line.decode("utf-8", "replace").rstrip("\r")]), [])
    except csv.Error as err:
        raise ParseError(file or "<bytes>", f"line {lineno}", f"bad CSV: {err}") from None


def _read_csv(source, lineno: int, file: str, skip_units: bool,
              usecols: list[str] | None = None) -> "pd.DataFrame":
    """source: a binary stream positioned at the header line."""
    import pandas as pd

    try:
        return pd.read_csv(source, header=0,
                           skiprows=[1] if skip_units else None, thousands=",", usecols=usecols,
                           dtype={"Kernel Name": str}, na_values=["", "n/a", "N/A"],
                           keep_default_na=False, low_memory=usecols is not None)
    except pd.errors.ParserError as err:
        # pandas counts lines from the header; report lines of the file.
        msg = str(err).strip()
        where = re.search(r"line (\d+)", msg)  # 1-based from the header line
        row = re.search(r"row (\d+)", msg)  # 0 = the header line
        at = int(where.group(1)) + lineno - 1 if where else int(row.group(1)) + lineno if row else lineno
        raise ParseError(file, f"line {at}", f"bad CSV: {msg.split('. ', 1)[-1]}") from None
    except (UnicodeDecodeError, ValueError, OverflowError, csv.Error) as err:
        raise ParseError(file, f"line {lineno}+", f"bad CSV: {err}") from None


def _read_wanted(source, lineno: int, file: str, header: list[str], wanted: list[str] | None) -> "pd.DataFrame":
    """The table of the wanted columns (all where None). source: a binary stream at the header.
    Rows are cut to the wanted columns first (_cut_rows) and pandas reads only those; where the
    cut declines, pandas reads the page whole, as it always did. One difference: pandas types a
    whole page's column in chunks of rows (fewer, the more columns it has), so a metric column
    with numbers in one chunk and text in another came out half floats; from the cut such a
    column is text throughout, as the metrics table promises."""
    start = source.tell()
    # duplicate names: pandas renames them, so which column a name picks is pandas' business
    cut = _cut_rows(source, header, wanted) if wanted is not None and len(set(header)) == len(header) else None
    if cut is None:
        source.seek(start)
    return _read_csv(source if cut is None else io.BytesIO(cut), lineno, file, True, wanted)


_QUOTED_ROW = re.compile(rb'"(?:[^"]|"")*+"(?:,"(?:[^"]|"")*+")*+\r?')
_BLOCK = 4 << 20


def _cut_rows(source, header: list[str], wanted: list[str]) -> bytes | None:
    """The header and every table row cut to the wanted columns, as CSV with an empty line
    where the units row was (so lines keep their numbers), or None where the compiled cutter
    is not built or a row is not a plain quoted CSV line of len(header) fields (then pandas
    reads the page whole). source: a binary stream at the header line.

    A raw page has ~273 columns and the events need ~15; pandas' tokenizer works through every
    field even with usecols, so the cut leaves it ~6% of the bytes."""
    if _ncu_cut is None:
        return None
    keep = bytes(c in wanted for c in header)
    out = [('"' + '","'.join(c.replace('"', '""') for c in wanted) + '"\n""\n').encode()]
    source.readline()
    source.readline()
    while block := source.read(_BLOCK):
        if not block.endswith(b"\n"):  # finish the last line (or end the file's)
            block += source.readline()
            block += b"" if block.endswith(b"\n") else b"\n"
        rows = _ncu_cut.cut(block, keep)
        if rows is None:  # a quote doubled inside a field, an empty line, or not a row
            rows = _cut_lines(block, header, wanted)
            if rows is None:
                return None
        out.append(rows)
    return b"".join(out)


def _cut_lines(data: bytes, header: list[str], wanted: list[str]) -> bytes | None:
    """_cut_rows for one block, a line at a time through the csv module: empty lines are
    skipped, as pandas does, and a line that is not fully quoted CSV of len(header) fields
    gives None."""
    index = [header.index(c) for c in wanted]
    out = []
    for line in data.split(b"\n"):
        if line in (b"", b"\r"):
            continue
        if not _QUOTED_ROW.fullmatch(line):
            return None
        try:
            fields = next(csv.reader([line.decode("utf-8").rstrip("\r")]))
        except (UnicodeDecodeError, csv.Error):
            return None
        if len(fields) != len(header):
            return None
        out.append(",".join('"' + fields[i].replace('"', '""') + '"' for i in index) + "\n")
    return "".join(out).encode()


def _raw(source, offset: int, lineno: int, header: list[str], file: str,
         metrics: "bool | Iterable[str]", units_line: bytes) -> NcuReport:
    missing = [c for c in RAW_REQUIRED if c not in header]
    if missing:
        raise ParseError(file, f"line {lineno}", f"missing required column(s): {', '.join(missing)}")
    units_row = _csv_row(units_line, lineno + 1, file) if units_line.strip() else []
    if not units_row or units_row[0] != "":
        raise ParseError(file, f"line {lineno + 1}", "expected the units row (first field empty) after the header")
    units = {name: unit for name, unit in zip(header, units_row) if unit}
    events_cols = set(RAW_REQUIRED) | set(_RAW_LAUNCH.values()) | set(_RAW_SHARED) | {m for ms in COUNTERS.values() for m in ms}
    for prefix, triple in (("grid", "Grid Size"), ("block", "Block Size")):
        if _RAW_LAUNCH[f"{prefix}_x"] not in header:  # '(x, y, z)' text only where launch__ dims are absent
            events_cols.add(triple)
    wanted = None if metrics is True else [c for c in header if c in events_cols | set(metrics or ())]
    table = _read_wanted(source, lineno, file, header, wanted)
    first = lineno + 2  # file line of table row 0
    scale = _time_scale(units.get("gpu__time_duration.sum", "ns"), file, lineno + 1)
    duration = _numeric(table, "gpu__time_duration.sum", file, first, required=True) * scale
    cols = {c: _numeric(table, m, file, first) for c, m in _RAW_LAUNCH.items() if m in table}
    _fill_triples(cols, table, file, first)
    shared = [_numeric(table, m, file, first) for m in _RAW_SHARED if m in table]
    if shared:
        cols["shared_bytes"] = sum(shared)
    for col, parts in COUNTERS.items():
        if all(m in table for m in parts):
            cols[col] = sum(_numeric(table, m, file, first) for m in parts)
    ev = _events(table, duration, cols, file, first)
    return NcuReport(ev, _metrics_table(table, metrics), units, "raw")


def _metrics_table(table: "pd.DataFrame", metrics: "bool | Iterable[str]") -> "pd.DataFrame":
    import pandas as pd

    if metrics is True:
        return table
    if not metrics:
        return pd.DataFrame(index=table.index)
    keep = set(metrics) | {"ID", "Kernel Name"}
    return table[[c for c in table.columns if c in keep]]


def _details(data: bytes, offset: int, lineno: int, header: list[str], file: str,
             metrics: "bool | Iterable[str]" = True) -> NcuReport:
    import pandas as pd

    missing = [c for c in DETAILS_REQUIRED if c not in header]
    if missing:
        raise ParseError(file, f"line {lineno}", f"missing required column(s): {', '.join(missing)}")
    long = _read_csv(io.BytesIO(data[offset:]), lineno, file, False)
    first = lineno + 1
    _numeric(long, "ID", file, first, required=True)
    bad = long["Metric Name"].isna()
    if bad.any():
        raise ParseError(file, f"line {first + int(bad.to_numpy().argmax())}", "column 'Metric Name': missing")
    units = {}
    if "Metric Unit" in long:
        unit = long["Metric Unit"]
        units = dict(zip(long["Metric Name"], unit.astype(object).where(unit.notna(), "")))
    values = long["Metric Value"].astype(str).str.replace(",", "", regex=False)
    long = long.assign(**{"Metric Value": pd.to_numeric(values, errors="coerce").where(
        lambda v: v.notna(), long["Metric Value"])})
    wide = long.pivot_table(index="ID", columns="Metric Name", values="Metric Value",
                            aggfunc="first", sort=False)
    launch_cols = [c for c in long.columns if c not in ("Section Name", "Metric Name", "Metric Unit",
                                                  "Metric Value") and not c.startswith(("Rule ", "Estimated "))]
    per_kernel = long.drop_duplicates("ID")[launch_cols].set_index("ID")
    table = per_kernel.join(wide).reset_index()
    table.columns = [str(c) for c in table.columns]
    if "Duration" not in table and "gpu__time_duration.sum" not in table:
        raise ParseError(file, f"line {lineno}", "no 'Duration' or 'gpu__time_duration.sum' metric")
    name = "Duration" if "Duration" in table else "gpu__time_duration.sum"
    scale = _time_scale(units.get(name, "ns"), file, lineno)
    duration = _numeric(table, name, file, first, required=True) * scale
    cols = {c: _numeric(table, m, file, first) for c, m in _DETAILS_LAUNCH.items() if m in table}
    for c in ("Stream", "Device"):
        if c in table:
            cols[c.lower()] = _numeric(table, c, file, first)
    _fill_triples(cols, table, file, first)
    shared = [_numeric(table, m, file, first) for m in _DETAILS_SHARED if m in table]
    if shared:
        scales = [_byte_scale(units.get(m, "byte")) for m in _DETAILS_SHARED if m in table]
        cols["shared_bytes"] = sum(s * k for s, k in zip(shared, scales))
    return NcuReport(_events(table, duration, cols, file, first), _metrics_table(table, metrics), units, "details")


def _events(table: "pd.DataFrame", duration, cols: dict, file: str, first: int) -> "pd.DataFrame":
    import numpy as np

    names = table["Kernel Name"]
    if names.isna().any():
        raise ParseError(file, f"line {first + int(names.isna().to_numpy().argmax())}", "column 'Kernel Name': missing")
    lines = range(first, first + len(table))
    dur = np.rint(duration.to_numpy(dtype=float))
    check_int64(dur, file, "line", lines, "duration", required=True)
    if (dur < 0).any():
        i = int(np.flatnonzero(dur < 0)[0])
        raise ParseError(file, f"line {lines[i]}", f"column 'duration': negative ({dur[i]!r})")
    if dur.sum() >= 2.0 ** 63:
        raise ParseError(file, f"line {lines[-1]}", "durations sum beyond the int64 ns range")
    dur = dur.astype(np.int64)
    end = np.cumsum(dur)
    cols.update(kernel=names.to_numpy(dtype=object), start_ns=end - dur, end_ns=end, duration_ns=dur)
    return check_intervals(frame(cols, SOURCE, (file, "line", lines)), file, "line", lines)


def _numeric(table: "pd.DataFrame", column: str, file: str, first: int, required: bool = False):
    """A column as float64 (NaN where empty), or as the integers pandas parsed; a non-number
    names its line."""
    import pandas as pd

    col = table[column]
    if col.dtype == object or str(col.dtype).startswith(("str", "string")):
        text = col.astype(str).str.replace(",", "", regex=False)
        parsed = pd.to_numeric(text.where(col.notna()), errors="coerce")
        bad = parsed.isna() & col.notna()
        if bad.any():
            i = int(bad.to_numpy().argmax())
            raise ParseError(file, f"line {first + i}", f"column {column!r}: not a number: {col.iat[i]!r}")
        col = parsed
    if col.dtype == bool:
        raise ParseError(file, f"line {first}", f"column {column!r}: not a number")
    if col.dtype.kind in "iu":  # pandas parsed every value as an integer: nothing is missing
        return col
    if required and col.isna().any():
        i = int(col.isna().to_numpy().argmax())
        raise ParseError(file, f"line {first + i}", f"column {column!r}: missing (truncated row?)")
    return col.astype(float)


def _fill_triples(cols: dict, table: "pd.DataFrame", file: str, first: int) -> None:
    """Grid/block from the '(x, y, z)' columns where the launch__ metrics were not collected."""
    import numpy as np

    for prefix, column in (("grid", "Grid Size"), ("block", "Block Size")):
        if f"{prefix}_x" in cols or column not in table:
            continue
        xyz = np.full((len(table), 3), np.nan)
        for i, text in enumerate(table[column]):
            if isinstance(text, str):
                m = _TRIPLE.match(text.strip())
                if not m:
                    raise ParseError(file, f"line {first + i}", f"column {column!r}: expected '(x, y, z)', got {text!r}")
                xyz[i] = [int(g) for g in m.groups()]
        for k, axis in enumerate("xyz"):
            cols[f"{prefix}_{axis}"] = xyz[:, k]


def _time_scale(unit: str, file: str, lineno: int) -> float:
    if unit not in _TIME_UNITS:
        raise ParseError(file, f"line {lineno}", f"unknown duration unit {unit!r}")
    return _TIME_UNITS[unit]


def _byte_scale(unit: str) -> float:
    return {"byte": 1, "Kbyte": 1e3, "KB": 1e3, "Mbyte": 1e6, "KiB": 1024, "MiB": 1 << 20}.get(unit, 1)
