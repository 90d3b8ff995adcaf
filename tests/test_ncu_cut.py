"""The ncu raw reader's column cut (parsers/_ncu_cut.c and its csv-module fallback in
parsers/ncu_csv.py): checked against the csv module's reading of the real captures and of
generated tables, and against the reader with the cutter taken away (pandas reading every
column, the reader as it was before the cut)."""
from __future__ import annotations

import csv
import io
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parsers import ParseError, ncu_csv

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
RAW = sorted(p for p in FIXTURES.rglob("*.csv") if "ncu" in p.name and b'"Metric Name"' not in p.read_bytes())
COUNTED = FIXTURES / "captures/h200-2026-12-04-ncu/tvm_bank_conflict/run/bank_conflict-pitch32.ncu.csv"
needs_cut = pytest.mark.skipif(ncu_csv._ncu_cut is None, reason="parsers._ncu_cut not built (setup.py build_ext --inplace)")
SOME = ["dram__bytes.sum", "launch__waves_per_multiprocessor", "no__such.metric"]


def _csv_table(path: Path) -> tuple[list[str], list[list[str]]]:
    """Header and kernel rows as the csv module reads the file (program output, ==PROF== lines
    and the units row left out)."""
    lines = path.read_text().splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith('"ID",'))
    rows = list(csv.reader(lines[head:]))
    return rows[0], rows[2:]


def _read(path: Path, metrics, cutter=True):
    """read_report's events and metrics, or its ParseError's text."""
    saved = ncu_csv._ncu_cut
    ncu_csv._ncu_cut = saved if cutter else None
    try:
        report = ncu_csv.read_report(path, metrics)
        return report.events, report.metrics
    except ParseError as err:
        return str(err)
    finally:
        ncu_csv._ncu_cut = saved


def _same(a, b) -> None:
    if isinstance(a, str) or isinstance(b, str):
        assert a == b
    else:
        pd.testing.assert_frame_equal(a[0], b[0], check_exact=True)
        pd.testing.assert_frame_equal(a[1], b[1], check_exact=True)


def test_raw_captures_exist():
    assert len(RAW) >= 20 and COUNTED in RAW


@needs_cut
@pytest.mark.parametrize("path", RAW, ids=lambda p: p.name)
def test_cut_reads_every_capture_as_the_csv_module(path):
    header, rows = _csv_table(path)
    data = path.read_bytes()
    offset, _, _ = ncu_csv._header_line(data)
    wanted = [c for c in header if c in ("ID", "Kernel Name", "gpu__time_duration.sum", "launch__grid_dim_x")]
    cut = ncu_csv._cut_rows(io.BytesIO(data[offset:]), header, wanted)
    assert cut is not None  # the compiled path, not a fallback
    got = list(csv.reader(cut.decode().splitlines()))
    assert got[0] == wanted and got[1] == [""]
    assert got[2:] == [[r[header.index(c)] for c in wanted] for r in rows]

    ev = ncu_csv.read_path(path)
    assert ev["kernel"].tolist() == [r[header.index("Kernel Name")] for r in rows]
    scale = {"ns": 1, "usecond": 1e3, "msecond": 1e6}[_csv_table_units(path)["gpu__time_duration.sum"]]
    durations = [round(float(r[header.index("gpu__time_duration.sum")].replace(",", "")) * scale) for r in rows]
    assert ev["duration_ns"].tolist() == durations
    assert ev["grid_x"].tolist() == [int(r[header.index("launch__grid_dim_x")].replace(",", "")) for r in rows]


def _csv_table_units(path: Path) -> dict[str, str]:
    lines = path.read_text().splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith('"ID",'))
    header, units = csv.reader(lines[head:head + 2])
    return dict(zip(header, units))


@pytest.mark.parametrize("path", RAW, ids=lambda p: p.name)
@pytest.mark.parametrize("metrics", [False, SOME], ids=["events", "some-metrics"])
def test_cut_and_pandas_alone_agree_on_every_capture(path, metrics):
    _same(_read(path, metrics), _read(path, metrics, cutter=False))


def _edit_row(lines: list[bytes], head: int, edit) -> None:
    lines[head + 3] = edit(lines[head + 3])


ODD = {  # name -> change to the lines of a real capture (head: the header's index)
    "doubled quote in a name": lambda ls, h: _edit_row(ls, h, lambda r: _set_field(r, ls[h], "Kernel Name", b'x""y k')),
    "empty line": lambda ls, h: ls.insert(h + 4, b""),
    "CRLF": lambda ls, h: ls.__setitem__(slice(None), [line + b"\r" if line else line for line in ls]),
    "no final newline": lambda ls, h: ls.pop(),
    "a field too many": lambda ls, h: _edit_row(ls, h, lambda r: r + b',"7"'),
    "a row cut short": lambda ls, h: _edit_row(ls, h, lambda r: r.rsplit(b",", 40)[0]),
    "newline in a name": lambda ls, h: _edit_row(ls, h, lambda r: _set_field(r, ls[h], "Kernel Name", b"x\ny")),
    "n/a duration": lambda ls, h: _edit_row(ls, h, lambda r: _set_field(r, ls[h], "gpu__time_duration.sum", b"n/a")),
    "text duration": lambda ls, h: _edit_row(ls, h, lambda r: _set_field(r, ls[h], "gpu__time_duration.sum", b"12x")),
    "invalid UTF-8 in a name": lambda ls, h: _edit_row(ls, h, lambda r: _set_field(r, ls[h], "Kernel Name", b"\xffk")),
    "invalid UTF-8 elsewhere": lambda ls, h: _edit_row(ls, h, lambda r: _set_field(r, ls[h], "Process Name", b"\xffp")),
    "an unquoted field": lambda ls, h: _edit_row(ls, h, lambda r: r.replace(b'"', b"", 2)),
    "==PROF== line after the table": lambda ls, h: ls.insert(len(ls) - 1, b"==PROF== Disconnected"),
    "NUL in a name": lambda ls, h: _edit_row(ls, h, lambda r: _set_field(r, ls[h], "Kernel Name", b"\x00k")),
    "no rows": lambda ls, h: ls.__setitem__(slice(h + 2, None), [b""]),
}


def _set_field(row: bytes, header: bytes, column: str, value: bytes) -> bytes:
    fields = row[1:-1].split(b'","')  # the capture's rows hold no quote inside a field
    fields[next(csv.reader([header.decode()])).index(column)] = value
    return b'"' + b'","'.join(fields) + b'"'


@pytest.mark.parametrize("name", ODD)
def test_odd_rows_read_as_pandas_alone_reads_them(name, tmp_path):
    original = COUNTED.read_bytes().split(b"\n")
    lines = list(original)
    head = next(i for i, line in enumerate(lines) if line.startswith(b'"ID",'))
    ODD[name](lines, head)
    assert lines != original
    path = tmp_path / "odd.ncu.csv"
    path.write_bytes(b"\n".join(lines))
    for metrics in (False, SOME):
        _same(_read(path, metrics), _read(path, metrics, cutter=False))
    if name == "doubled quote in a name":  # the fallback through the csv module, against it
        header, rows = _csv_table(path)
        assert ncu_csv.read_path(path)["kernel"].tolist() == [r[header.index("Kernel Name")] for r in rows]
        assert rows[1][header.index("Kernel Name")] == 'x"y k'
    if name == "text duration":
        assert "not a number: '12x'" in _read(path, False)


FIELD = st.text(st.characters(blacklist_characters='"\n', blacklist_categories=("Cs",)), max_size=12)


@needs_cut
@settings(max_examples=200, deadline=None)
@given(st.integers(1, 8).flatmap(lambda n: st.tuples(
    st.lists(st.lists(FIELD, min_size=n, max_size=n), max_size=6),
    st.lists(st.booleans(), min_size=n, max_size=n), st.booleans())))
def test_compiled_cut_against_the_csv_module(case):
    rows, keep, crlf = case
    end = "\r\n" if crlf else "\n"
    data = "".join(",".join(f'"{f}"' for f in row) + end for row in rows).encode()
    cut = ncu_csv._ncu_cut.cut(data, bytes(keep))
    parsed = list(csv.reader(io.StringIO(data.decode(), newline="")))
    want = [[f for f, k in zip(row, keep) if k] for row in parsed]
    assert [r for r in csv.reader(io.StringIO(cut.decode(), newline=""))] == [w if w else [] for w in want]


@needs_cut
@pytest.mark.parametrize("line", [b'"a","b""c","d"', b'"a","b"', b'"a","b","c","d"', b'"a",b,"c"', b"",
                                  b'"a","b" ,"c"', b'"a","b","c"x', b'"a","b\rc"\r\r', b'"a","b","c'])
def test_compiled_cut_declines_what_is_not_a_plain_row(line):
    good = b'"1","2","3"\n'
    assert ncu_csv._ncu_cut.cut(good + line + b"\n" + good, b"\x01\x00\x01") is None


@needs_cut
def test_compiled_cut_wants_whole_lines():
    with pytest.raises(ValueError):
        ncu_csv._ncu_cut.cut(b'"1","2"', b"\x01\x01")
    assert ncu_csv._ncu_cut.cut(b"", b"\x01") == b""
    assert ncu_csv._ncu_cut.cut(b'"1","2"\n' * 3, b"\x00\x01") == b'"2"\n' * 3


def test_without_the_compiled_cutter_pandas_reads_the_capture(monkeypatch):
    monkeypatch.setattr(ncu_csv, "_ncu_cut", None)
    header, rows = _csv_table(COUNTED)
    ev = ncu_csv.read_path(COUNTED)
    assert ev["kernel"].tolist() == [r[header.index("Kernel Name")] for r in rows]
    assert np.array_equal(ev["block_x"].to_numpy(), [int(r[header.index("launch__block_dim_x")]) for r in rows])


@needs_cut
def test_a_metric_column_with_text_in_it_is_text_throughout(tmp_path):
    """NcuReport.metrics is numeric where every value parses; pandas alone types a 273-column
    page in chunks of ~2,000 rows, so text in a late row left the early ones floats."""
    header, rows = _csv_table(COUNTED)
    column = header.index("launch__waves_per_multiprocessor")
    lines = COUNTED.read_text().splitlines()
    head = lines.index(next(line for line in lines if line.startswith('"ID",')))
    out = io.StringIO()
    writer = csv.writer(out, quoting=csv.QUOTE_ALL, lineterminator="\n")
    body = []
    for i in range(6000):
        row = [str(i)] + rows[i % len(rows)][1:]
        row[column] = "abc" if i == 5000 else row[column]
        body.append(row)
    writer.writerows(body)
    path = tmp_path / "mixed.ncu.csv"
    path.write_text("\n".join(lines[:head + 2]) + "\n" + out.getvalue())
    numbers = "launch__registers_per_thread"
    metrics = ncu_csv.read_report(path, ["launch__waves_per_multiprocessor", numbers]).metrics
    assert metrics["launch__waves_per_multiprocessor"].tolist() == [r[column] for r in body]
    assert metrics[numbers].tolist() == [int(r[header.index(numbers)]) for r in body]
