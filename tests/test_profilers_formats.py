"""rocprofv3 CSV, Chrome trace, iree-profile JSONL and nsys SQLite imports, each checked
against the capture file read independently (csv / json / sqlite3 from the standard library)."""
from __future__ import annotations

import csv
import json
import math
import sqlite3
import subprocess
from pathlib import Path

import pytest
from pandas.testing import assert_frame_equal

from mutation import nsys_db
from parsers import ParseError, chrome_trace, iree_profile, nsys_sqlite, rocprof
from rootcause.model import KERNEL_EVENT_COLUMNS
from rootcause.profilers import call_summary, load, split_calls

CAPTURES = Path(__file__).resolve().parent.parent / "fixtures" / "captures"
ROC_NEW = CAPTURES / "rocprofv3" / "kernel_trace.sdk-481f7ff.csv"
ROC_OLD = CAPTURES / "rocprofv3" / "kernel_trace.sdk-029ff02.csv"
CHROME = CAPTURES / "chrome" / "hta_backward_thread.json"
IREE = CAPTURES / "iree-3.13-local-task"
CUPTI = CAPTURES / "h200-2026-12-02" / "tvm_pool_fusion.cupti.json"


@pytest.mark.parametrize("path", [ROC_NEW, ROC_OLD], ids=["new-header", "old-header"])
def test_rocprof_matches_csv(path):
    rows = sorted(csv.DictReader(path.open()), key=lambda r: int(r["Start_Timestamp"]))
    ev = load(path)
    assert list(ev.columns) == list(KERNEL_EVENT_COLUMNS) and (ev["source"] == "rocprof").all()
    assert ev["kernel"].tolist() == [r["Kernel_Name"] for r in rows]
    assert ev["start_ns"].tolist() == [int(r["Start_Timestamp"]) for r in rows]
    assert ev["duration_ns"].tolist() == [int(r["End_Timestamp"]) - int(r["Start_Timestamp"]) for r in rows]
    # work-items -> workgroups
    assert ev["grid_x"].tolist() == [math.ceil(int(r["Grid_Size_X"]) / int(r["Workgroup_Size_X"])) for r in rows]
    assert ev["grid_y"].tolist() == [int(r["Grid_Size_Y"]) for r in rows]  # workgroup y is 1
    assert ev["block_x"].tolist() == [int(r["Workgroup_Size_X"]) for r in rows]
    assert ev["stream"].tolist() == [int(r["Stream_Id"]) for r in rows]
    assert ev["correlation_id"].tolist() == [int(r["Correlation_Id"]) for r in rows]
    assert ev["device"].tolist() == [int(r["Agent_Id"].replace("Agent ", "")) for r in rows]
    if "VGPR_Count" in rows[0]:
        assert ev["registers"].tolist() == [int(r["VGPR_Count"]) for r in rows]
        assert ev["shared_bytes"].tolist() == [int(r["LDS_Block_Size"]) for r in rows]
    else:
        assert ev["registers"].isna().all()
        assert ev["shared_bytes"].tolist() == [int(r["Group_Segment_Size"]) for r in rows]


def test_rocprof_split_calls():
    # The older sample runs the same 4 kernels twice (two streams, one after the other).
    ev = split_calls(load(ROC_OLD))
    assert ev["call"].tolist() == [0] * 4 + [1] * 4
    assert call_summary(ev)["launches"].tolist() == [4, 4]


def test_rocprof_bad_inputs():
    text = ROC_NEW.read_text()
    lines = text.splitlines()
    with pytest.raises(ParseError, match=r"^r\.csv: line 1: missing required column\(s\): End_Timestamp$"):
        rocprof.events(text.replace('"End_Timestamp"', '"Stop"').encode(), "r.csv")
    fields = next(csv.reader([lines[3]]))
    fields[9] = "soon"  # Start_Timestamp
    bad = "\n".join(lines[:3] + [",".join(f'"{f}"' for f in fields)] + lines[4:])
    with pytest.raises(ParseError, match=r"^r\.csv: line 4: column 'Start_Timestamp': expected an integer, got 'soon'$"):
        rocprof.events(bad.encode(), "r.csv")
    cut = "\n".join(lines[:5]) + "\n" + lines[5][:lines[5].index(",1550151853")]
    with pytest.raises(ParseError, match=r"^r\.csv: line 6: column 'Start_Timestamp': missing$"):
        rocprof.events(cut.encode(), "r.csv")


def test_rocprof_agents_and_streamed_file(tmp_path):
    """Agent_Id is parsed per distinct value: a bad one is named by its line; the file path
    (parsed from the file) and the bytes give the same table."""
    lines = ROC_NEW.read_text().splitlines()
    assert_frame_equal(rocprof.read_path(ROC_NEW), rocprof.events(ROC_NEW.read_bytes(), str(ROC_NEW)))
    fields = next(csv.reader([lines[4]]))
    fields[1] = "GPU 4"
    bad = "\n".join(lines[:4] + [",".join(f'"{f}"' for f in fields)] + lines[5:])
    with pytest.raises(ParseError, match=r"^r\.csv: line 5: column 'Agent_Id': expected N or 'Agent N', got 'GPU 4'$"):
        rocprof.events(bad.encode(), "r.csv")
    rows = [next(csv.reader([line])) for line in lines]
    for r in rows[1:]:
        r[1] = ""  # no agent recorded
    blank = "\n".join(",".join(f'"{f}"' for f in r) for r in rows)
    assert rocprof.events(blank.encode(), "r.csv")["device"].isna().all()


def test_chrome_selects_kernels_only():
    doc = json.loads(CHROME.read_text())
    kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    ev = load(CHROME)
    assert len(ev) == len(kernels) == 1
    k, row = kernels[0], ev.iloc[0]
    assert row["kernel"] == k["name"]
    assert row["start_ns"] == round(k["ts"] * 1000) and row["duration_ns"] == round(k["dur"] * 1000)
    assert [row["grid_x"], row["grid_y"], row["grid_z"]] == k["args"]["grid"]
    assert [row["block_x"], row["block_y"], row["block_z"]] == k["args"]["block"]
    assert row["registers"] == k["args"]["registers per thread"]
    assert row["shared_bytes"] == k["args"]["shared memory"]
    assert row["correlation_id"] == k["args"]["correlation"] and row["stream"] == k["args"]["stream"]


def test_chrome_begin_end_and_bare_list():
    events = json.loads(CHROME.read_text())["traceEvents"]
    k = next(e for e in events if e.get("cat") == "kernel")
    begin = {**k, "ph": "B"}
    begin.pop("dur")
    end = {"ph": "E", "pid": k["pid"], "tid": k["tid"], "ts": k["ts"] + k["dur"]}
    pairs = [e for e in events if e is not k] + [begin, end]
    ev = chrome_trace.events(json.dumps(pairs).encode(), "t.json")  # bare list form
    assert ev["duration_ns"].tolist() == [round(k["dur"] * 1000)]
    with pytest.raises(ParseError, match=r"'B' event never closed"):
        chrome_trace.events(json.dumps(pairs[:-1]).encode(), "t.json")


def test_chrome_bad_inputs():
    data = CHROME.read_bytes()
    with pytest.raises(ParseError, match=r"^t\.json: line \d+, column \d+: bad JSON"):
        chrome_trace.events(data[:2000], "t.json")
    doc = json.loads(data)
    k = next(e for e in doc["traceEvents"] if e.get("cat") == "kernel")
    k["dur"] = "45"
    with pytest.raises(ParseError, match=r"^t\.json: event 5: column 'dur': expected a number of microseconds, got '45'$"):
        chrome_trace.events(json.dumps(doc).encode(), "t.json")
    k["dur"], k["args"]["grid"] = 45, [32, 1]
    with pytest.raises(ParseError, match=r"event 5: column 'args.grid': expected \[x, y, z\]"):
        chrome_trace.events(json.dumps(doc).encode(), "t.json")


def _iree_rows(path, field, value):
    return [r for r in map(json.loads, path.read_text().splitlines()) if r.get(field) == value]


@pytest.mark.parametrize("name,field,value", [
    ("two_matmuls.dispatch.jsonl", "type", "host_dispatch_event"),
    ("two_matmuls.ireeperf.jsonl", "record_type", "host_execution_event"),
])
def test_iree_profile_matches_jsonl(name, field, value):
    rows = [r for r in _iree_rows(IREE / name, field, value) if r.get("op", "dispatch") == "dispatch"]
    ev = load(IREE / name)
    assert len(ev) == len(rows) == 24 and (ev["source"] == "iree-profile").all()
    assert ev["kernel"].tolist() == [r["key"] for r in rows]
    assert ev["start_ns"].tolist() == [r["start_host_time_ns"] for r in rows]
    assert ev["duration_ns"].tolist() == [r["duration_ns"] for r in rows]  # IREE's own duration field
    assert ev["grid_x"].tolist() == [r["workgroup_count"][0] for r in rows]
    assert ev["correlation_id"].tolist() == [r["event_id"] for r in rows]
    split = split_calls(ev)
    assert split["call"].tolist() == [i // 4 for i in range(24)]  # 6 benchmark iterations x 4 dispatches


def test_iree_profile_streams_agree():
    a = load(IREE / "two_matmuls.dispatch.jsonl")
    b = load(IREE / "two_matmuls.ireeperf.jsonl")
    assert a.equals(b)


def _iree_profile_tool():
    import iree._runtime_libs as libs
    tool = Path(libs.__file__).parent / "iree-profile"
    return tool if tool.is_file() else None


@pytest.mark.skipif(_iree_profile_tool() is None, reason="iree-base-runtime's iree-profile not installed")
def test_iree_fixture_is_the_tool_output(tmp_path):
    """The committed JSONL is what iree-profile 3.13 prints for the committed .ireeprof."""
    out = subprocess.run([str(_iree_profile_tool()), "dispatch", "--dispatch_events", "--format=jsonl",
                          str(IREE / "two_matmuls.ireeprof")], capture_output=True, text=True, check=True).stdout
    path = tmp_path / "d.jsonl"
    path.write_text(out)
    assert load(path).equals(load(IREE / "two_matmuls.dispatch.jsonl"))


def test_iree_profile_bad_inputs():
    lines = (IREE / "two_matmuls.dispatch.jsonl").read_text().splitlines()
    with pytest.raises(ParseError, match=r"^i\.jsonl: line 3: bad JSON Lines record"):
        iree_profile.events(("\n".join(lines[:2]) + "\n" + lines[2][:100]).encode(), "i.jsonl")
    row = json.loads(lines[1])
    row["start_host_time_ns"] = "early"
    bad = "\n".join([lines[0], json.dumps(row)] + lines[2:])
    with pytest.raises(ParseError, match=r"^i\.jsonl: line 2: column 'start_host_time_ns': expected an integer"):
        iree_profile.events(bad.encode(), "i.jsonl")


# ---- nsys: no real export exists here; a database laid out as NVIDIA documents the schema,
# filled with the real CUPTI records of the H200 capture (same fields, renamed): mutation.nsys_db.

def test_nsys_schema_reader(tmp_path):
    records = json.loads(CUPTI.read_text())
    db = nsys_db(tmp_path / "r.sqlite", records)
    ev = load(db)
    assert (ev["source"] == "nsys").all()
    cupti = load(CUPTI)
    cols = [c for c in KERNEL_EVENT_COLUMNS if c != "source"]
    assert ev[cols].equals(cupti[cols])
    assert nsys_sqlite.events(db.read_bytes(), "r.sqlite")[cols].equals(ev[cols])


def test_nsys_bad_inputs(tmp_path):
    with pytest.raises(ParseError, match="not an SQLite database"):
        nsys_sqlite.events(b"hello", "x.sqlite")
    empty = tmp_path / "e.sqlite"
    sqlite3.connect(empty).execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT)").connection.commit()
    with pytest.raises(ParseError, match="no CUPTI_ACTIVITY_KIND_KERNEL table"):
        load(empty)
    db = nsys_db(tmp_path / "r.sqlite", json.loads(CUPTI.read_text())[:5])
    con = sqlite3.connect(db)
    con.execute("DELETE FROM StringIds WHERE id = 1")
    con.commit()
    con.close()
    with pytest.raises(ParseError, match=r"rowid \d+: column 'demangledName': id not in StringIds"):
        load(db)
    with pytest.raises(ParseError, match="unreadable database"):
        nsys_sqlite.events(db.read_bytes()[:600], "r.sqlite")
