"""seeds/002's block at the seed's size on an H100, IREE against XLA (fixtures/captures/
h100-2026-12-06-einsum-jax, PROVENANCE.md there), analyzed here from the captured run: the XLA
catalog is read from the HLO XLA compiled on the run host, its kernels named as the GPU launched
them. Truths: jax's own profiler trace of that compile (each kernel's HLO instruction, recorded on
the host), the raw CUPTI records, and the construction (2 x C x N^3 flops for the contraction)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("jax")
pytest.importorskip("iree.compiler")

ROOT = Path(__file__).resolve().parents[1]
CAPTURE = ROOT / "fixtures" / "captures" / "h100-2026-12-06-einsum-jax"
SPEC = ROOT / "fixtures" / "cases" / "einsum_jax" / "variants.toml"
N, C = 702, 128


@pytest.fixture(scope="module")
def analyzed(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, str, Path]:
    out = tmp_path_factory.mktemp("einsum_h100")
    for args in (["--bundle-only", "--target", "cuda:sm_80"], ["--from-run", str(CAPTURE / "run")]):
        proc = subprocess.run([sys.executable, "-m", "rootcause", "analyze", f"{SPEC}#iree_702", f"{SPEC}#xla_702",
                               "--out", str(out), *args], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads((out / "attribution.json").read_text()), proc.stdout, out


def test_the_run_catalog_names_kernels_as_xlas_profiler_does(analyzed) -> None:
    doc, _, _ = analyzed
    catalog = doc["catalogs"]["b"]["kernels"]
    events = json.loads((CAPTURE / "einsum-jax-xla-702.gpu-kernels.json").read_text())["events"]
    by_op = {e["args"]["hlo_op"]: e["name"] for e in events}
    assert set(catalog) == set(by_op.values())  # every launched kernel, and only those
    gemm = by_op["custom-call.1"]
    assert catalog[gemm]["schedule"]["library"].startswith("__cublas")
    assert catalog[gemm]["flops"] == 2 * C * N ** 3
    assert catalog[gemm]["module_paths"] and catalog[gemm]["module_paths"][0].startswith("einsum")


def test_the_contraction_unit_holds_the_delta_with_its_throughput(analyzed) -> None:
    """The unit of the einsum holds both sides' contraction kernels and nearly all the delta; its
    compute line is the construction's flops over the CUPTI records' own kernel time."""
    doc, text, _ = analyzed
    top = max(doc["units"], key=lambda u: abs(u["delta_ns"]["median"]))
    assert top["method"] == "module-path" and top["module_paths"][0].startswith("einsum")
    assert [k for k in top["kernels_a"] if "batch_matmul" in k] and top["kernels_b"]
    assert top["significant"] and top["share"] > 0.95
    rows = json.loads((CAPTURE / "run" / "einsum-jax-xla-702.cupti.json").read_text())
    gemm = top["kernels_b"][0]
    durations = sorted(r["end"] - r["start"] for r in rows if r["name"] == gemm)
    median_ns = durations[len(durations) // 2]
    (found,) = [f for f in top["findings"] if f["rule"] == "compute"]
    xla = found["evidence"]["einsum-jax-xla-702"]
    assert xla["flops_per_call"] == 2 * C * N ** 3
    assert xla["flops_per_s"] == pytest.approx(2 * C * N ** 3 / median_ns * 1e9, rel=0.02)
    rules = {f["rule"] for f in top["findings"]}
    assert "library-call" in rules and "of the H100's 67 TFLOP/s FP32 vector peak" in found["sentence"]
    assert text.startswith("einsum-jax-xla-702 is ") and "faster than einsum-jax-iree-702" in text.splitlines()[0]


def test_the_headline_interval_is_the_pairs_own(analyzed) -> None:
    """IREE and XLA were timed side by side in one process (the run's timed_by): the whole-graph
    delta's interval is the pair's own (the measurement's delta_ci_s, B - A), not the difference of
    the two variants' intervals, and the headline ratio's is the measurement's ratio interval."""
    from rootcause.report.view import verdict

    doc, _, _ = analyzed
    measured = json.loads((CAPTURE / "run" / "measurement.json").read_text())["measurement"]
    (ratio,) = measured["ratios"]
    assert (ratio["a"], ratio["b"]) == ("einsum-jax-iree-702", "einsum-jax-xla-702")
    d = doc["whole_graph"]["delta_ns"]
    assert (d["low"], d["high"]) == pytest.approx([x * 1e9 for x in ratio["delta_ci_s"]])
    a, b = (measured["variants"][n]["ci_s"] for n in (ratio["a"], ratio["b"]))
    assert d["high"] - d["low"] < (b[1] - a[0] - (b[0] - a[1])) * 1e9
    v = verdict(doc)
    assert v["slower"] == doc["variants"]["a"]["label"]
    assert (v["ratio_low"], v["ratio_high"]) == pytest.approx(ratio["ci"])
