"""The bad values issue 13's fuzzing found, each against its reader: one ParseError naming the
file, the record / line / row and what is wrong (never OverflowError, ValueError, csv.Error,
DatabaseError, UnicodeDecodeError, nor a silent INT64_MIN)."""
from __future__ import annotations

import csv
import json
import sqlite3

import pytest

from mutation import CHROME_SAMPLE, CUPTI_SAMPLE, IREE_SAMPLES, NCU_SAMPLE, ROCPROF_SAMPLES, nsys_db
from parsers import ParseError, chrome_trace, cupti_json, iree_profile, ncu_csv, nsys_sqlite, rocprof


@pytest.mark.parametrize("value,what", [
    ("NaN", "expected an integer, got nan"),
    ("Infinity", "expected an integer, got inf"),
    ("-Infinity", "expected an integer, got -inf"),
    ("9223372036854775808", "9223372036854775808 is beyond the int64 range"),
    ("123456789012345678901234567890", "is beyond the int64 range"),
])
def test_cupti_nonfinite_and_huge(value, what):
    text = CUPTI_SAMPLE.read_text()
    records = json.loads(text)
    records[3]["grid_x"] = "@"
    bad = json.dumps(records).replace('"@"', value)
    with pytest.raises(ParseError, match=rf"^c\.json: record 3: column 'grid_x': .*{what}"):
        cupti_json.events(bad.encode(), "c.json")


@pytest.mark.parametrize("value", ["NaN", "Infinity", "1e400", "1e300"])
def test_chrome_nonfinite_and_huge_times(value):
    doc = json.loads(CHROME_SAMPLE.read_text())
    index = next(i for i, e in enumerate(doc["traceEvents"]) if e.get("cat") == "kernel")
    doc["traceEvents"][index]["ts"] = "@"
    bad = json.dumps(doc).replace('"@"', value)
    with pytest.raises(ParseError, match=rf"^t\.json: (event {index}|line 1, column \d+): "):
        chrome_trace.events(bad.encode(), "t.json")


def test_iree_huge_and_odd_type():
    lines = IREE_SAMPLES[0].read_text().splitlines()
    row = json.loads(lines[1])
    row["end_host_time_ns"] = 2 ** 64
    with pytest.raises(ParseError, match=r"^i\.jsonl: line 2: column 'end_host_time_ns': 18446744073709551616 is beyond"):
        iree_profile.events("\n".join([lines[0], json.dumps(row), *lines[2:]]).encode(), "i.jsonl")
    row["type"] = [1]
    with pytest.raises(ParseError, match=r"^i\.jsonl: line 2: column 'type': expected a string"):
        iree_profile.events("\n".join([lines[0], json.dumps(row), *lines[2:]]).encode(), "i.jsonl")


@pytest.mark.parametrize("value", ["9223372036854775808", "18446744073709551616", "1e30"])
def test_rocprof_timestamp_beyond_int64_is_an_error(value):
    """Once read as INT64_MIN with an exit-0 report of zero times."""
    rows = list(csv.reader(ROCPROF_SAMPLES[0].open()))
    col = rows[0].index("End_Timestamp")
    rows[2][col] = value
    text = "\n".join(",".join(f'"{v}"' for v in r) for r in rows)
    with pytest.raises(ParseError, match=r"^r\.csv: line 3: column 'End_Timestamp': .*beyond the int64 range"):
        rocprof.events(text.encode(), "r.csv")


def test_ncu_csv_module_errors():
    text = NCU_SAMPLE.read_text()
    head = next(i for i, line in enumerate(text.splitlines()) if line.startswith('"ID",'))
    lines = text.splitlines()
    lines[head] += ',"' + "y" * 200_000  # a field over the csv module's limit
    with pytest.raises(ParseError, match=rf"^n\.csv: line {head + 1}: bad CSV"):
        ncu_csv.events("\n".join(lines).encode(), "n.csv")
    lines = text.splitlines()
    lines[head + 1] = '"' + "x" * 200_000  # an open quote over the csv module's field limit
    with pytest.raises(ParseError, match=rf"^n\.csv: line {head + 2}: "):
        ncu_csv.events("\n".join(lines).encode(), "n.csv")


def test_ncu_duration_beyond_int64():
    rows = list(csv.reader(NCU_SAMPLE.read_text().splitlines()))
    head = next(i for i, r in enumerate(rows) if r and r[0] == "ID")
    col = rows[head].index("gpu__time_duration.sum")
    rows[head + 3][col] = "1e30"
    text = "\n".join(",".join(f'"{v}"' for v in r) for r in rows)
    with pytest.raises(ParseError, match=rf"^n\.csv: line {head + 4}: column 'duration': .*beyond the int64 range"):
        ncu_csv.events(text.encode(), "n.csv")


def test_nsys_foreign_and_bad_text(tmp_path):
    foreign = tmp_path / "other.sqlite"
    con = sqlite3.connect(foreign)
    con.execute("CREATE TABLE notes (body TEXT)")
    con.commit()
    con.close()
    with pytest.raises(ParseError, match=r"other\.sqlite: sqlite: no CUPTI_ACTIVITY_KIND_KERNEL table"):
        nsys_sqlite.read_path(foreign)
    db = nsys_db(tmp_path / "r.sqlite", json.loads(CUPTI_SAMPLE.read_text())[:5])
    con = sqlite3.connect(db)
    con.execute("UPDATE StringIds SET value = CAST(X'FFFE80' AS TEXT) WHERE id = 1")
    con.commit()
    con.close()
    with pytest.raises(ParseError, match=r"r\.sqlite: sqlite: .*(not UTF-8|decode to UTF-8)"):
        nsys_sqlite.read_path(db)
    con = sqlite3.connect(db)
    con.execute("UPDATE StringIds SET value = 'k'")
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET gridX = 1e300 WHERE rowid = 2")
    con.commit()
    con.close()
    with pytest.raises(ParseError, match=r"rowid 2: column 'gridX': not an integer: 1e\+300"):
        nsys_sqlite.read_path(db)


def test_messages_stay_on_one_line():
    err = ParseError("f", "line 3", "got 'a\nb'" + "x" * 5000)
    assert "\n" not in str(err) and len(str(err)) < 500


def test_zero_block_is_refused():
    """A launch with a block dimension of 0 (CUDA refuses one) once reached the occupancy
    calculator through `compare` and ended in a ValueError traceback (fuzz campaign)."""
    rows = list(csv.reader(NCU_SAMPLE.read_text().splitlines()))
    head = next(i for i, r in enumerate(rows) if r and r[0] == "ID")
    rows[head + 4][rows[head].index("launch__block_dim_x")] = "0"
    text = "\n".join(",".join(f'"{v}"' for v in r) for r in rows)
    with pytest.raises(ParseError, match=rf"^n\.csv: line {head + 5}: column 'block_x': 0 \(a launch has at least 1\)"):
        ncu_csv.events(text.encode(), "n.csv")
    records = json.loads(CUPTI_SAMPLE.read_text())
    records[1]["registers_per_thread"] = -3
    with pytest.raises(ParseError, match=r"^c\.json: record 1: column 'registers': -3"):
        cupti_json.events(json.dumps(records).encode(), "c.json")
