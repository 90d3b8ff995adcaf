"""Kineto (torch.profiler) traces as published: compressed, with long headers, several GPUs,
copies and fills, ROCm kernels without a grid, launch linkage and ProfilerStep spans.

The base is the real HTA excerpt (fixtures/captures/chrome/, PROVENANCE.md there). The
variants no capture here has are built by hand from it, with the field names torch.profiler
writes (deviceProperties, distributedInfo, gpu_memcpy / gpu_memset with args.bytes, a ROCm
kernel's args without grid/block); expected values are read back from the JSON itself.
"""
from __future__ import annotations

import bz2
import gzip
import json
import lzma
from pathlib import Path

import lz4.frame
import pandas as pd
import pytest
import zstandard

from mutation import kineto_doc
from parsers import ParseError, chrome_trace
from rootcause.profilers import load, load_capture, sniff

T0 = 1666149715428509  # the sample's kernel start, us


@pytest.fixture(scope="module")
def doc():
    return kineto_doc()


@pytest.fixture()
def trace_file(tmp_path, doc):
    path = tmp_path / "rank3.pt.trace.json"
    path.write_text(json.dumps(doc))
    assert path.read_bytes().index(b'"traceEvents"') > 65536  # past the sniffer's head
    return path


def _gpu_events(doc):
    return [e for e in doc["traceEvents"] if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]


def test_long_header_is_detected_and_read(trace_file, doc):
    assert sniff(trace_file.read_bytes()[:65536]) == "chrome"
    ev = load(trace_file, kinds=None)
    gpu = sorted(_gpu_events(doc), key=lambda e: e["ts"])
    assert ev["kernel"].tolist() == [e["name"] for e in gpu]
    assert ev["kind"].tolist() == [{"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}[e["cat"]]
                                   for e in gpu]
    assert ev["device"].tolist() == [e["args"]["device"] for e in gpu]
    assert [None if pd.isna(v) else v for v in ev["bytes"]] == [e["args"].get("bytes") for e in gpu]
    assert ev["correlation_id"].tolist() == [e["args"]["correlation"] for e in gpu]
    assert [None if pd.isna(v) else v for v in ev["external_id"]] == [e["args"].get("External id") for e in gpu]


def test_first_key_unknown_is_searched(tmp_path, doc):
    """A header key no list names, and "traceEvents" only after 64 KiB: found by searching on."""
    path = tmp_path / "odd.json"
    path.write_text(json.dumps({"producer_notes": "x" * 70000, "traceEvents": doc["traceEvents"]}))
    assert sniff(path.read_bytes()[:65536]) is None
    assert len(load(path)) == len([e for e in _gpu_events(doc) if e["cat"] == "kernel"])


def test_kernels_only_by_default(trace_file, doc):
    ev = load(trace_file)
    assert (ev["kind"] == "kernel").all() and len(ev) == sum(e["cat"] == "kernel" for e in doc["traceEvents"])


def test_memcpy_times_are_exact_ns(trace_file, doc):
    ev = load(trace_file, kinds=["memcpy"])
    e = next(e for e in doc["traceEvents"] if e.get("cat") == "gpu_memcpy")
    assert ev["start_ns"].tolist() == [T0 * 1000 + 110250]  # 0.25 us kept exactly
    assert ev["duration_ns"].tolist() == [round(e["dur"] * 1000)]


def test_rocm_kernel_without_grid(trace_file):
    ev = load(trace_file)
    row = ev[ev["kernel"] == "Cijk_Ailk_Bljk_SB_MT64x64x8"].iloc[0]
    assert all(row[c] is pd.NA for c in ("grid_x", "grid_y", "grid_z", "block_x"))


def test_launching_cpu_op(trace_file):
    """By External id (the copy: aten::copy_), else the innermost cpu_op around the runtime call
    with the kernel's correlation (the CUTLASS kernel: cudaLaunchKernel at ...364374 lies in
    evaluate_function > AddmmBackward0 > aten::mm on thread 24922)."""
    ev = load(trace_file, kinds=None).set_index("kernel")
    assert ev.loc["Memcpy DtoD (Device -> Device)", "cpu_op"] == "aten::copy_"
    assert ev.loc["void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4>", "cpu_op"] == "aten::mm"
    assert pd.isna(ev.loc["Memset (Device)", "cpu_op"])  # no runtime call with correlation 9002


def test_steps_devices_rank(trace_file, doc):
    cap = load_capture(trace_file)
    want = [e for e in doc["traceEvents"] if e["name"].startswith("ProfilerStep#")]
    assert cap.steps["step"].tolist() == [int(e["name"].split("#")[1]) for e in want]
    assert cap.steps["duration_ns"].tolist() == [e["dur"] * 1000 for e in want]
    assert cap.devices == {p["id"]: p["name"] for p in doc["deviceProperties"]}
    assert cap.rank == doc["distributedInfo"]["rank"] and cap.format == "chrome"


COMPRESSORS = {"gzip": gzip.compress, "zstd": lambda b: zstandard.ZstdCompressor().compress(b),
               "bz2": bz2.compress, "xz": lzma.compress, "lz4": lz4.frame.compress}


@pytest.mark.parametrize("codec", list(COMPRESSORS))
def test_compressed_by_magic(tmp_path, trace_file, codec):
    packed = tmp_path / "trace.bin"  # no telling suffix: the magic decides
    packed.write_bytes(COMPRESSORS[codec](trace_file.read_bytes()))
    cap = load_capture(packed)
    assert cap.codec == codec
    assert cap.events.equals(load_capture(trace_file).events)
    cut = tmp_path / "cut.bin"
    cut.write_bytes(packed.read_bytes()[: len(packed.read_bytes()) // 2])
    with pytest.raises(ParseError, match=rf"^{cut}: {codec} stream, decompressed byte \d+: corrupt or truncated {codec} data"):
        load(cut)


@pytest.mark.parametrize("name", ["cupti", "rocprof"])
def test_other_text_formats_compressed(tmp_path, name):
    from mutation import CUPTI_SAMPLE, ROCPROF_SAMPLES

    src = {"cupti": CUPTI_SAMPLE, "rocprof": ROCPROF_SAMPLES[0]}[name]
    packed = tmp_path / (src.name + ".gz")
    packed.write_bytes(gzip.compress(src.read_bytes()))
    assert load(packed).drop(columns="source").equals(load(src).drop(columns="source"))


def test_two_devices_are_kept_apart(trace_file):
    ev = load(trace_file, kinds=None)
    assert sorted(set(ev["device"].tolist())) == [0, 1]


def test_bad_documents(tmp_path):
    with pytest.raises(ParseError, match=r"^t\.json: traceEvents: no \"traceEvents\" list"):
        chrome_trace.events(b'{"schemaVersion": 1}', "t.json")
    with pytest.raises(ParseError, match=r"^t\.json: traceEvents record 0: expected an object|^t\.json: traceEvents"):
        chrome_trace.events(b'{"traceEvents": [1]}', "t.json")
    with pytest.raises(ParseError, match=r"^t\.json: line 2, column 13: bad JSON"):
        chrome_trace.events(b'{"traceEvents":\n [{"ts": 1, x}]}', "t.json")


def test_compare_rocm_kernels_without_grid(tmp_path, doc):
    """Issue 12: a ROCm kernel without 'grid' crashed `compare` (TypeError, exit 1)."""
    import subprocess
    import sys

    rocm = dict(doc, traceEvents=[e for e in doc["traceEvents"] if e.get("cat") != "kernel" or "grid" not in e["args"]])
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(rocm))
    b.write_text(json.dumps(doc))
    root = Path(__file__).resolve().parent.parent
    argv = [sys.executable, "-m", "rootcause", "compare", str(a), str(b), "--gpu", "H200",
            "--out", str(tmp_path / "out")]
    env = {**__import__("os").environ, "PYTHONPATH": str(root)}
    # the trace holds a kernel on GPU 1 too: never merged silently, one line naming the way out
    res = subprocess.run(argv, capture_output=True, text=True, cwd=root, env=env)
    assert res.returncode == 2 and "--device-id" in res.stderr and len(res.stderr.strip().splitlines()) == 1
    res = subprocess.run(argv + ["--device-id", "0"], capture_output=True, text=True, cwd=root, env=env)
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "out" / "attribution.json").is_file()


def test_metadata_and_flow_events_are_not_rows(tmp_path, doc):
    """Kineto also writes 'M' (process/thread names) and 's'/'f' flow events (ac2g links);
    they are neither rows nor a reason to leave the fast path."""
    extra = [{"name": "process_name", "ph": "M", "ts": T0, "pid": 0, "tid": 0, "args": {"name": "python"}},
             {"ph": "s", "id": 2131433, "pid": 3914, "tid": 24922, "ts": 1666149715364374, "cat": "ac2g", "name": "ac2g"},
             {"ph": "f", "id": 2131433, "pid": 0, "tid": 7, "ts": T0, "cat": "ac2g", "name": "ac2g", "bp": "e"}]
    path = tmp_path / "flows.json"
    path.write_text(json.dumps(dict(doc, traceEvents=extra + doc["traceEvents"])))
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps(doc))
    assert load(path, kinds=None).drop(columns="cpu_op").equals(load(plain, kinds=None).drop(columns="cpu_op"))
    assert load(path, kinds=None)["cpu_op"].tolist() == load(plain, kinds=None)["cpu_op"].tolist()
