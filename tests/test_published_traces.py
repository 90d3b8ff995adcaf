"""Published traces of 2021-2025 (fixtures/captures/published-traces and kineto-2021-tb-plugin,
PROVENANCE.md in each) through `rootcause compare`, against what the traces themselves say, read
here with gzip and json alone: their ProfilerStep spans (the whole-graph truth), their kernel
rows (the largest change by kernel name), their devices and their host spans.

Right means: every step read as a call; the per-step medians' ratio within 5% of the steps' own
median ratio; a significant headline only in the direction the steps go; the device of each
side its own; where a side's kernels or host moved by more than the noise, the unit or host row
that says so."""
from __future__ import annotations

import gzip
import json
import statistics
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import trace_corpus  # noqa: E402  (the corpus's truth: the traces' own steps, read with json)

CAPTURES = ROOT / "fixtures" / "captures"


def published_pairs(key: str) -> dict[str, tuple[Path, Path]]:
    """pairs.json's `key` section (each round its own): name -> (A, B)."""
    listed = json.loads((CAPTURES / "published-traces" / "pairs.json").read_text())[key]
    return {name: tuple(CAPTURES / f for f in files) for name, files in listed.items()}


PAIRS = published_pairs("pairs")


def truth(path: Path) -> dict:
    """What a trace says of itself, kept small (a parsed trace of 30 MB of JSON holds about a GB of
    Python objects, and the whole run's later subprocesses inherit the peak): its steps, its kernel
    and copy time per step by name, its data loader's fetch time per step, its kernel rows."""
    events = json.loads(gzip.open(path).read())["traceEvents"]
    steps = trace_corpus.profiler_steps(events)
    first, last = steps[0][0], steps[-1][1]
    per_step: dict[str, float] = defaultdict(float)
    fetch = 0.0
    for e in events:
        if e.get("ph") != "X" or not first <= e["ts"] < last:
            continue
        if str(e.get("cat", "")).lower() in trace_corpus.GPU_CATS:
            per_step[e["name"]] += e["dur"] / len(steps)
        elif str(e.get("name", "")).startswith("enumerate(DataLoader)#"):
            fetch += e["dur"] / len(steps)
    kernels = sum(1 for e in events if str(e.get("cat", "")).lower() == "kernel")
    return {"steps": steps, "gpu_per_step": dict(per_step), "fetch_per_step": fetch, "kernels": kernels}


def compare(a: Path, b: Path, folder: Path) -> tuple[subprocess.CompletedProcess, dict | None]:
    """`rootcause compare A B --out folder` in its own process, as a user runs it; the process and,
    where it succeeded, the attribution.json it wrote."""
    proc = subprocess.run([sys.executable, "-m", "rootcause", "compare", str(a), str(b), "--out", str(folder)],
                          capture_output=True, text=True)
    return proc, json.loads((folder / "attribution.json").read_text()) if proc.returncode == 0 else None


@pytest.fixture(scope="module")
def compared(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    out = {}
    for name, (a, b) in PAIRS.items():
        proc, doc = compare(a, b, tmp_path_factory.mktemp(name))
        assert proc.returncode == 0, (name, proc.stderr)
        out[name] = {"doc": doc, "text": proc.stdout, "a": truth(a), "b": truth(b)}
    return out


@pytest.mark.parametrize("name", list(PAIRS))
@pytest.mark.slow
def test_each_step_is_a_call_and_the_ratio_is_the_steps_own(compared: dict, name: str) -> None:
    pair = compared[name]
    doc, w = pair["doc"], pair["doc"]["whole_graph"]
    durations = {v: [end - start for start, end in pair[v]["steps"]] for v in "ab"}
    assert w["source"] == "profiler-steps"
    assert [doc["variants"][v]["calls"] for v in "ab"] == [len(durations["a"]), len(durations["b"])]
    truth = statistics.median(durations["b"]) / statistics.median(durations["a"])
    assert w["b"]["median"] / w["a"]["median"] == pytest.approx(truth, rel=0.05), (w, truth)
    if w["significant"]:  # a headline only in the steps' direction
        assert (w["delta_ns"]["median"] > 0) == (truth > 1), (w, truth)


def test_the_a100_against_the_v100_pair_names_each_gpu_and_what_moved(compared: dict) -> None:
    """HTA's own TraceDiff pair: an A100 rank against a V100 rank. Each side's device is its own;
    the headline says B is slower (the steps: 1.49x); the kernel name whose time per step grew
    most in the raw rows (device-to-device copies, 3 -> 768 a step) is in the top unit; the host
    row that moved most is the one the steps' host spans say."""
    pair = compared["hta-trace-diff"]
    doc = pair["doc"]
    assert (doc["device"], doc["device_b"]) == ("A100", "V100")
    assert doc["whole_graph"]["significant"] and doc["whole_graph"]["delta_ns"]["median"] > 0
    per = {v: pair[v]["gpu_per_step"] for v in "ab"}
    moved = max(set(per["a"]) | set(per["b"]), key=lambda k: abs(per["b"].get(k, 0) - per["a"].get(k, 0)))
    top = max(doc["units"], key=lambda u: abs(u["delta_ns"]["median"]))
    assert moved in top["kernels_b"], (moved, top["kernels_b"][:5])
    assert "the V100" in pair["text"] and "the A100" in pair["text"]


def test_a_data_loader_change_of_2021_is_named_on_the_host(compared: dict) -> None:
    """workers 0 -> 4 (February 2021 format): the steps go 155 -> 121 ms and the host's data
    loader fetches, read from the raw spans, shrink by the most of any host op; rootcause's host
    row for the fetch has that sign and is significant."""
    pair = compared["kineto-2021-02-workers"]
    fetch = {v: pair[v]["fetch_per_step"] for v in "ab"}
    assert fetch["b"] < fetch["a"] / 4  # the construction of the pair: the fetch left the step
    row = next(r for r in pair["doc"]["host"]["units"] if r["name"].startswith("enumerate(DataLoader)#"))
    assert row["significant"] and row["delta_ns"]["median"] < 0
    assert row["delta_ns"]["median"] / 1e3 == pytest.approx(fetch["b"] - fetch["a"], rel=0.25)


@pytest.mark.parametrize("name", ["hta-nccl-self", "hta-amd-self"])
def test_a_trace_against_itself_blames_nothing(compared: dict, name: str) -> None:
    doc = compared[name]["doc"]
    assert not doc["whole_graph"]["significant"] and not any(u["significant"] for u in doc["units"])
    assert compared[name]["a"]["kernels"] and doc["variants"]["a"]["launches_per_call"] > 0


def _module_spans(path: Path) -> set[str]:
    """The nn.Module instances a trace's python_function spans name, read with json alone."""
    events = json.loads(gzip.open(path).read())["traceEvents"]
    return {e["name"][len("nn.Module: "):] for e in events
            if e.get("cat") == "python_function" and str(e.get("name", "")).startswith("nn.Module: ")}


@pytest.mark.parametrize("name", ["tracelens-bert-h100-mi300", "tracelens-vit-h100-mi300", "tracelens-qwen-h100-mi300"])
def test_one_model_on_two_vendors_aligns_by_the_op_tree(compared: dict, name: str) -> None:
    """One Hugging Face model's step on an H100 and on an MI300X (cuBLAS/cutlass against
    hipBLASLt/Tensile, the kernel names mostly different): most of both sides' kernels are joined
    by the module instance and op that launched them, each such unit names modules both traces'
    own nn.Module spans hold, and nothing joined by launch order or elimination holds half the delta."""
    doc = compared[name]["doc"]
    a, b = PAIRS[name]
    spans = _module_spans(a)
    assert spans == _module_spans(b)  # one model: the same module instances on both vendors
    units = doc["units"]
    tree = [u for u in units if u["method"] == "op-tree"]
    launches = {v: sum(len(u[f"kernels_{v}"]) for u in units) for v in "ab"}
    assert len(tree) >= 0.8 * len([u for u in units if u["kernels_a"] and u["kernels_b"]])
    for u in tree:
        for op in u["source_ops"]:
            chain, _, cpu_op = op.rpartition("/")
            assert set(chain.split(".")) <= spans and cpu_op, op
    weak = sum(abs(u["share"] or 0) for u in units if u["method"] in ("launch-order", "remainder"))
    assert weak < 0.5, weak
    assert launches["a"] and launches["b"]


def test_a_layers_units_are_said_together_when_nothing_is_tested(compared: dict) -> None:
    """BERT's one step on an H100 and an MI300X (no verdict: one sample a side): its 4 layers'
    attention kernels are 4 units of one module. The lines that say where the time went list them
    once, as the tables do, with the sums of the kernels the traces hold (json alone): no two lines
    read alike."""
    a, b = PAIRS["tracelens-bert-h100-mi300"]
    lines = [line for line in compared["tracelens-bert-h100-mi300"]["text"].splitlines()
             if line.startswith("  Largest delta, untested: ")]
    assert len(lines) == 3 and len({line.split(": `")[0] for line in lines}) == 3, lines

    def kernel_us(path: Path, key: str) -> tuple[int, float]:
        events = json.loads(gzip.open(path).read())["traceEvents"]
        durs = [e["dur"] for e in events if e.get("ph") == "X" and e.get("cat") == "kernel" and key in e["name"]]
        return len(durs), sum(durs)

    (n_a, us_a), (n_b, us_b) = kernel_us(a, "flash_fwd_kernel"), kernel_us(b, "attn_fwd")
    attention = next(line for line in lines if "BertSdpaSelfAttention" in line)
    assert n_a == n_b == 4 and f" x{n_a}: " in attention and f"{n_a} units of one module" in attention
    assert f"{us_b:.1f} us vs {us_a:.1f} us, {us_b - us_a:+.1f} us per call" in attention, attention


def test_a_repeated_modules_row_counts_its_instances_not_its_units(compared: dict) -> None:
    """Qwen's step on two vendors: a trace's unit is one op of one module instance, so each
    layer's attention is several units. The row that lists them together counts the attention
    instances the trace's own nn.Module spans name (json alone), not the units."""
    a, _ = PAIRS["tracelens-qwen-h100-mi300"]
    layers = {s for s in _module_spans(a) if s.startswith("Qwen2Attention_")}
    line = next(line for line in compared["tracelens-qwen-h100-mi300"]["text"].splitlines()
                if line.startswith("  Largest delta, untested: ") and ".Qwen2Attention.* x" in line)
    units = int(line.rsplit("(", 1)[1].split()[0])
    assert f".Qwen2Attention.* x{len(layers)}: " in line and units > len(layers), line


def test_a_unit_of_one_instance_is_named_by_that_instance(compared: dict) -> None:
    """A unit that computes in one module instance is named by it, each 'Class.n' of its name a
    'Class_n' span the trace itself holds (json alone), where the module's pattern would name
    every layer alike."""
    from rootcause.report import view

    a, _ = PAIRS["tracelens-qwen-h100-mi300"]
    spans = _module_spans(a)
    single = [u for u in compared["tracelens-qwen-h100-mi300"]["doc"]["units"] if len(u.get("instances") or ()) == 1]
    assert len(single) > 100
    for u in single:
        name = view.unit_module(u).split(" ")[0].rstrip(":")
        parts = name.split(".")
        assert "*" not in name and {f"{c}_{n}" for c, n in zip(parts[::2], parts[1::2])} <= spans, name


def _compare(a: Path, b: Path, tmp_path: Path) -> tuple[dict, str]:
    proc = subprocess.run([sys.executable, "-m", "rootcause", "compare", str(a), str(b), "--out", str(tmp_path)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return json.loads((tmp_path / "attribution.json").read_text()), proc.stdout


def test_no_headline_across_two_kinds_of_iteration(tmp_path: Path) -> None:
    """A trace timed by its ProfilerStep spans against one marked only by its graph launches (one
    CUDA graph replay a call, no ProfilerStep): two kinds of time, so no verdict and no ratio, and
    each side's basis named (the traces' own kinds, read with json: steps on one side, graph
    launches and no steps on the other)."""
    kineto = CAPTURES / "h200-2026-12-03-kineto"
    a, b = kineto / "null-a.json.gz", kineto / "nomarker-slow.json.gz"
    assert trace_corpus.profiler_steps(json.loads(gzip.open(a).read())["traceEvents"])
    events_b = json.loads(gzip.open(b).read())["traceEvents"]
    assert not trace_corpus.profiler_steps(events_b)
    assert sum(e.get("name") == "cudaGraphLaunch" for e in events_b) >= 3
    doc, text = _compare(a, b, tmp_path)
    whole = doc["whole_graph"]
    assert whole["basis"] == {"a": "profiler-steps", "b": "graph-launches"} and not whole["significant"]
    first = text.splitlines()[0]
    assert first.startswith("No whole-graph verdict:") and "ProfilerStep spans" in first and "graph launches" in first
    assert " slower" not in first and " faster" not in first


def test_two_samples_a_side_are_no_verdict_not_no_difference(compared: dict) -> None:
    """HTA's two ranks, 2 ProfilerSteps each (read with json): 2 against 2 can never separate at
    95% (6 orderings), so the words say there is no verdict, never that there is no difference."""
    pair = compared["hta-ranks"]
    assert len(pair["a"]["steps"]) == len(pair["b"]["steps"]) == 2
    assert pair["doc"]["whole_graph"].get("undetermined") and "too few" in pair["doc"]["whole_graph"]["undetermined"]
    assert pair["text"].startswith("No whole-graph verdict:") and "No significant" not in pair["text"]

# ---- round 6 --------------------------------------------------------------------------------
# Published traces of other kinds (fixtures/captures/published-traces, pairs.json's `round6`,
# PROVENANCE.md): inference engines against each other (vLLM and SGLang on an MI300X, piecewise HIP
# graphs), PARAM benchmarks without ProfilerStep, V100 DDP jobs, TorchRec with graph launches, and
# traces that hold no kernel rows at all (MTIA, a CPU-only rank, CUPTI's range profiler).
#
# What each trace says of itself is read here with gzip and json alone: its kernel rows and its
# ProfilerStep spans (tools/trace_corpus.profiler_steps, the corpus's truth). Right means: a trace
# without kernel rows is one line and exit 2; a verdict, and a blamed unit, only where both sides
# have two or more steps, the ratio within 5% of the steps' own and a significant headline their
# way; a trace against itself blames nothing.

ROUND6 = published_pairs("round6")


def facts(path: Path) -> dict:
    """A trace's kernel rows, graph launches, ProfilerStep spans and the marks that repeat in
    sequence (_sequential_marks), read with json alone."""
    events = json.loads(gzip.open(path).read())["traceEvents"]
    return {"kernels": sum(1 for e in events if str(e.get("cat", "")).lower() == "kernel"),
            "graph_launches": sum(1 for e in events if e.get("name") in ("cudaGraphLaunch", "hipGraphLaunch")),
            "steps": trace_corpus.profiler_steps(events), "marks": _sequential_marks(events)}


@pytest.fixture(scope="module")
def compared6(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    out = {}
    for name, (a, b) in ROUND6.items():
        proc, doc = compare(a, b, tmp_path_factory.mktemp(name))
        out[name] = {"proc": proc, "doc": doc, "a": facts(a), "b": facts(b), "self": a == b}
    return out


def test_the_round_holds_sixteen_pairs_of_which_three_hold_no_kernel_rows(compared6: dict) -> None:
    assert len(compared6) == 16
    assert sum(1 for c in compared6.values() if not (c["a"]["kernels"] and c["b"]["kernels"])) == 3


@pytest.mark.parametrize("name", list(ROUND6))
def test_each_pair_is_answered_only_as_far_as_its_own_iterations_go(compared6: dict, name: str) -> None:
    c = compared6[name]
    proc = c["proc"]
    assert "Traceback" not in proc.stderr, proc.stderr
    if not (c["a"]["kernels"] and c["b"]["kernels"]):
        empty = ROUND6[name][1] if c["a"]["kernels"] else ROUND6[name][0]
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


def test_two_ddp_jobs_on_a_v100_are_told_apart_by_their_steps(compared6: dict) -> None:
    c = compared6["hta-ddp-v100"]
    assert len(c["a"]["steps"]) == len(c["b"]["steps"]) == 5
    assert c["doc"]["whole_graph"]["significant"] and c["doc"]["whole_graph"]["delta_ns"]["low"] > 0


def test_units_on_two_kinds_of_call_are_no_verdict(compared6: dict) -> None:
    """vLLM's piecewise graphs (graph launches) against SGLang's eager prefill (calls found in its
    kernel sequence): a unit's time per call compares pieces with guesses, so no unit is blamed,
    and the unit whose interval excludes zero says why."""
    c = compared6["tracelens-prefill-vllm-sglang"]
    assert c["a"]["graph_launches"] >= 3 and not c["a"]["steps"] and not c["b"]["graph_launches"]
    doc = c["doc"]
    assert doc["whole_graph"]["basis"]["a"] != doc["whole_graph"]["basis"]["b"]
    apart = [u for u in doc["units"] if u["delta_ns"]["low"] > 0 or u["delta_ns"]["high"] < 0]
    assert apart
    lines = [line for line in doc["cannot_conclude"] if "its time is per call" in line]
    assert {f"unit {u['unit']}:" for u in apart if abs(u["delta_ns"]["median"]) >= doc["significance"]["min_effect_ns"]} \
        <= {line.split(" its ")[0] for line in lines}
    assert all("not of one kind" in line and "is no verdict" in line for line in lines)


def _sequential_marks(events: list[dict]) -> dict[str, int]:
    """User annotations whose name repeats on one thread, one span after the other: name -> count.
    Spans that nest in a span of their own name are no sequence."""
    spans: dict[tuple, list[tuple[float, float]]] = defaultdict(list)
    for e in events:
        if e.get("cat") == "user_annotation" and e.get("ph") == "X":
            spans[(e["name"], e.get("pid"), e.get("tid"))].append((e["ts"], e["ts"] + e["dur"]))
    return {k[0]: len(v) for k, v in spans.items() if len(v) >= 2
            and all(b[0] >= a[1] for a, b in zip(sorted(v), sorted(v)[1:]))}


def test_param_runs_are_timed_from_one_repeated_mark_to_the_next(compared6: dict) -> None:
    """PARAM's AlexNet benchmark, two runs without ProfilerStep: the one annotation that repeats
    in sequence is `[param|clear_cache]` (the phases' own spans nest in a span of their name), so
    each run has one iteration by it, from one mark to the next: the basis is said, and there is
    no verdict on one a side."""
    c = compared6["hta-alexnet-runs"]
    marks = [c[v]["marks"] for v in "ab"]
    assert marks == [{"[param|clear_cache]": 2}] * 2
    doc = c["doc"]
    assert doc["whole_graph"]["basis"] == {"a": "annotation-iterations", "b": "annotation-iterations"}
    assert [doc["variants"][v]["calls"] for v in "ab"] == [n - 1 for m in marks for n in m.values()]
    assert "1 against 1 sample" in doc["whole_graph"]["undetermined"]
    assert any("`[param|clear_cache]` annotation to the next" in n for n in doc["notes"])
