"""Published traces of other kinds (fixtures/captures/published-traces, pairs.json's `round6`,
PROVENANCE.md): inference engines against each other (vLLM and SGLang on an MI300X, piecewise HIP
graphs), PARAM benchmarks without ProfilerStep, V100 DDP jobs, TorchRec with graph launches, and
traces that hold no kernel rows at all (MTIA, a CPU-only rank, CUPTI's range profiler).

What each trace says of itself is read here with gzip and json alone: its kernel rows and its
ProfilerStep spans (tools/trace_corpus.profiler_steps, the corpus's truth). Right means: a trace
without kernel rows is one line and exit 2; a verdict, and a blamed unit, only where both sides
have two or more steps, the ratio within 5% of the steps' own and a significant headline their
way; a trace against itself blames nothing."""
from __future__ import annotations

import gzip
import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import trace_corpus  # noqa: E402  (the corpus's truth: the traces' own steps, read with json)

CAPTURES = ROOT / "fixtures" / "captures"
PAIRS = {name: tuple(CAPTURES / f for f in files) for name, files in
         json.loads((CAPTURES / "published-traces" / "pairs.json").read_text())["round6"].items()}


def facts(path: Path) -> dict:
    """A trace's kernel rows, graph launches and ProfilerStep spans, read with json alone."""
    events = json.loads(gzip.open(path).read())["traceEvents"]
    return {"kernels": sum(1 for e in events if str(e.get("cat", "")).lower() == "kernel"),
            "graph_launches": sum(1 for e in events if e.get("name") in ("cudaGraphLaunch", "hipGraphLaunch")),
            "steps": trace_corpus.profiler_steps(events)}


@pytest.fixture(scope="module")
def compared(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    out = {}
    for name, (a, b) in PAIRS.items():
        folder = tmp_path_factory.mktemp(name)
        proc = subprocess.run([sys.executable, "-m", "rootcause", "compare", str(a), str(b), "--out", str(folder)],
                              capture_output=True, text=True)
        doc = json.loads((folder / "attribution.json").read_text()) if proc.returncode == 0 else None
        out[name] = {"proc": proc, "doc": doc, "a": facts(a), "b": facts(b), "self": a == b}
    return out


def test_the_round_holds_sixteen_pairs_of_which_three_hold_no_kernel_rows(compared: dict) -> None:
    assert len(compared) == 16
    assert sum(1 for c in compared.values() if not (c["a"]["kernels"] and c["b"]["kernels"])) == 3


@pytest.mark.parametrize("name", list(PAIRS))
def test_each_pair_is_answered_only_as_far_as_its_own_iterations_go(compared: dict, name: str) -> None:
    c = compared[name]
    proc = c["proc"]
    assert "Traceback" not in proc.stderr, proc.stderr
    if not (c["a"]["kernels"] and c["b"]["kernels"]):
        empty = PAIRS[name][1] if c["a"]["kernels"] else PAIRS[name][0]
        assert proc.returncode == 2, proc.stdout[-500:]
        assert proc.stderr.strip().splitlines() == [f"rootcause compare: {empty}: the profile holds no kernel launches"]
        return
    assert proc.returncode == 0, proc.stderr
    w = c["doc"]["whole_graph"]
    if len(c["a"]["steps"]) >= 2 and len(c["b"]["steps"]) >= 2:
        truth = (statistics.median(e - s for s, e in c["b"]["steps"])
                 / statistics.median(e - s for s, e in c["a"]["steps"]))
        ratio = w["b"]["median"] / w["a"]["median"]
        assert abs(ratio / truth - 1) <= 0.05, (ratio, truth)
        assert w["basis"] == {"a": "profiler-steps", "b": "profiler-steps"}
        if w["significant"]:
            assert (w["delta_ns"]["median"] > 0) == (truth > 1)
    else:
        # a side with one step or none: no verdict, and no unit blamed on a basis the trace does not give
        assert w["undetermined"] and not w["significant"], w
        assert not [u["unit"] for u in c["doc"]["units"] if u["significant"]]
    if c["self"]:
        assert not w["significant"] and w["delta_ns"]["median"] == 0
        assert all(u["delta_ns"]["median"] == 0 and not u["significant"] for u in c["doc"]["units"])


def test_two_ddp_jobs_on_a_v100_are_told_apart_by_their_steps(compared: dict) -> None:
    c = compared["hta-ddp-v100"]
    assert len(c["a"]["steps"]) == len(c["b"]["steps"]) == 5
    assert c["doc"]["whole_graph"]["significant"] and c["doc"]["whole_graph"]["delta_ns"]["low"] > 0


def test_units_on_two_kinds_of_call_are_no_verdict(compared: dict) -> None:
    """vLLM's piecewise graphs (graph launches) against SGLang's eager prefill (calls found in its
    kernel sequence): a unit's time per call compares pieces with guesses, so no unit is blamed,
    and the unit whose interval excludes zero says why."""
    c = compared["tracelens-prefill-vllm-sglang"]
    assert c["a"]["graph_launches"] >= 3 and not c["a"]["steps"] and not c["b"]["graph_launches"]
    doc = c["doc"]
    assert doc["whole_graph"]["basis"]["a"] != doc["whole_graph"]["basis"]["b"]
    apart = [u for u in doc["units"] if u["delta_ns"]["low"] > 0 or u["delta_ns"]["high"] < 0]
    assert apart
    lines = [line for line in doc["cannot_conclude"] if "its time is per call" in line]
    assert {f"unit {u['unit']}:" for u in apart if abs(u["delta_ns"]["median"]) >= doc["significance"]["min_effect_ns"]} \
        <= {line.split(" its ")[0] for line in lines}
    assert all("not of one kind" in line and "is no verdict" in line for line in lines)
