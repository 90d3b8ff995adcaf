"""Mutations of real binaries for the parsers' property tests.

A reader fed a mutated real input may return rows or raise ParseError (one line, naming the
file), never anything else. The targeted mutations a format needs (PTX tokens, an ELF section
table, a TVM module tree) stay in that format's test; these are the common ones.
"""
from __future__ import annotations

from hypothesis import strategies as st

COMMON = ("flip", "truncate", "overwrite")


def mutate(data: st.DataObject, blob: bytearray, how: str, max_flips: int = 16, lo: int = 0) -> bytearray:
    """Apply one common mutation to blob: bit flips, a truncation, or a random overwrite
    starting at or after lo."""
    if how == "flip":
        for _ in range(data.draw(st.integers(1, max_flips))):
            i = data.draw(st.integers(0, len(blob) - 1))
            blob[i] ^= 1 << data.draw(st.integers(0, 7))
    elif how == "truncate":
        blob = blob[: data.draw(st.integers(0, len(blob)))]
    elif how == "overwrite":
        start = data.draw(st.integers(lo, len(blob) - 1))
        chunk = data.draw(st.binary(min_size=1, max_size=64))
        blob[start:start + len(chunk)] = chunk
    else:
        raise ValueError(f"not a common mutation: {how}")
    return blob


def byte_writes(size: int, max_size: int = 8) -> st.SearchStrategy:
    """(offset, value) byte overwrites within the first size bytes."""
    return st.lists(st.tuples(st.integers(0, size - 1), st.integers(0, 255)), max_size=max_size)


def written(real: bytes, writes: list[tuple[int, int]], cut: int, keep: int) -> bytes:
    """real cut to its first `cut` bytes (unless that would leave `keep` bytes or fewer), with
    the byte writes that still fall inside applied."""
    data = bytearray(real[:cut] if cut > keep else real)
    for at, value in writes:
        if at < len(data):
            data[at] = value
    return bytes(data)


# ---- Profile readers: real inputs, and random mutants of them -------------------------------
# The mutators take a random.Random so that hypothesis (st.randoms) and the CLI fuzz campaign
# (tools/fuzz_cli.py, seeded) draw the same kinds of mutant.

import json  # noqa: E402
import random  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import sqlite3  # noqa: E402
from pathlib import Path  # noqa: E402

CAPTURES = Path(__file__).resolve().parent.parent / "fixtures" / "captures"
CUPTI_SAMPLE = CAPTURES / "h200-2026-12-02-run" / "pool_fusion_on.cupti.json"
NCU_SAMPLE = CAPTURES / "h200-2026-12-02-run" / "ncu" / "pool_fusion_on.ncu.csv"
CHROME_SAMPLE = CAPTURES / "chrome" / "hta_backward_thread.json"
IREE_SAMPLES = (CAPTURES / "iree-3.13-local-task" / "two_matmuls.dispatch.jsonl",
                CAPTURES / "iree-3.13-local-task" / "two_matmuls.ireeperf.jsonl")
ROCPROF_SAMPLES = (CAPTURES / "rocprofv3" / "kernel_trace.sdk-481f7ff.csv",
                   CAPTURES / "rocprofv3" / "kernel_trace.sdk-029ff02.csv")

# Values a field may be swapped for: NaN and infinities (Python's json reads them), numbers
# past int64 and uint64, the wrong type, a lone surrogate, bytes that are not UTF-8.
NASTY_JSON = (b"NaN", b"Infinity", b"-Infinity", b"1e400", b"-1e400", b"9223372036854775808",
              b"18446744073709551616", b"-9223372036854775809", b"1" + b"0" * 40, b"0.5", b"-1",
              b"1e18", b'"7"', b"null", b"true", b"[]", b"{}", b"[1,2]", b'"\\ud800"', b"[" * 3000,
              b'"\xff\xfe"', b"\xc3")
NASTY_CSV = (b"NaN", b"inf", b"-inf", b"1e400", b"9223372036854775808", b"18446744073709551616",
             b"99999999999999999999999", b"-9223372036854775809", b"0.5", b"-1", b"", b'"', b"\x00",
             b"\xff\xfe", b"a,b", b'"1,2,3"', b"\n", b'"(1, 2)"', b"x" * 200000)
_NUMBER = re.compile(rb"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")


def text_mutant(rng: random.Random, blob: bytes, dialect: str) -> bytes:
    """One mutant of a text profile: a number swapped for a nasty value (dialect 'json' or
    'csv'), or a bit flip, truncation, overwrite, duplicated or deleted span."""
    data = bytearray(blob)
    how = rng.choice(("token", "token", "token", "flip", "truncate", "overwrite", "splice", "delete"))
    if how == "token":
        numbers = [m.span() for m in _NUMBER.finditer(blob)]
        for _ in range(rng.randint(1, 3)):
            if not numbers:
                break
            start, end = rng.choice(numbers)
            value = rng.choice(NASTY_JSON if dialect == "json" else NASTY_CSV)
            data = data[:start] + value + data[end:]
            numbers = [m.span() for m in _NUMBER.finditer(bytes(data))]
    elif how == "flip":
        for _ in range(rng.randint(1, 16)):
            i = rng.randrange(len(data))
            data[i] ^= 1 << rng.randrange(8)
    elif how == "truncate":
        data = data[:rng.randrange(len(data) + 1)]
    elif how == "overwrite":
        start = rng.randrange(len(data))
        chunk = bytes(rng.randrange(256) for _ in range(rng.randint(1, 64)))
        data[start:start + len(chunk)] = chunk
    elif how == "splice":
        a, b = sorted(rng.randrange(len(data) + 1) for _ in range(2))
        at = rng.randrange(len(data) + 1)
        data[at:at] = data[a:b]
    else:
        a, b = sorted(rng.randrange(len(data) + 1) for _ in range(2))
        del data[a:b]
    return bytes(data)


# SQL-level mutants of an nsys export: cells set to values past what the reader expects, tables
# or columns dropped, names that are not text, or a database of another program entirely.
_NASTY_SQL = ("9223372036854775807", "-9223372036854775808", "1e300", "-1e300", "9e999", "0.5",
              "'soon'", "X'FFFE'", "CAST(X'FFFE80' AS TEXT)", "NULL", "-1")


def sqlite_mutant(rng: random.Random, source: Path, out: Path) -> Path:
    """A mutated copy of the SQLite file `source` at `out`."""
    shutil.copyfile(source, out)
    how = rng.choice(("cell", "cell", "cell", "drop_table", "drop_column", "foreign", "bytes"))
    if how == "bytes":
        out.write_bytes(text_mutant(rng, source.read_bytes(), "csv"))
        return out
    con = sqlite3.connect(out)
    try:
        tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        table = rng.choice(tables)
        cols = [r[1] for r in con.execute(f"PRAGMA table_info({table})")]
        if how == "cell":
            rows = con.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
            for _ in range(rng.randint(1, 3)):
                try:
                    con.execute(f"UPDATE {table} SET {rng.choice(cols)} = {rng.choice(_NASTY_SQL)} "
                                f"WHERE rowid = {rng.randint(1, max(rows, 1))}")
                except sqlite3.IntegrityError:  # NOT NULL, or a key that must stay an integer
                    pass
        elif how == "drop_table":
            con.execute(f"DROP TABLE {table}")
        elif how == "drop_column":
            try:
                con.execute(f"ALTER TABLE {table} DROP COLUMN {rng.choice(cols)}")
            except sqlite3.OperationalError:  # a key or the only column: drop the table instead
                con.execute(f"DROP TABLE {table}")
        elif how == "foreign":
            for t in tables:
                con.execute(f"DROP TABLE {t}")
            con.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)")
            con.execute("INSERT INTO notes VALUES (1, 'not an nsys export')")
        con.commit()
    finally:
        con.close()
    return out


def nsys_db(path: Path, records: list[dict]) -> Path:
    """An nsys SQLite export laid out as NVIDIA's "SQLite Export Schema Reference" documents
    CUPTI_ACTIVITY_KIND_KERNEL and StringIds, filled with real CUPTI kernel records (the same
    CUpti_ActivityKernel fields, under the export's column names)."""
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL)")
    con.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INT NOT NULL, end INT NOT NULL, deviceId INT, "
                "contextId INT, streamId INT, correlationId INT, demangledName INT, shortName INT, "
                "registersPerThread INT, gridX INT, gridY INT, gridZ INT, blockX INT, blockY INT, blockZ INT, "
                "staticSharedMemory INT, dynamicSharedMemory INT, localMemoryPerThread INT)")
    names = {n: i for i, n in enumerate(sorted({r["name"] for r in records}), 1)}
    con.executemany("INSERT INTO StringIds VALUES (?, ?)", [(i, n) for n, i in names.items()])
    con.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", [
        (r["start"], r["end"], r["device_id"], r["context_id"], r["stream_id"], r["correlation_id"], names[r["name"]],
         names[r["name"]], r["registers_per_thread"], r["grid_x"], r["grid_y"], r["grid_z"], r["block_x"],
         r["block_y"], r["block_z"], r["static_shared_memory"], r["dynamic_shared_memory"],
         r["local_memory_per_thread"]) for r in records])
    con.commit()
    con.close()
    return path


# `ncu --csv --page details`: the launch columns, then one row per (kernel, metric) with
# Section Name, Metric Name, Metric Unit, Metric Value, as Nsight Compute's CLI documents it.
DETAILS_LAUNCH = ("ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream",
                  "Block Size", "Grid Size", "Device", "CC")
# (section, details metric name, unit, raw-page column it is taken from)
DETAILS_METRICS = (
    ("GPU Speed Of Light Throughput", "Duration", "nsecond", "gpu__time_duration.sum"),
    ("GPU Speed Of Light Throughput", "DRAM Throughput", "%", "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"),
    ("Launch Statistics", "Registers Per Thread", "register/thread", "launch__registers_per_thread"),
    ("Launch Statistics", "Static Shared Memory Per Block", "byte", "launch__shared_mem_per_block_static"),
    ("Launch Statistics", "Dynamic Shared Memory Per Block", "byte", "launch__shared_mem_per_block_dynamic"),
    ("Launch Statistics", "Threads", "thread", "launch__thread_count"),
)


def ncu_details(raw_csv: str) -> str:
    """A details page holding what a real raw page (`--page raw`) measured, kernel by kernel."""
    import csv
    import io

    lines = raw_csv.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith('"ID",'))
    rows = list(csv.reader(lines[head:]))
    header, kernels = rows[0], rows[2:]
    out = io.StringIO()
    w = csv.writer(out, quoting=csv.QUOTE_ALL, lineterminator="\n")
    w.writerow([*DETAILS_LAUNCH, "Section Name", "Metric Name", "Metric Unit", "Metric Value"])
    for row in kernels:
        launch = [row[header.index(c)] for c in DETAILS_LAUNCH]
        for section, name, unit, raw in DETAILS_METRICS:
            if raw in header:
                w.writerow([*launch, section, name, unit, row[header.index(raw)]])
    return "\n".join(lines[:head]) + "\n" + out.getvalue()




def kineto_doc() -> dict:
    """A Kineto-format variant of the real HTA excerpt (by hand, with the field names
    torch.profiler writes): the excerpt under a Kineto header pushed past 64 KiB, plus a second step, a
    memcpy and a memset, a kernel on GPU 1 and a ROCm-style kernel without grid/block."""
    T0 = 1666149715428509  # the excerpt's kernel start, us
    events = json.loads(CHROME_SAMPLE.read_text())["traceEvents"]
    events += [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#553", "pid": 3914, "tid": 3914,
         "ts": 1666149715446651, "dur": 1200, "args": {"External id": 49300}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::copy_", "pid": 3914, "tid": 3914, "ts": T0 + 100, "dur": 30,
         "args": {"External id": 70001}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync", "pid": 3914, "tid": 3914, "ts": T0 + 105,
         "dur": 8, "args": {"External id": 70001, "correlation": 9001}},
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoD (Device -> Device)", "pid": 0, "tid": 7,
         "ts": T0 + 110.25, "dur": 3.5, "args": {"External id": 70001, "device": 0, "context": 1, "stream": 7,
                                                  "correlation": 9001, "bytes": 1048576,
                                                  "memory bandwidth (GB/s)": 299.6}},
        {"ph": "X", "cat": "gpu_memset", "name": "Memset (Device)", "pid": 1, "tid": 9, "ts": T0 + 120,
         "dur": 1.25, "args": {"device": 1, "stream": 9, "correlation": 9002, "bytes": 4096}},
        {"ph": "X", "cat": "kernel", "name": "void at::native::vectorized_elementwise_kernel<4>", "pid": 1,
         "tid": 9, "ts": T0 + 130, "dur": 2, "args": {"device": 1, "stream": 9, "correlation": 9003,
                                                     "grid": [80, 1, 1], "block": [128, 1, 1]}},
        {"ph": "X", "cat": "kernel", "name": "Cijk_Ailk_Bljk_SB_MT64x64x8", "pid": 0, "tid": 3, "ts": T0 + 140,
         "dur": 5, "args": {"device": 0, "stream": 3, "correlation": 9004, "kernel": "Cijk_Ailk_Bljk_SB_MT64x64x8"}},
    ]
    pg = [{"pg_name": str(i), "pg_desc": "default_pg", "backend_config": "cuda:nccl", "ranks": list(range(8))}
          for i in range(1200)]
    return {
        "schemaVersion": 1,
        "deviceProperties": [{"id": i, "name": "NVIDIA H200", "totalGlobalMem": 150121218048, "computeMajor": 9,
                              "computeMinor": 0, "maxThreadsPerBlock": 1024} for i in range(2)],
        "distributedInfo": {"backend": "nccl", "rank": 3, "world_size": 8, "pg_count": len(pg), "pg_config": pg},
        "record_shapes": 1,
        "traceEvents": events,
        "traceName": "rank3.pt.trace.json",
    }


def profile_samples(tmp: Path) -> dict[str, list[Path]]:
    """Real inputs of every profile format, the built ones (nsys, ncu details, the Kineto
    variant) written to tmp."""
    tmp.mkdir(parents=True, exist_ok=True)
    details = tmp / "details.ncu.csv"
    details.write_text(ncu_details(NCU_SAMPLE.read_text()))
    db = nsys_db(tmp / "report.sqlite", json.loads(CUPTI_SAMPLE.read_text()))
    kineto = tmp / "rank3.pt.trace.json"
    kineto.write_text(json.dumps(kineto_doc()))
    return {"cupti": [CUPTI_SAMPLE], "chrome": [CHROME_SAMPLE, kineto], "iree-profile": list(IREE_SAMPLES),
            "ncu-raw": [NCU_SAMPLE], "ncu-details": [details], "rocprof": list(ROCPROF_SAMPLES), "nsys": [db]}


def compressed_mutant(rng: random.Random, blob: bytes, dialect: str) -> bytes:
    """A text profile compressed with one of the codecs rootcause reads by magic, mutated
    before compression (the codec is sound, the content not) or after (the codec is not)."""
    import bz2
    import gzip
    import lzma

    import lz4.frame
    import zstandard

    pack = rng.choice((gzip.compress, bz2.compress, lzma.compress, lz4.frame.compress,
                       zstandard.ZstdCompressor().compress))
    if rng.random() < 0.5:
        return pack(text_mutant(rng, blob, dialect))
    return text_mutant(rng, pack(blob), "csv")


# ---- Edited artifacts: a field of a JSON document rootcause wrote, replaced ------------------------

def leaves(doc, path: tuple = ()):
    """Every path into doc (keys and list indices; the first two items of each list)."""
    if isinstance(doc, dict):
        for key, value in doc.items():
            yield from leaves(value, path + (key,))
    elif isinstance(doc, list):
        for i, value in enumerate(doc[:2]):
            yield from leaves(value, path + (i,))
    if path:
        yield path


def edited(doc, path: tuple, value):
    """A copy of doc with the field at path replaced by value."""
    import copy

    out = copy.deepcopy(doc)
    parent = out
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = value
    return out
