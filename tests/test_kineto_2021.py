"""Traces in the Kineto format of 2021 (fixtures/captures/kineto-2021-tb-plugin/: the PyTorch
profiler TensorBoard plugin's published samples, a V100): 'Operator', 'Kernel', 'Memcpy', 'Memset'
categories, steps from ProfilerStep#N, and, in the torch.autograd.profiler traces, no ProfilerStep
at all. Truth is read here from the traces' own host spans with gzip and json alone."""
from __future__ import annotations

import gzip
import json
import statistics
from pathlib import Path

import pytest

from rootcause import cli
from rootcause.profilers import load_capture

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT / "fixtures/captures/kineto-2021-tb-plugin"
W0 = TRACES / "resnet50_num_workers_0.worker0.1623143089861.pt.trace.json.gz"
W0_AGAIN = TRACES / "resnet50_num_workers_0.worker0.1623143566756.pt.trace.json.gz"
W4 = TRACES / "resnet50_num_workers_4.worker0.1623212756351.pt.trace.json.gz"
AUTOGRAD_W0 = TRACES / "resnet50_autograd_api_num_workers_0.worker0.pt.trace.json.gz"
AUTOGRAD_W4 = TRACES / "resnet50_autograd_api_num_workers_4.worker0.pt.trace.json.gz"
H200_TRACE = ROOT / "fixtures/captures/h200-2026-12-04-kineto3/null3-a.json.gz"


def _events(path: Path) -> list[dict]:
    with gzip.open(path, "rt") as f:
        return [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]


def _step_ms(path: Path) -> list[float]:
    return [e["dur"] / 1e3 for e in _events(path) if str(e.get("name", "")).startswith("ProfilerStep#")]


def _fetch_intervals_ms(path: Path) -> list[float]:
    starts = sorted(e["ts"] for e in _events(path) if str(e.get("name", "")).startswith("enumerate(DataLoader)#"))
    return [(b - a) / 1e3 for a, b in zip(starts, starts[1:])]


def _compare(a: Path, b: Path, out: Path, *extra: str) -> dict:
    assert cli.main(["compare", str(a), str(b), "--out", str(out), *extra]) == 0
    return json.loads((out / "attribution.json").read_text())


@pytest.mark.parametrize("path", [W0, W4, AUTOGRAD_W0], ids=["w0", "w4", "autograd-w0"])
def test_2021_categories_are_read(path):
    events = _events(path)
    capture = load_capture(path)
    kinds = capture.events["kind"].value_counts().to_dict()
    for cat, kind in (("Kernel", "kernel"), ("Memcpy", "memcpy"), ("Memset", "memset")):
        assert kinds.get(kind, 0) == sum(e.get("cat") == cat for e in events), kind
    assert len(capture.steps) == (len(_step_ms(path)) or len(_fetch_intervals_ms(path)))
    # the GPU rows' 'external id' (2021's spelling) links them to the op that launched them
    assert capture.events["cpu_op"].notna().mean() > 0.9


def _ratio(doc: dict) -> float:
    wg = doc["whole_graph"]
    return wg["b"]["median"] / wg["a"]["median"]


def test_dataloader_workers_pair_is_read_from_its_steps(tmp_path):
    """0 -> 4 workers: the steps' own medians (176 -> 127 ms); before the 2021 categories were read
    this was the GPU span and came out '1.05x slower'."""
    doc = _compare(W0, W4, tmp_path / "o")
    truth = statistics.median(_step_ms(W4)) / statistics.median(_step_ms(W0))
    assert doc["whole_graph"]["source"] == "profiler-steps"
    assert abs(_ratio(doc) / truth - 1) < 0.05
    assert not (doc["whole_graph"].get("significant") and doc["whole_graph"]["delta_ns"]["median"] > 0)


def test_two_windows_of_one_run_keep_their_own_ratio(tmp_path):
    doc = _compare(W0, W0_AGAIN, tmp_path / "o")
    truth = statistics.median(_step_ms(W0_AGAIN)) / statistics.median(_step_ms(W0))
    assert abs(_ratio(doc) / truth - 1) < 0.05


def test_autograd_api_trace_takes_its_steps_from_the_data_loader(tmp_path):
    """No ProfilerStep: each iteration runs from one DataLoader fetch to the next (5 a trace),
    not 'calls' of two launches made from repeating sequences."""
    doc = _compare(AUTOGRAD_W0, AUTOGRAD_W4, tmp_path / "o")
    truth = statistics.median(_fetch_intervals_ms(AUTOGRAD_W4)) / statistics.median(_fetch_intervals_ms(AUTOGRAD_W0))
    assert doc["whole_graph"]["source"] == "loader-iterations"
    assert doc["variants"]["a"]["calls"] == len(_fetch_intervals_ms(AUTOGRAD_W0))
    assert abs(_ratio(doc) / truth - 1) < 0.05
    assert not (doc["whole_graph"].get("significant") and doc["whole_graph"]["delta_ns"]["median"] > 0)


def test_each_side_is_its_own_gpu(tmp_path):
    """An H200 trace against a V100 trace: each side's GPU from its own deviceProperties, and the
    output says they differ."""
    names = {s: next(iter(load_capture(p).devices.values())) for s, p in (("a", H200_TRACE), ("b", W0))}
    assert "H200" in names["a"] and "V100" in names["b"]
    doc = _compare(H200_TRACE, W0, tmp_path / "o")
    assert doc["device"] == "H200" and doc["device_b"] == "V100"
    assert any("H200" in c and "V100" in c for c in doc["cannot_conclude"])
    md = (tmp_path / "o" / "report.md").read_text()
    assert "H200 (A) and V100 (B)" in md


def _loader_ms_per_step(path: Path) -> list[float]:
    """Per ProfilerStep, the data loader's fetch on the step's thread: json alone."""
    events = _events(path)
    steps = [e for e in events if str(e.get("name", "")).startswith("ProfilerStep#")]
    out = []
    for s in steps:
        inside = [e["dur"] for e in events if str(e.get("name", "")).startswith("enumerate(DataLoader)#")
                  and e.get("tid") == s["tid"] and s["ts"] <= e["ts"] and e["ts"] + e["dur"] <= s["ts"] + s["dur"]]
        out.append(sum(inside) / 1e3)
    return out


def test_the_host_op_that_carries_the_delta_is_named(tmp_path):
    """0 -> 4 workers: the steps' delta is the data loader's fetch on the training thread
    (HTA's TraceDiff lists DataLoader.__next__ about -69 ms a step at the top)."""
    doc = _compare(W0, W4, tmp_path / "o")
    host = doc["host"]
    top = host["units"][0]
    truth = statistics.median(_loader_ms_per_step(W4)) - statistics.median(_loader_ms_per_step(W0))
    assert top["name"].startswith("enumerate(DataLoader)#") and top["significant"]
    assert top["delta_ns"]["median"] / 1e6 == pytest.approx(truth, rel=0.05)
    text = (tmp_path / "o" / "report.md").read_text()
    assert "enumerate(DataLoader)#__next__" in text
