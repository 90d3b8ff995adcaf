"""Defects a new user met with `rootcause compare` on real traces, each pinned: launches without a
grid, one call a side, missing shared-memory data, kilobyte kernel names, `| head`."""
from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd

from rootcause import pipeline
from rootcause.model import CatalogKernel

ROOT = Path(__file__).resolve().parents[1]
KINETO = ROOT / "fixtures/captures/h200-2026-12-03-kineto"
ROCPROF = ROOT / "fixtures/captures/rocprofv3/kernel_trace.sdk-029ff02.csv"


def _rootcause(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rootcause", *map(str, args)], capture_output=True, text=True,
                          cwd=ROOT)


def test_kernels_without_a_grid(tmp_path):
    """A ROCm-style trace whose kernel rows carry no grid or block (the real copies trace with
    those args removed, and the real rocprofv3 CSV without its Grid_Size columns) compares."""
    doc = json.loads(gzip.decompress((KINETO / "copies-base.json.gz").read_bytes()))
    for e in doc["traceEvents"]:
        if e.get("cat") == "kernel":
            for key in ("grid", "block"):
                (e.get("args") or {}).pop(key, None)
    bare = tmp_path / "nogrid.json.gz"
    bare.write_bytes(gzip.compress(json.dumps(doc).encode()))
    r = _rootcause("compare", bare, KINETO / "copies-extra.json.gz", "--out", tmp_path / "k")
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    kernels = json.loads((tmp_path / "k" / "attribution.json").read_text())["kernels"]
    assert all(k["grid"] is None for k in kernels if k["variant"] == "a")
    text = ROCPROF.read_text().splitlines()
    cols = text[0].split(",")
    keep = [i for i, c in enumerate(cols) if not c.strip('"').startswith("Grid_Size")]
    nogrid = tmp_path / "nogrid.csv"
    nogrid.write_text("\n".join(",".join(line.split(",")[i] for i in keep) for line in text) + "\n")
    r = _rootcause("compare", nogrid, ROCPROF, "--out", tmp_path / "r")
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr


def _events(name: str, dur: int, calls: int, shared, grid: int = 64) -> pd.DataFrame:
    return pd.DataFrame([{"kernel": name, "start_ns": 10000 * c, "end_ns": 10000 * c + dur + 5 * c,
                          "duration_ns": dur + 5 * c, "grid_x": grid, "grid_y": 1, "grid_z": 1, "block_x": 128,
                          "block_y": 1, "block_z": 1, "registers": 32, "shared_bytes": shared, "local_bytes": 0,
                          "stream": 7, "device": 0, "source": "test", "call": c} for c in range(calls)])


def _cat(name):
    return [CatalogKernel(name, name, ["main/op"], ["main"])]


def test_one_call_a_side_is_not_significant():
    a = pipeline.Side("A", "a", _events("k", 1000, 1, 0), _cat("k"), None, "main")
    b = pipeline.Side("B", "b", _events("k2", 3000, 1, 0), _cat("k2"), None, "main")
    doc = pipeline.attribute_pair(a, b, pipeline.Context())
    assert doc["whole_graph"]["significant"] is False
    assert not any(u["significant"] for u in doc["units"])


def test_missing_shared_memory_is_not_reported_as_none():
    a = pipeline.Side("A", "a", _events("k", 1000, 9, pd.NA), _cat("k"), None, "main")
    b = pipeline.Side("B", "b", _events("k2", 3000, 9, 4096), _cat("k2"), None, "main")
    doc = pipeline.attribute_pair(a, b, pipeline.Context(device="H200"))
    assert doc["units"][0]["significant"]
    assert not [f for f in doc["findings"] if f["rule"] == "shared-memory"]


def test_sentences_shorten_kilobyte_names():
    long = "void at::native::kernel<" + "Functor<float, " * 80 + ">"
    a = pipeline.Side("A", "a", _events("k", 1000, 9, 0), _cat("k"), None, "main")
    b = pipeline.Side("B", "b", _events(long, 3000, 9, 0, grid=4096), _cat(long), None, "main")
    doc = pipeline.attribute_pair(a, b, pipeline.Context(device="H200"))
    assert doc["findings"] and all(len(f["sentence"]) < 600 for f in doc["findings"])
    assert any(long in json.dumps(f["evidence"]) for f in doc["findings"])


def test_output_into_a_closed_pipe_is_quiet(tmp_path):
    cmd = (f"{sys.executable} -m rootcause compare {KINETO / 'copies-base.json.gz'} "
           f"{KINETO / 'copies-extra.json.gz'} --out {tmp_path / 'o'} | head -c 20")
    r = subprocess.run(["bash", "-c", f"set -o pipefail; {cmd}"], capture_output=True, text=True, cwd=ROOT)
    assert "Traceback" not in r.stderr and "BrokenPipe" not in r.stderr, r.stderr
