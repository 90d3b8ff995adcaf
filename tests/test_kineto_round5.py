"""Round 5 of the Kineto captures (fixtures/captures/h100-2026-12-06-kineto5/): traces without
ProfilerStep whose iterations the trace marks with repeated annotations, graph launches or the
optimizer's steps. Truth is the capture script's own timing of every iteration (truth.json); the
marks are counted here in the traces with gzip and json alone."""
from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest

from rootcause import cli

ROOT = Path(__file__).resolve().parents[1]
K5 = ROOT / "fixtures/captures/h100-2026-12-06-kineto5"
TRUTH = json.loads((K5 / "truth.json").read_text())
# pair -> (the whole-graph source rootcause must name, a pattern of the marks in the trace)
BASIS = {"annotated": ("annotation-iterations", r"^iteration_\d+$"),
         "annotnull": ("annotation-iterations", r"^iteration_\d+$"),
         "forward": ("annotation-iterations", r"^forward$"),
         "execute": ("annotation-iterations", r"^execute_\d+$"),
         "moe": ("annotation-iterations", r"^MoE\[layer\]$"),
         "graph": ("graph-launches", r"^cudaGraphLaunch"),
         "graphnull": ("graph-launches", r"^cudaGraphLaunch"),
         "optim": ("optimizer-steps", r"^Optimizer\.step#"),
         "optimnull": ("optimizer-steps", r"^Optimizer\.step#")}


def _marks(name: str, pattern: str) -> list[dict]:
    with gzip.open(K5 / f"{name}.json.gz", "rt") as f:
        events = json.load(f)["traceEvents"]
    return sorted((e for e in events if e.get("ph") == "X" and re.search(pattern, str(e.get("name", "")))
                   and e.get("cat") in ("user_annotation", "cuda_runtime")), key=lambda e: e["ts"])


def _compare(tmp_path: Path, a: str, b: str, *extra: str) -> tuple[int, dict | None]:
    out = tmp_path / "out"
    code = cli.main(["compare", str(K5 / f"{a}.json.gz"), str(K5 / f"{b}.json.gz"), "--out", str(out), *extra])
    return code, (json.loads((out / "attribution.json").read_text()) if code == 0 else None)


@pytest.mark.parametrize("pair", sorted(BASIS))
def test_iterations_come_from_the_marks_and_the_headline_follows_the_truth(tmp_path, pair):
    truth = TRUTH["pairs"][pair]
    source, pattern = BASIS[pair]
    marks = {s: _marks(truth[s], pattern) for s in "ab"}
    assert all(len(m) >= 10 for m in marks.values())  # the premise: the script marked every iteration
    code, doc = _compare(tmp_path, truth["a"], truth["b"])
    assert code == 0
    w = doc["whole_graph"]
    assert w["basis"] == {"a": source, "b": source}
    # a span that holds its GPU work is one iteration each; a mark opens one and the next ends it
    spans = source == "annotation-iterations" and pair != "forward"
    assert doc["variants"]["a"]["calls"] == (len(marks["a"]) if spans else len(marks["a"]) - 1)
    ratio = w["b"]["median"] / w["a"]["median"]
    assert ratio == pytest.approx(truth["ratio_b_over_a"], rel=0.05)
    if w["significant"]:
        assert (w["delta_ns"]["median"] > 0) == (truth["ratio_b_over_a"] > 1)
    if truth["designed_direction"] == "same":
        assert not w["significant"]


def test_a_span_that_holds_its_gpu_work_is_timed_by_itself_not_the_idle_after_it(tmp_path):
    """execute: 2 ms of host idle between requests. Each request is its own `execute_N` span;
    the spans' median (json, here) is the whole-graph time, not the request-to-request period."""
    truth = TRUTH["pairs"]["execute"]
    _, doc = _compare(tmp_path, truth["a"], truth["b"])
    for s in "ab":
        spans = sorted(e["dur"] for e in _marks(truth[s], r"^execute_\d+$"))
        assert doc["whole_graph"][s]["median"] / 1e3 == pytest.approx((spans[4] + spans[5]) / 2, rel=0.01)


def test_iterations_by_name_over_what_was_found(tmp_path):
    """--iterations names the annotation; one the trace does not repeat is one line, exit 2."""
    truth = TRUTH["pairs"]["forward"]
    code, doc = _compare(tmp_path, truth["a"], truth["b"], "--iterations", "forward")
    assert code == 0 and doc["whole_graph"]["basis"] == {"a": "annotation-iterations", "b": "annotation-iterations"}
    assert any("--iterations forward" in n for n in doc["notes"])
    code, _ = _compare(tmp_path, truth["a"], truth["b"], "--iterations", "backward_pass")
    assert code == 2


def test_two_kinds_of_iteration_are_no_verdict(tmp_path):
    """An annotated trace against one marked only by graph launches: the two times are not of
    one kind, so no ratio leads the headline."""
    code, doc = _compare(tmp_path, "annotated-w2048", "graph-g2048")
    assert code == 0 and doc["whole_graph"]["significant"] is False
    assert "not of one kind" in doc["whole_graph"]["undetermined"]


def test_sides_are_named_by_their_files(tmp_path):
    """No catalog and no --label: each side is its trace's file name without the extensions."""
    code, doc = _compare(tmp_path, "graph-g1024", "graph-g2048")
    assert code == 0 and (doc["variants"]["a"]["label"], doc["variants"]["b"]["label"]) == ("graph-g1024", "graph-g2048")
