"""The model pairs of fixtures/models run on an H200 (fixtures/captures/h200-2026-12-05-models,
PROVENANCE.md there): attributed here from the committed run directories with
`rootcause analyze --from-run`, against what the construction decides and what the raw CUPTI
records (read with json alone) say."""
from __future__ import annotations

import json
import subprocess
import sys
import tarfile
from fnmatch import fnmatchcase
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CAPTURE = ROOT / "fixtures" / "captures" / "h200-2026-12-05-models"
MODELS = ROOT / "fixtures" / "models"
# the convnet as it was captured (5 convolutions); fixtures/models/convnet has grown since
CAPTURED_MODELS = {"convnet": CAPTURE / "convnet"}


@pytest.fixture(scope="module")
def capture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("models-capture")
    for name in ("analyze.tar.gz", "results.tar.gz"):
        with tarfile.open(CAPTURE / name) as tar:
            tar.extractall(root / name.split(".")[0], filter="data")
    return root


def _analyze(capture: Path, case: str, model: str, a: str, b: str) -> subprocess.CompletedProcess:
    spec = CAPTURED_MODELS.get(model, MODELS / model) / "variants.toml"
    return subprocess.run([sys.executable, "-m", "rootcause", "analyze", f"{spec}#{a}", f"{spec}#{b}",
                           "--out", str(capture / "analyze" / case), "--from-run",
                           str(capture / "results" / "results" / case)], capture_output=True, text=True)


def _launches_per_call(capture: Path, case: str, variant: str) -> tuple[float, set[str]]:
    run = capture / "results" / "results" / case
    profile = json.loads((run / "measurement.json").read_text())["profiles"][variant]
    records = json.loads((run / profile["file"]).read_text())
    return len(records) / profile["calls"], {r["name"] for r in records}


def test_convnet_without_fusion_is_slower_and_each_split_group_confirms_it(capture: Path) -> None:
    """FuseOps/FuseTIR off: more launches a call in the raw records, each kernel one op; B slower;
    the top unit is one of A's fused conv groups against its own ops; every dataflow-boundary
    hybrid (one group split back) moves A towards B."""
    fused, fused_names = _launches_per_call(capture, "convnet_tvm", "convnet_tvm_fused")
    split, split_names = _launches_per_call(capture, "convnet_tvm", "convnet_tvm_unfused")
    assert split > fused and not any(n.startswith("fused_") for n in split_names)
    proc = _analyze(capture, "convnet_tvm", "convnet", "tvm_fused", "tvm_unfused")
    assert proc.returncode == 0, proc.stderr
    att = json.loads((capture / "analyze" / "convnet_tvm" / "attribution.json").read_text())
    whole = att["whole_graph"]
    assert whole["significant"] and whole["delta_ns"]["median"] > 0
    top = max((u for u in att["units"] if u["significant"]), key=lambda u: abs(u["delta_ns"]["median"]))
    (group,) = top["kernels_a"]
    assert fnmatchcase(group, "fused_conv2d*_kernel") and group in fused_names
    ops = [p for p in group.removeprefix("fused_").removesuffix("_kernel").split("_") if p]
    assert all(any(k.startswith(op.rstrip("0123456789")) for op in ops) for k in top["kernels_b"])
    hybrids = att["confirmation"]["hybrids"]
    assert len(hybrids) == 4 and all(h["verdict"] == "confirmed" for h in hybrids)


def test_a_pair_with_nothing_to_fuse_has_no_verdict(capture: Path) -> None:
    """jax_mlp's contractions share no operand: the horizontal-fusion flag forms the same
    dispatches (the same launches a call in the raw records), and nothing is blamed."""
    assert _launches_per_call(capture, "jax_mlp", "jax_mlp_iree")[0] == \
        _launches_per_call(capture, "jax_mlp", "jax_mlp_iree_hfuse")[0]
    proc = _analyze(capture, "jax_mlp", "jax_mlp", "iree", "iree_hfuse")
    assert proc.returncode == 0, proc.stderr
    att = json.loads((capture / "analyze" / "jax_mlp" / "attribution.json").read_text())
    assert not att["whole_graph"]["significant"] and not any(u["significant"] for u in att["units"])


def test_a_run_whose_builds_compute_nan_is_named_not_attributed(capture: Path) -> None:
    """TVM's CUDA build of the decoder computed NaN on the H200 in every variant (the run's own
    verification record says so, read here with json): analyze stops as outputs differ (exit 1),
    naming every variant and the count, and writes no attribution."""
    run = capture / "results" / "results" / "llama_tvm"
    checks = json.loads((run / "measurement.json").read_text())["verification"]["checks"]
    variants = {c["variant"] for c in checks} | {c["against"] for c in checks}
    assert all(r["nan"] == 32 * 64 for c in checks for r in c["outputs"])
    proc = _analyze(capture, "llama_tvm", "llama", "tvm_fused", "tvm_unfused")
    assert proc.returncode == 1, proc.stderr
    line = proc.stderr.strip()
    assert "\n" not in line and "NaN in the outputs of" in line and "2048 of 2048 elements" in line
    assert all(v in line for v in variants) and len(variants) == 6
    assert not (capture / "analyze" / "llama_tvm" / "attribution.json").exists()


@pytest.fixture(scope="module")
def release_pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, str]:
    """jax_mlp by IREE 3.8.0 against 3.13.0 on an H100 (h100-versions-*), attributed here: the run
    folder, attribution.json and what analyze printed."""
    root = tmp_path_factory.mktemp("release-pair")
    for name, dest in (("h100-versions-run.tar.gz", "runs"), ("h100-versions-analyze.tar.gz", "analyze")):
        with tarfile.open(CAPTURE / name) as tar:
            tar.extractall(root / dest, filter="data")
    run = root / "runs" / "run" / "jax_mlp_rel"
    spec = MODELS / "jax_mlp" / "variants.toml"
    proc = subprocess.run([sys.executable, "-m", "rootcause", "analyze", f"{spec}#iree_3_8", f"{spec}#iree",
                           "--out", str(root / "analyze" / "jax_mlp_rel"), "--from-run", str(run)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return run, json.loads((root / "analyze" / "jax_mlp_rel" / "attribution.json").read_text()), proc.stdout


def test_the_release_pair_blames_the_time_outside_the_kernels(release_pair: tuple[Path, dict, str]) -> None:
    """The headline's direction and ratio are the run's own medians (read with json), and with the
    same launches a call on both sides and no kernel moving, the residual carries the delta."""
    run, att, stdout = release_pair
    medians = {k: v["median_s"] for k, v in
               json.loads((run / "measurement.json").read_text())["measurement"]["variants"].items()}
    whole = att["whole_graph"]
    ratio = medians["jax_mlp_iree"] / medians["jax_mlp_iree_3_8"]
    assert whole["significant"] and whole["delta_ns"]["median"] > 0 and ratio > 5
    assert f"{ratio:.2f}x slower" in stdout.splitlines()[0]
    assert not any(u["significant"] for u in att["units"])
    residual = att["residual"]["delta_ns"]["median"]
    assert 0.9 < residual / whole["delta_ns"]["median"] < 1.1


def test_a_release_pair_names_only_the_schedule_keys_that_differ(tmp_path: Path) -> None:
    """The two releases' catalogs of jax_mlp (the manifests, read with json): the pipelines were
    renamed (3.8.0's LLVMGPU* names), the workgroup sizes are the same, and 3.8.0's launch grids
    were not read. The changes name the pipeline alone and no launch difference."""
    from rootcause.report import kernels

    with tarfile.open(CAPTURE / "h100-versions-analyze.tar.gz") as tar:
        tar.extractall(tmp_path, filter="data")
    plan = json.loads((tmp_path / "jax_mlp_rel" / "plan.json").read_text())
    cats = {}
    for v, name in (("a", "jax_mlp_iree_3_8"), ("b", "jax_mlp_iree")):
        manifest = json.loads((tmp_path / "jax_mlp_rel" / plan["bundles"][name] / "manifest.json").read_text())
        cats[v] = {"kernels": {k["name"]: k for k in manifest["kernels"]}}
    pipelines = {v: {k["schedule"]["pipeline"] for k in cats[v]["kernels"].values()} for v in "ab"}
    assert all(p.startswith("LLVMGPU") for p in pipelines["a"]) and pipelines["b"] == {p[7:] for p in pipelines["a"]}
    workgroups = {v: sorted(str(k["schedule"]["workgroup_size"]) for k in cats[v]["kernels"].values()) for v in "ab"}
    assert workgroups["a"] == workgroups["b"]
    assert not any(isinstance((k.get("launch") or {}).get("grid"), list) for k in cats["a"]["kernels"].values())
    differ = kernels.schedule_differences(cats["a"]["kernels"], cats["b"]["kernels"])
    assert [key for key, _, _ in differ] == ["pipeline"]
    assert kernels.launch_changes(cats, "A", "B") == []


def _idle_before_by_kernel(run: Path, variant: str) -> dict[str, float]:
    """From the raw CUPTI records: per kernel name, the median over profiled calls of the device's
    idle time just before its launches (start less the latest end of the call's earlier launches)."""
    import statistics

    profile = json.loads((run / "measurement.json").read_text())["profiles"][variant]
    records = sorted(json.loads((run / profile["file"]).read_text()), key=lambda r: r["start"])
    bounds = profile["call_starts_ns"] + [profile["end_ns"]]
    sums: dict[str, list[float]] = {}
    for lo, hi in zip(bounds, bounds[1:]):
        latest, per_call = None, {}
        for r in (r for r in records if lo <= r["start"] < hi):
            idle = max(0, r["start"] - latest) if latest is not None else 0
            per_call[r["name"]] = per_call.get(r["name"], 0) + idle
            latest = r["end"] if latest is None else max(latest, r["end"])
        for name, idle in per_call.items():
            sums.setdefault(name, []).append(idle)
    return {name: statistics.median(v) for name, v in sums.items()}


def test_the_release_pair_says_where_the_calls_wait(release_pair: tuple[Path, dict, str]) -> None:
    """The same 17 launches on both sides: the residual's finding says it is not more launches and
    names the unit whose launches the device waits for, the kernel that waits longest in 3.13.0's
    raw records (computed here from them)."""
    run, att, _ = release_pair
    idle = _idle_before_by_kernel(run, "jax_mlp_iree")
    longest = max(idle, key=idle.get)
    (finding,) = [f for f in att["findings"] if f["rule"] == "launch-overhead"]
    assert "not more launches" in finding["sentence"]
    named = next(u for u in att["units"] if f"before the launches of unit {u['unit']} " in finding["sentence"])
    assert longest in named["kernels_b"], (longest, named["kernels_b"])
