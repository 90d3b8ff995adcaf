"""Nsight Systems SQLite export (`nsys export --type sqlite`) -> KernelEvents.

Schema (NVIDIA "SQLite Export Schema Reference"): table CUPTI_ACTIVITY_KIND_KERNEL with
start, end (ns), deviceId, streamId, correlationId, gridX..Z, blockX..Z, registersPerThread,
staticSharedMemory, dynamicSharedMemory, localMemoryPerThread, and demangledName /
shortName / mangledName as ids into StringIds(id, value). The demangled name is used where
present (as the other importers report it), else the short name.

NOT checked against a real export: nsys is not installed on the GPU host and no public
.sqlite export was found; the reader follows the documented schema only.
"""
from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING

from parsers.base import ParseError
from parsers.events import check_intervals, frame

if TYPE_CHECKING:
    import pandas as pd

SOURCE = "nsys"
MAGIC = b"SQLite format 3\x00"
TABLE = "CUPTI_ACTIVITY_KIND_KERNEL"
REQUIRED = ("start", "end")
_COLUMNS = {
    "grid_x": "gridX", "grid_y": "gridY", "grid_z": "gridZ",
    "block_x": "blockX", "block_y": "blockY", "block_z": "blockZ",
    "registers": "registersPerThread", "local_bytes": "localMemoryPerThread",
    "stream": "streamId", "device": "deviceId", "correlation_id": "correlationId",
}


def matches(data: bytes) -> bool:
    return data[:16] == MAGIC


def events(data: bytes, file: str = "<bytes>") -> "pd.DataFrame":
    if not matches(data):
        raise ParseError(file, "byte 0", "not an SQLite database")
    con = sqlite3.connect(":memory:")
    try:
        con.deserialize(data)
        return _read_checked(con, file)
    finally:
        con.close()


def read_path(path) -> "pd.DataFrame":
    with open(path, "rb") as f:
        if not matches(f.read(16)):
            raise ParseError(str(path), "byte 0", "not an SQLite database")
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return _read_checked(con, str(path))
    finally:
        con.close()


def _read_checked(con: sqlite3.Connection, file: str) -> "pd.DataFrame":
    """_read, with what SQLite (or pandas around it) raises on a corrupt or foreign file as one
    ParseError."""
    import pandas as pd

    try:
        return _read(con, file)
    except (sqlite3.Error, pd.errors.DatabaseError) as err:
        raise ParseError(file, "sqlite", f"unreadable database: {err}") from None
    except UnicodeDecodeError as err:
        raise ParseError(file, "sqlite", f"text that is not UTF-8 (byte {err.start} of a value)") from None
    except OverflowError as err:
        raise ParseError(file, "sqlite", f"a value beyond the int64 range: {err}") from None


def _read(con: sqlite3.Connection, file: str) -> "pd.DataFrame":
    import pandas as pd

    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if TABLE not in tables:
        raise ParseError(file, "sqlite", f"no {TABLE} table (was the report captured with --trace=cuda?)")
    have = [r[1] for r in con.execute(f"PRAGMA table_info({TABLE})")]
    missing = [c for c in REQUIRED if c not in have]
    name_col = next((c for c in ("demangledName", "shortName", "mangledName") if c in have), None)
    if name_col is None:
        missing.append("demangledName|shortName")
    if missing:
        raise ParseError(file, TABLE, f"missing required column(s): {', '.join(missing)}")
    if "StringIds" not in tables:
        raise ParseError(file, "sqlite", "no StringIds table to resolve kernel names")
    picks = [f"k.{c} AS {c}" for c in (*REQUIRED, *_COLUMNS.values(), "staticSharedMemory", "dynamicSharedMemory")
             if c in have]
    sql = (f"SELECT k.rowid AS row_id, s.value AS name, {', '.join(picks)} FROM {TABLE} AS k "
           f"LEFT JOIN StringIds AS s ON s.id = k.{name_col} ORDER BY k.start")
    table = pd.read_sql_query(sql, con)
    rows = table["row_id"].tolist()
    bad = table["name"].isna()
    odd = ~bad & ~table["name"].map(lambda v: isinstance(v, str)).astype(bool)
    if odd.any():
        i = int(odd.to_numpy().argmax())
        raise ParseError(file, f"{TABLE} rowid {rows[i]}", f"StringIds value for {name_col!r}: not text: {table['name'].iat[i]!r}")
    if bad.any():
        raise ParseError(file, f"{TABLE} rowid {rows[int(bad.to_numpy().argmax())]}",
                         f"column {name_col!r}: id not in StringIds")
    for c in table.columns.drop(["name"]):
        if table[c].dtype.kind not in "iuf":
            i = int(pd.to_numeric(table[c], errors="coerce").isna().to_numpy().argmax())
            raise ParseError(file, f"{TABLE} rowid {rows[i]}", f"column {c!r}: not an integer: {table[c].iat[i]!r}")
    cols = {"kernel": table["name"].tolist(), "start_ns": table["start"].to_numpy(), "end_ns": table["end"].to_numpy()}
    if table[["start", "end"]].isna().any().any():
        i = int(table[["start", "end"]].isna().any(axis=1).to_numpy().argmax())
        raise ParseError(file, f"{TABLE} rowid {rows[i]}", "column 'start'/'end': NULL")
    for col, src in _COLUMNS.items():
        if src in table:
            cols[col] = table[src].astype(float)
    shared = [table[c].astype(float) for c in ("staticSharedMemory", "dynamicSharedMemory") if c in table]
    if shared:
        cols["shared_bytes"] = sum(shared)
    return check_intervals(frame(cols, SOURCE, (file, f"{TABLE} rowid", rows)), file, f"{TABLE} rowid", rows)
