"""CUPTI JSON and ncu CSV imports, checked against the real H200 captures read independently
(json / csv from the standard library), and graph-call splitting of those captures."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from parsers import ParseError, cupti_json, ncu_csv
from rootcause.model import KERNEL_EVENT_COLUMNS
from rootcause.profilers import call_summary, load, sniff, split_calls

CAPTURES = Path(__file__).resolve().parent.parent / "fixtures" / "captures" / "h200-2026-12-02"
CUPTI = CAPTURES / "tvm_pool_fusion.cupti.json"
NCU = CAPTURES / "tvm_pool_fusion.ncu-raw.csv"


@pytest.fixture(scope="module")
def cupti_records():
    return json.loads(CUPTI.read_text())


@pytest.fixture(scope="module")
def ncu_rows():
    lines = [line for line in NCU.read_text().splitlines() if not line.startswith("==PROF==")]
    rows = list(csv.reader(lines))
    return rows[0], rows[1], rows[2:]  # header, units, kernels


def test_cupti_matches_records(cupti_records):
    ev = load(CUPTI)
    assert list(ev.columns) == list(KERNEL_EVENT_COLUMNS)
    assert len(ev) == len(cupti_records) == 440
    recs = sorted(cupti_records, key=lambda r: r["start"])
    assert ev["kernel"].tolist() == [r["name"] for r in recs]
    assert ev["start_ns"].tolist() == [r["start"] for r in recs]
    assert ev["duration_ns"].tolist() == [r["end"] - r["start"] for r in recs]
    assert ev["grid_x"].tolist() == [r["grid_x"] for r in recs]
    assert ev["block_x"].tolist() == [r["block_x"] for r in recs]
    assert ev["registers"].tolist() == [r["registers_per_thread"] for r in recs]
    assert ev["shared_bytes"].tolist() == [r["static_shared_memory"] + r["dynamic_shared_memory"] for r in recs]
    assert ev["correlation_id"].tolist() == [r["correlation_id"] for r in recs]
    assert (ev["source"] == "cupti").all() and (ev["call"] == -1).all()
    assert str(ev["grid_y"].dtype) == "Int64"


def test_cupti_jsonl_equals_array(cupti_records, tmp_path):
    path = tmp_path / "k.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in cupti_records) + "\n")
    pd.testing.assert_frame_equal(load(path), load(CUPTI))


@pytest.mark.parametrize("cut", [1, 5000, 200_000, -2])
def test_cupti_truncated(cut):
    data = CUPTI.read_bytes()[:cut]
    with pytest.raises(ParseError, match=r"tvm\.json: record \d+ .*truncated JSON"):
        cupti_json.events(data, "tvm.json")


def test_cupti_wrong_type_names_record_and_column(cupti_records):
    recs = [dict(r) for r in cupti_records[:20]]
    recs[7]["grid_x"] = "576"
    with pytest.raises(ParseError, match=r"^t\.json: record 7: column 'grid_x': expected an integer, got '576'$"):
        cupti_json.events(json.dumps(recs).encode(), "t.json")
    recs[7]["grid_x"] = 576
    del recs[11]["start"]
    with pytest.raises(ParseError, match=r"record 11: column 'start': missing"):
        cupti_json.events(json.dumps(recs).encode(), "t.json")
    lines = "\n".join(json.dumps(r) for r in recs[:5]) + "\n{\"name\": \"x\", \"start\": 1,"
    with pytest.raises(ParseError, match=r"^t\.json: line 6: bad JSON Lines record"):
        cupti_json.events(lines.encode(), "t.json")


def test_cupti_end_before_start(cupti_records):
    recs = [dict(r) for r in cupti_records[:4]]
    recs[2]["end"] = recs[2]["start"] - 1
    with pytest.raises(ParseError, match="record 2: end .* before start"):
        cupti_json.events(json.dumps(recs).encode(), "t.json")


def test_ncu_raw_matches_csv(ncu_rows):
    header, units, kernels = ncu_rows
    col = {name: i for i, name in enumerate(header)}
    report = ncu_csv.read(NCU.read_bytes(), str(NCU))
    ev = report.events
    assert len(ev) == len(kernels) == 66
    assert ev["kernel"].tolist() == [r[col["Kernel Name"]] for r in kernels]
    assert units[col["gpu__time_duration.sum"]] == "ns"
    want = [int(r[col["gpu__time_duration.sum"]].replace(",", "")) for r in kernels]
    assert ev["duration_ns"].tolist() == want
    # no timeline in ncu: back to back in ID order
    assert ev["start_ns"].tolist() == list(np.cumsum([0] + want[:-1]))
    assert ev["grid_x"].tolist() == [int(r[col["launch__grid_dim_x"]].replace(",", "")) for r in kernels]
    assert ev["registers"].tolist() == [int(r[col["launch__registers_per_thread"]]) for r in kernels]
    static = [int(r[col["launch__shared_mem_per_block_static"]].replace(",", "")) for r in kernels]
    assert ev["shared_bytes"].tolist() == static
    # the metrics table keeps every column, numeric where ncu printed numbers
    assert report.metrics.shape == (66, len(header))
    dram = [float(r[col["dram__bytes.sum"]].replace(",", "")) for r in kernels]
    assert report.metrics["dram__bytes.sum"].tolist() == dram
    assert report.units["dram__bytes.sum"] == "byte"


def test_ncu_bad_inputs(ncu_rows, tmp_path):
    data = NCU.read_bytes()
    lines = data.decode().split("\n")
    head = next(i for i, line in enumerate(lines) if line.startswith('"ID"'))
    # a last row cut between two fields loses its duration; cut inside a quoted field: EOF
    row = lines[head + 5]
    cut = "\n".join(lines[:head + 5]) + "\n" + row[:row.index('","', 300) + 1]
    with pytest.raises(ParseError, match=rf"^n\.csv: line {head + 6}: column 'gpu__time_duration.sum': missing"):
        ncu_csv.events(cut.encode(), "n.csv")
    cut = "\n".join(lines[:head + 5]) + "\n" + row[:row.index('","', 300) + 3]
    with pytest.raises(ParseError, match=rf"^n\.csv: line {head + 6}: bad CSV: .*EOF inside string"):
        ncu_csv.events(cut.encode(), "n.csv")
    renamed = data.replace(b'"gpu__time_duration.sum"', b'"gpu__time_duration.total"')
    with pytest.raises(ParseError, match=rf"n\.csv: line {head + 1}: missing required column\(s\): gpu__time_duration.sum"):
        ncu_csv.events(renamed, "n.csv")
    header = ncu_rows[0]
    fields = next(csv.reader([lines[head + 3]]))
    fields[header.index("gpu__time_duration.sum")] = "fast"
    bad = ",".join(f'"{f}"' for f in fields)
    typed = "\n".join(lines[:head + 3] + [bad] + lines[head + 4:])
    with pytest.raises(ParseError, match=rf"^n\.csv: line {head + 4}: column 'gpu__time_duration.sum': not a number: 'fast'$"):
        ncu_csv.read(typed.encode(), "n.csv")
    with pytest.raises(ParseError, match="no ncu CSV header"):
        ncu_csv.events(b"==PROF== Connected\nhello\n", "n.csv")


def test_sniff():
    assert sniff(CUPTI.read_bytes()[:65536]) == "cupti"
    assert sniff(NCU.read_bytes()[:65536]) == "ncu"
    assert sniff(b"hello") is None


def test_split_cupti_capture(cupti_records):
    ev = split_calls(load(CUPTI))
    # Independent reading of the capture: names per call from correlation order.
    names = [r["name"] for r in sorted(cupti_records, key=lambda r: r["correlation_id"])]
    on, off = names[:3], names[60:79]
    assert names == on * 20 + off * 20
    assert ev["call"].tolist() == [i // 3 for i in range(60)] + [20 + i // 19 for i in range(380)]
    assert ev["segment"].tolist() == [0] * 60 + [1] * 380
    summary = call_summary(ev)
    assert len(summary) == 40
    recs = sorted(cupti_records, key=lambda r: r["start"])
    for row in summary.itertuples():
        lo = 3 * row.call if row.call < 20 else 60 + 19 * (row.call - 20)
        call = recs[lo:lo + (3 if row.call < 20 else 19)]
        assert row.launches == len(call)
        assert row.kernel_ns == sum(r["end"] - r["start"] for r in call)
        assert row.span_ns == call[-1]["end"] - call[0]["start"]
        # one stream: kernels never overlap, so busy == sum and gaps are the idle time
        assert row.busy_ns == row.kernel_ns
        assert row.gap_ns == sum(b["start"] - a["end"] for a, b in zip(call, call[1:]))


def test_split_fixed_and_errors():
    ev = load(CUPTI)
    fixed = split_calls(ev.iloc[:60], calls=20)
    assert fixed["call"].tolist() == [i // 3 for i in range(60)]
    assert split_calls(ev.iloc[:60], kernels_per_call=3)["call"].tolist() == fixed["call"].tolist()
    from rootcause.errors import UsageError
    with pytest.raises(UsageError, match="do not split"):
        split_calls(ev.iloc[:61], calls=20)


def test_busy_counts_overlap_once():
    """Two streams overlapping: union of intervals, computed here by brute force on a grid."""
    from parsers.events import frame
    rng = np.random.default_rng(0)
    start = np.sort(rng.integers(0, 1000, 30))
    end = start + rng.integers(1, 200, 30)
    ev = frame({"kernel": ["k"] * 30, "start_ns": start, "end_ns": end, "stream": [i % 2 for i in range(30)]}, "cupti")
    row = call_summary(ev).iloc[0]
    covered = np.zeros(end.max() + 1, dtype=bool)
    for s, e in zip(start, end):
        covered[s:e] = True
    assert row.busy_ns == covered.sum()
    assert row.gap_ns == (end.max() - start.min()) - covered.sum()


def test_ncu_metric_selection(ncu_rows):
    """The wide table holds the requested metrics the file has, read from the file, with the
    same events as the whole table; values against the csv module."""
    from rootcause.profilers import load_ncu

    header, units, kernels = ncu_rows
    full = load_ncu(NCU)
    some = load_ncu(NCU, metrics=["dram__bytes.sum", "sm__warps_active.avg.pct_of_peak_sustained_active", "no__such.metric"])
    pd.testing.assert_frame_equal(some.events, full.events)
    assert list(some.metrics.columns) == [c for c in header if c in
                                          ("ID", "Kernel Name", "dram__bytes.sum", "sm__warps_active.avg.pct_of_peak_sustained_active")]
    col = header.index("sm__warps_active.avg.pct_of_peak_sustained_active")
    assert some.metrics["sm__warps_active.avg.pct_of_peak_sustained_active"].tolist() == [float(r[col].replace(",", "")) for r in kernels]
    assert load_ncu(NCU, metrics=False).metrics.shape == (66, 0)
    pd.testing.assert_frame_equal(full.metrics, ncu_csv.read(NCU.read_bytes(), str(NCU)).metrics)


def test_ncu_grid_from_text_when_launch_dims_absent(ncu_rows, tmp_path):
    """Without launch__grid_dim_* / launch__block_dim_*, grid and block come from the
    '(x, y, z)' Grid Size / Block Size columns (parsed here with the csv module)."""
    header, units, kernels = ncu_rows
    drop = {i for i, c in enumerate(header) if c.startswith(("launch__grid_dim_", "launch__block_dim_"))}
    assert len(drop) == 6
    keep = lambda row: ",".join(f'"{v}"' for i, v in enumerate(row) if i not in drop)  # noqa: E731
    path = tmp_path / "narrow.csv"
    path.write_text("\n".join(keep(r) for r in [header, units, *kernels]) + "\n")
    ev = load(path)
    triple = lambda text: [int(v) for v in text.strip("()").split(",")]  # noqa: E731
    grid = [triple(r[header.index("Grid Size")]) for r in kernels]
    block = [triple(r[header.index("Block Size")]) for r in kernels]
    assert ev[["grid_x", "grid_y", "grid_z"]].values.tolist() == grid
    assert ev[["block_x", "block_y", "block_z"]].values.tolist() == block


COUNTED = CAPTURES.parent / "h200-2026-12-04-ncu" / "tvm_bank_conflict" / "run" / "bank_conflict-pitch32.ncu.csv"


def test_ncu_counter_columns_are_the_sums_the_raw_page_holds():
    """A raw page with the memory counters (fixtures/captures/h200-2026-12-04-ncu/): each counter
    column is its ld + st metrics, per launch, as the csv module reads them; a page without them
    (the pool_fusion capture) leaves the columns NA."""
    lines = COUNTED.read_text().splitlines()
    rows = list(csv.reader(lines[next(i for i, s in enumerate(lines) if s.startswith('"ID"')):]))
    header, kernels = rows[0], rows[2:]

    def both(fmt: str) -> list[int]:
        return [sum(int(r[header.index(fmt.format(op))].replace(",", "")) for op in ("ld", "st")) for r in kernels]

    ev = ncu_csv.read_path(COUNTED)
    assert ev["global_sectors"].tolist() == both("l1tex__t_sectors_pipe_lsu_mem_global_op_{}.sum")
    assert ev["global_requests"].tolist() == both("l1tex__t_requests_pipe_lsu_mem_global_op_{}.sum")
    assert ev["shared_wavefronts"].tolist() == both("l1tex__data_pipe_lsu_wavefronts_mem_shared_op_{}.sum")
    assert ev["shared_instructions"].tolist() == both("smsp__inst_executed_op_shared_{}.sum")
    l2 = [int(r[header.index("lts__t_sectors_op_read.sum")].replace(",", ""))
          + int(r[header.index("lts__t_sectors_op_write.sum")].replace(",", "")) for r in kernels]
    assert ev["l2_sectors"].tolist() == l2
    assert ncu_csv.read_path(NCU)[["global_sectors", "l2_sectors", "shared_wavefronts"]].isna().all().all()
