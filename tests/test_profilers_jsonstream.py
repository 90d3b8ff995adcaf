"""The chunked JSON decoding of CUPTI dumps (parsers.jsonstream.iter_batches, and view_batches for
an array in memory), checked against the standard library's json on the real H200 capture, with
chunks small enough that every cut, resume and fallback path runs: values against json.loads,
error messages against the record-by-record stdlib decoder (iter_records) reading the same bytes
from the start."""
from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from parsers import ParseError, cupti_json, jsonstream

CUPTI = Path(__file__).resolve().parent.parent / "fixtures" / "captures" / "h200-2026-12-02" / "tvm_pool_fusion.cupti.json"


@pytest.fixture(scope="module")
def records():
    return json.loads(CUPTI.read_text())


@pytest.fixture(params=[500, 3000], ids=["chunk<record", "chunk~2records"])
def small_chunks(monkeypatch, request):
    monkeypatch.setattr(jsonstream, "_CHUNK", request.param)  # hundreds of batches, buffer growth


def expected(recs):
    """The KernelEvents columns computed from json.loads records, in file order."""
    ks = [r for r in recs if r.get("kind", 10) in (3, 10)]
    return {"kernel": [r["name"] for r in ks], "start_ns": [r["start"] for r in ks],
            "end_ns": [r["end"] for r in ks], "grid_x": [r["grid_x"] for r in ks],
            "registers": [r["registers_per_thread"] for r in ks],
            "shared_bytes": [r["static_shared_memory"] + r["dynamic_shared_memory"] for r in ks],
            "correlation_id": [r["correlation_id"] for r in ks]}


def columns(data: bytes):
    ev = cupti_json.events(data, "t.json")
    return {c: ev[c].tolist() for c in ("kernel", "start_ns", "end_ns", "grid_x", "registers",
                                        "shared_bytes", "correlation_id")}


def exact_error(data: bytes) -> str:
    """What the stdlib record-by-record decoder says about these bytes."""
    unit, recs = jsonstream.iter_records(io.BytesIO(data), "t.json")
    with pytest.raises(ParseError) as err:
        for _ in recs:
            pass
    return str(err.value)


def variants(recs):
    """The capture as the dialects a dump may take; names with non-ASCII characters and
    braces in strings, and memcpy records between kernels, so cuts land everywhere."""
    mixed = []
    for i, r in enumerate(recs):
        r = dict(r)
        if i % 7 == 3:
            r["name"] = f"void k<{{lambda()#1}}, {{lambda()#2}}>(é{i})"  # '}, {' inside a string
        if i % 11 == 5:
            r["nested"] = {"a": [1, {"b": "}, {"}], "c": None}
        mixed.append(r)
        if i % 13 == 0:
            mixed.append({"kind": 1, "start": 5, "end": 9, "bytes": 4096})  # a memcpy record
    return {
        "array": json.dumps(recs).encode(),
        "mixed-compact": json.dumps(mixed, separators=(",", ":"), ensure_ascii=False).encode(),
        "pretty": json.dumps(mixed, indent=2).encode(),
        "jsonl": "\n".join(json.dumps(r, ensure_ascii=False) for r in mixed).encode() + b"\n",
        "jsonl-blank-lines": ("\n\n".join(json.dumps(r) for r in mixed) + "\r\n").encode(),
    }


@pytest.mark.parametrize("name", ["array", "mixed-compact", "pretty", "jsonl", "jsonl-blank-lines"])
def test_small_chunks_equal_json_loads(records, small_chunks, monkeypatch, name):
    data = variants(records)[name]
    exact = []  # batches the exact decoder had to read
    batched = jsonstream._batched
    monkeypatch.setattr(jsonstream, "_batched", lambda *a, **k: exact.append(1) or batched(*a, **k))
    want = [json.loads(line) for line in data.splitlines() if line.strip()] if name.startswith("jsonl") else json.loads(data)
    assert columns(data) == expected(want)
    # only blank lines (numbered around) need the exact decoder; '}, {' in names does not
    assert len(exact) == (name == "jsonl-blank-lines")


def test_batches_skip_unnamed_keys_and_number_records(records, small_chunks):
    data = variants(records)["mixed-compact"]
    unit, batches = jsonstream.iter_batches(io.BytesIO(data), "t.json", cupti_json._Record)
    numbers, kinds = [], []
    for nums, recs in batches:
        numbers += list(nums)
        kinds += [r.kind for r in recs]
    want = json.loads(data)
    assert unit == "record" and numbers == list(range(len(want)))
    assert kinds == [r.get("kind", 10) for r in want]
    assert not hasattr(cupti_json._Record, "cache_config")  # ~40 keys are never built


def test_camel_case_spelling(records, small_chunks):
    camel = {"grid_x": "gridX", "registers_per_thread": "registersPerThread", "correlation_id": "correlationId",
             "static_shared_memory": "staticSharedMemory", "dynamic_shared_memory": "dynamicSharedMemory"}
    recs = [{camel.get(k, k): v for k, v in r.items()} for r in records[:50]]
    assert columns(json.dumps(recs).encode()) == expected(records[:50])


@pytest.mark.parametrize("name", ["mixed-compact", "pretty", "jsonl"])
def test_errors_name_the_same_place_as_the_exact_decoder(records, small_chunks, name):
    """Truncations and corruptions at many offsets: the message is the record-by-record one."""
    data = variants(records[:60])[name]
    checked = 0
    for at in range(7, len(data) - 1, len(data) // 37):
        for bad in (data[:at], data[:at] + b"@" + data[at + 1:]):
            try:
                want = exact_error(bad)
            except pytest.fail.Exception:  # the corruption left valid JSON (inside a string)
                continue
            with pytest.raises(ParseError) as got:
                cupti_json.events(bad, "t.json")
            assert str(got.value) == want
            checked += 1
    assert checked > 40


def test_type_errors_name_record_and_column(records, small_chunks):
    recs = [dict(r) for r in records[:30]]
    recs[23]["registers_per_thread"] = 40.5
    with pytest.raises(ParseError, match=r"^t\.json: record 23: column 'registers_per_thread': expected an integer, got 40\.5$"):
        cupti_json.events(json.dumps(recs).encode(), "t.json")
    recs[23]["registers_per_thread"] = 40.0  # an integral float is an integer
    assert cupti_json.events(json.dumps(recs).encode(), "t.json")["registers"].iat[23] == 40
    recs[17] = [1, 2]
    with pytest.raises(ParseError, match=r"^t\.json: record 17: expected an object, got list$"):
        cupti_json.events(json.dumps(recs).encode(), "t.json")
    lines = [json.dumps(r) for r in records[:30]]
    lines[12] = lines[12].replace('"name": ', '"name": 7, "x": ', 1)
    with pytest.raises(ParseError, match=r"^t\.json: line 13: column 'name': expected a string, got 7$"):
        cupti_json.events("\n".join(lines).encode(), "t.json")


def test_trailing_comma_and_empty(small_chunks):
    assert len(cupti_json.events(b"[]", "t.json")) == 0
    assert len(cupti_json.events(b"  [ \n ]\n", "t.json")) == 0
    rec = json.dumps({"name": "k", "start": 1, "end": 2})
    with pytest.raises(ParseError, match=r"^t\.json: record 1 .*bad JSON"):
        cupti_json.events(f"[{rec},]".encode(), "t.json")
    with pytest.raises(ParseError, match=r"^t\.json: record 1 .*truncated JSON"):
        cupti_json.events(f"[{rec},".encode(), "t.json")


def consumed(batches):
    """(numbers, kinds, names) of every record in the batches, in order."""
    numbers, kinds, names = [], [], []
    for nums, recs in batches:
        numbers += list(nums)
        kinds += [r.kind for r in recs]
        names += [r.name for r in recs]
    return numbers, kinds, names


def streamed_error(data: bytes) -> str:
    with pytest.raises(ParseError) as err:
        consumed(jsonstream.iter_batches(io.BytesIO(data), "t.json", cupti_json._Record)[1])
    return str(err.value)


@pytest.mark.parametrize("copies", [1, 0], ids=["at-once", "over-chunk"])
def test_view_batches_equal_json_loads(records, copies):
    """An array in memory: one batch up to _CHUNK bytes, chunks past it; the records either way
    are json.loads's."""
    data = variants(records)["mixed-compact"]
    if not copies:  # past _CHUNK: the array repeated
        data = b"[" + b",".join([data[1:-1]] * (jsonstream._CHUNK // len(data) + 2)) + b"]"
    want = json.loads(data)
    batches = list(jsonstream.view_batches(memoryview(data), "t.json", cupti_json._Record)[1])
    assert (len(batches) == 1) == (len(data) <= jsonstream._CHUNK)
    numbers, kinds, names = consumed(batches)
    assert numbers == list(range(len(want)))
    assert kinds == [r.get("kind", 10) for r in want]
    assert names == [r.get("name") for r in want]


def test_view_batches_errors_are_the_streamed_ones(records):
    """An array that does not decode at once is streamed, so its error names the record as
    iter_batches does: truncations, corruptions, a record that is not an object."""
    data = variants(records[:60])["pretty"]
    cases = [data[:at] + b"@" + data[at + 1:] for at in range(7, len(data) - 1, len(data) // 23)]
    cases += [data[:len(data) // 2], data[:-1] + b",]", data.replace(b"{", b"[1, 2], {", 1)]
    checked = 0
    for bad in cases:
        try:
            want = streamed_error(bad)
        except pytest.fail.Exception:  # the corruption left valid JSON (inside a string)
            continue
        with pytest.raises(ParseError) as got:
            consumed(jsonstream.view_batches(memoryview(bad), "t.json", cupti_json._Record)[1])
        assert str(got.value) == want
        checked += 1
    assert checked > 15
