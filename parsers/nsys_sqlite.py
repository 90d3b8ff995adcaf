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

from typing import TYPE_CHECKING

from parsers.base import ParseError
from parsers.events import check_intervals, frame

if TYPE_CHECKING:
    import sqlite3

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
    """The SQLite header. Sniffing asks every format in turn, so this module imports sqlite3,
    pandas and NumPy only when it reads a file."""
    return data[:16] == MAGIC


def events(data: bytes, file: str = "<bytes>") -> "pd.DataFrame":
    if not matches(data):
        raise ParseError(file, "byte 0", "not an SQLite database")
    import sqlite3

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
    import sqlite3

    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return _read_checked(con, str(path))
    finally:
        con.close()


def _read_checked(con: sqlite3.Connection, file: str) -> "pd.DataFrame":
    """_read, with what SQLite (or pandas around it) raises on a corrupt or foreign file as one
    ParseError."""
    import sqlite3

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
    """The kernel table's columns as numpy arrays (see _integer_columns)."""
    import numpy as np

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
    picks = [c for c in (*REQUIRED, *_COLUMNS.values(), "staticSharedMemory", "dynamicSharedMemory") if c in have]
    _check_types(con, [name_col, *picks], file)
    got = _integer_columns(con, ["rowid", name_col, *picks])
    rows = got["rowid"]
    names = _names(con, got[name_col], rows, name_col, file)
    data = {}
    for c in picks:
        values = got[c]
        null = values == _NULL
        data[c] = np.where(null, np.nan, values) if null.any() else values
    for c in REQUIRED:
        bad = np.isnan(data[c]) if data[c].dtype.kind == "f" else np.zeros(len(rows), dtype=bool)
        if bad.any():
            raise ParseError(file, f"{TABLE} rowid {rows[int(bad.argmax())]}", "column 'start'/'end': NULL")
    order = np.argsort(data["start"], kind="stable")  # by start, as the other readers' rows come
    labels = rows[order].tolist()
    cols = {"kernel": names[order].tolist(), "start_ns": data["start"][order], "end_ns": data["end"][order]}
    for col, src in _COLUMNS.items():
        if src in data:
            cols[col] = data[src][order].astype(float)
    shared = [data[c][order].astype(float) for c in ("staticSharedMemory", "dynamicSharedMemory") if c in data]
    if shared:
        cols["shared_bytes"] = sum(shared)
    where = f"{TABLE} rowid"
    return check_intervals(frame(cols, SOURCE, (file, where, labels)), file, where, labels)


_NULL = -(1 << 63)  # stands for NULL in the concatenated text (no field nsys writes takes it)
_CHUNK_ROWS = 1 << 20


def _check_types(con: sqlite3.Connection, columns: list[str], file: str) -> None:
    """Every value an integer (or NULL, except start/end), else the first bad row named: one
    scan in SQLite instead of a type test per value in Python."""
    tests = " OR ".join(f"typeof({c}) NOT IN ('integer'{'' if c in REQUIRED else ', ' + repr('null')})" for c in columns)
    bad = con.execute(f"SELECT rowid, {', '.join(columns)} FROM {TABLE} WHERE {tests} LIMIT 1").fetchone()
    if bad is None:
        return
    for c, value in zip(columns, bad[1:]):
        if value is None and c in REQUIRED:
            raise ParseError(file, f"{TABLE} rowid {bad[0]}", f"column {c!r}: NULL")
        if value is not None and type(value) is not int:
            raise ParseError(file, f"{TABLE} rowid {bad[0]}", f"column {c!r}: not an integer: {value!r}")


def _integer_columns(con: sqlite3.Connection, columns: list[str]) -> dict:
    """Integer columns (checked by _check_types) as int64 arrays, NULL as _NULL. SQLite joins
    each column of a million rows into one text that numpy parses: one table scan per chunk
    of rows, no Python object per value (fetching tuples costs ~0.25 us a value)."""
    import sqlite3

    import numpy as np

    aggregates = ", ".join(f"group_concat(ifnull({c}, {_NULL}), ',')" for c in columns)
    parts: dict[str, list] = {c: [] for c in columns}
    last = None
    while True:
        where = "" if last is None else f"WHERE rowid > {last} "
        texts = con.execute(f"SELECT {aggregates} FROM (SELECT rowid, * FROM {TABLE} {where}"
                            f"ORDER BY rowid LIMIT {_CHUNK_ROWS})").fetchone()
        if texts[0] is None:
            break
        arrays = [np.fromstring(text, dtype=np.int64, sep=",") for text in texts]
        if len({len(a) for a in arrays}) != 1:  # a value numpy did not read: never silently short
            raise sqlite3.DataError("a column did not convert to integers")
        for c, values in zip(columns, arrays):
            parts[c].append(values)
        last = int(arrays[0][-1])
    return {c: np.concatenate(p) if p else np.zeros(0, dtype=np.int64) for c, p in parts.items()}


def _names(con: sqlite3.Connection, ids, rows, name_col: str, file: str):
    """Kernel names: each row's string id looked up in StringIds (an object array)."""
    import numpy as np
    import pandas as pd

    strings = dict(con.execute("SELECT id, value FROM StringIds"))
    codes, uniques = pd.factorize(ids)
    names = np.array([strings.get(int(u)) for u in uniques], dtype=object)
    odd = [k for k, n in enumerate(names) if n is not None and not isinstance(n, str)]
    if odd:
        i = int(np.flatnonzero(codes == odd[0])[0])
        raise ParseError(file, f"{TABLE} rowid {rows[i]}", f"StringIds value for {name_col!r}: not text: {names[odd[0]]!r}")
    missing = [k for k, n in enumerate(names) if n is None]
    if missing:
        i = int(np.flatnonzero(np.isin(codes, missing))[0])
        raise ParseError(file, f"{TABLE} rowid {rows[i]}", f"column {name_col!r}: id not in StringIds")
    return names[codes] if len(names) else np.zeros(0, dtype=object)
