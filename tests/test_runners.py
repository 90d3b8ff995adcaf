"""Runners on real bundles: a TVM Relax module built for llvm and an IREE llvm-cpu vmfb, both
compiled here by the real compilers, run on the CPU and checked against NumPy.

The computation: f(x[16,32], w[32,8]) = (x @ w, relu(x) * 2), written once for each compiler.
Bundles follow the manifest contract (rootcause/bundle.py writes the same layout).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from rootcause.artifacts.bundle import bundle_inputs, read_bundle
from rootcause.sessions import load_session
from rootcause.inputs import make_input
from rootcause.errors import UsageError

X_SPEC = {"shape": [16, 32], "dtype": "float32", "distribution": "uniform", "low": -1.0, "high": 1.0, "seed": 3}
W_SPEC = {"shape": [32, 8], "dtype": "float32", "distribution": "normal", "mean": 0.0, "std": 0.5, "seed": 4}

IREE_SOURCE = """
func.func @main(%x: tensor<16x32xf32>, %w: tensor<32x8xf32>) -> (tensor<16x8xf32>, tensor<16x32xf32>) {
  %zero = arith.constant 0.0 : f32
  %init = tensor.empty() : tensor<16x8xf32>
  %fill = linalg.fill ins(%zero : f32) outs(%init : tensor<16x8xf32>) -> tensor<16x8xf32>
  %mm = linalg.matmul ins(%x, %w : tensor<16x32xf32>, tensor<32x8xf32>) outs(%fill : tensor<16x8xf32>) -> tensor<16x8xf32>
  %zeros = arith.constant dense<0.0> : tensor<16x32xf32>
  %twos = arith.constant dense<2.0> : tensor<16x32xf32>
  %relu = arith.maximumf %x, %zeros : tensor<16x32xf32>
  %scaled = arith.mulf %relu, %twos : tensor<16x32xf32>
  return %mm, %scaled : tensor<16x8xf32>, tensor<16x32xf32>
}
"""


def numpy_reference(x: np.ndarray, w: np.ndarray) -> list[np.ndarray]:
    return [x.astype(np.float64) @ w.astype(np.float64), np.maximum(x, 0) * 2]


def _independent_inputs() -> list[np.ndarray]:
    # Drawn here from the spec by hand, not by the code under test.
    x = np.random.default_rng(3).uniform(-1.0, 1.0, (16, 32)).astype("float32")
    w = np.random.default_rng(4).normal(0.0, 0.5, (32, 8)).astype("float32")
    return [x, w]


def write_manifest(directory: Path, name: str, frontend: str, module: str, reference: list[np.ndarray] | None,
                   rtol: float = 1e-5, atol: float = 1e-5) -> Path:
    refs = None
    if reference is not None:
        (directory / "reference").mkdir(exist_ok=True)
        refs = []
        for i, r in enumerate(reference):
            np.save(directory / "reference" / f"{i}.npy", r.astype("float32"))
            refs.append({"file": f"reference/{i}.npy"})
    manifest = {"rootcause_version": "test", "name": name, "frontend": frontend, "target": "llvm", "entry": "main",
                "module": module, "spec": {}, "versions": {}, "cache_key": None,
                "inputs": [dict(X_SPEC, file=None), dict(W_SPEC, file=None)], "reference": refs,
                "rtol": rtol, "atol": atol, "kernels": [], "binaries": [], "ir": []}
    (directory / "manifest.json").write_text(json.dumps(manifest))
    return directory


def build_tvm_bundle(directory: Path, name: str = "tvm_llvm", offset: float = 0.0,
                     reference: list[np.ndarray] | None = None) -> Path:
    """Relax module for llvm; `offset` != 0 makes a variant that computes x @ w + offset."""
    import tvm
    from tvm import relax
    from tvm.script import ir as I, relax as R

    @I.ir_module
    class Module:
        @R.function
        def main(x: R.Tensor((16, 32), "float32"), w: R.Tensor((32, 8), "float32")):
            with R.dataflow():
                mm = R.add(R.matmul(x, w), R.const(offset, "float32"))
                scaled = R.multiply(R.nn.relu(x), R.const(2.0, "float32"))
                out = (mm, scaled)
                R.output(out)
            return out

    directory.mkdir(parents=True, exist_ok=True)
    ex = relax.build(Module, target=tvm.target.Target({"kind": "llvm", "mcpu": "generic"}))
    ex.export_library(str(directory / "module.so"))
    return write_manifest(directory, name, "tvm", "module.so", reference)


def build_iree_bundle(directory: Path, name: str = "iree_llvm_cpu", reference: list[np.ndarray] | None = None) -> Path:
    import iree.compiler as ireec

    directory.mkdir(parents=True, exist_ok=True)
    vmfb = ireec.compile_str(IREE_SOURCE, target_backends=["llvm-cpu"],
                             extra_args=["--iree-llvmcpu-target-cpu=generic"])
    (directory / "module.vmfb").write_bytes(vmfb)
    return write_manifest(directory, name, "iree", "module.vmfb", reference)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("runner_bundles")
    return {"tvm": build_tvm_bundle(root / "tvm"), "iree": build_iree_bundle(root / "iree")}


@pytest.mark.parametrize("frontend", ["tvm", "iree"])
def test_runner_matches_numpy(built, frontend):
    bundle = read_bundle(built[frontend])
    session = load_session(bundle)
    assert session.device == "cpu"
    inputs = bundle_inputs(bundle)
    for got, want in zip(inputs, _independent_inputs()):
        np.testing.assert_array_equal(got, want)
    session.set_inputs(inputs)
    session.call()
    outputs = session.outputs()
    want = numpy_reference(*inputs)
    assert [o.shape for o in outputs] == [(16, 8), (16, 32)]
    for got, ref in zip(outputs, want):
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("frontend", ["tvm", "iree"])
def test_timer_is_seconds_per_call(built, frontend):
    import time

    session = load_session(built[frontend])
    session.set_inputs(bundle_inputs(session.bundle))
    session.call()
    timer = session.timer(number=50)
    timed, walls = [], []
    for _ in range(10):  # alternated, so that a busy stretch of the shared CPU slows both alike
        timed.append(timer())
        start = time.perf_counter()
        for _ in range(50):
            session.call()
        walls.append((time.perf_counter() - start) / 50)
    per_call, wall = min(timed), min(walls)  # minima: the shared CPU's noise only adds time
    # seconds per call, not per 50 calls: the two agree within 3x either way
    assert 0 < per_call < wall * 3 and wall < per_call * 3


def test_iree_benchmark_module_timer(built):
    session = load_session(built["iree"])
    session.set_inputs(bundle_inputs(session.bundle))
    times = session.benchmark(repetitions=3)
    assert len(times) == 3 and all(0 < t < 1 for t in times)


def test_runtime_only_tvm_in_subprocess(built, tmp_path):
    """TVM_USE_RUNTIME_LIB=1: the GPU host's mode. No compiler library, no tvm.relax import."""
    script = (
        "import sys, numpy as np, tvm\n"
        "from rootcause.artifacts.bundle import bundle_inputs, read_bundle\n"
        "from rootcause.sessions import load_session\n"
        "b = read_bundle(sys.argv[1]); s = load_session(b)\n"
        "s.set_inputs(bundle_inputs(b)); s.call()\n"
        "for i, o in enumerate(s.outputs()): np.save(f'{sys.argv[2]}/{i}.npy', o)\n"
        "print(tvm.base._RUNTIME_ONLY, 'tvm_compiler' in tvm.base._LOADED_LIBS,"
        " any(m.startswith('tvm.relax') for m in sys.modules))\n"
    )
    env = dict(os.environ, TVM_USE_RUNTIME_LIB="1")
    proc = subprocess.run([sys.executable, "-c", script, str(built["tvm"]), str(tmp_path)], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["True", "False", "False"]
    want = numpy_reference(*_independent_inputs())
    for i, ref in enumerate(want):
        np.testing.assert_allclose(np.load(tmp_path / f"{i}.npy"), ref, rtol=1e-5, atol=1e-5)


def test_make_input_regenerates_from_spec():
    spec = {"shape": [3, 4], "dtype": "int32", "distribution": "uniform", "low": 0, "high": 10, "seed": 7}
    want = np.random.default_rng(7).integers(0, 10, (3, 4), dtype="int32")
    np.testing.assert_array_equal(make_input(spec), want)
    assert not make_input({"shape": [2], "dtype": "float16", "distribution": "zeros"}).any()
    with pytest.raises(UsageError, match="distribution: unknown 'cauchy'"):
        make_input({"shape": [2], "dtype": "float32", "distribution": "cauchy"})


def test_bad_bundles_are_one_line_errors(tmp_path):
    with pytest.raises(UsageError, match="not a bundle"):
        read_bundle(tmp_path)
    (tmp_path / "manifest.json").write_text("{not json")
    with pytest.raises(UsageError, match="line 1 column 2: not JSON"):
        read_bundle(tmp_path)
    (tmp_path / "manifest.json").write_text(json.dumps({"frontend": "tvm", "module": "module.so", "inputs": []}))
    with pytest.raises(UsageError, match="missing key[(]s[)] name, target, entry, kernels"):
        read_bundle(tmp_path)
    (tmp_path / "manifest.json").write_text(json.dumps({"name": "x", "frontend": "tvm", "target": "llvm",
                                                        "entry": "main", "module": "module.so", "inputs": [],
                                                        "kernels": []}))
    with pytest.raises(UsageError, match="module.so does not exist") as err:
        read_bundle(tmp_path)
    assert "\n" not in str(err.value)
    (tmp_path / "module.so").write_bytes(b"not an ELF")
    with pytest.raises(UsageError, match="TVM cannot load it"):
        load_session(tmp_path)


def test_a_budgeted_run_is_ended_by_its_budget_not_a_block_count(built):
    """A graph of microseconds, measured with a budget: the run takes blocks until the budget is
    spent or the interval is narrow enough, never until a block count (it had stopped after 40
    blocks, a third of the budget of a 400 us graph, with the wide interval of a few hundred
    samples). How many blocks that takes depends on the machine's noise; the reason it stopped
    must be backed by the run's own numbers: the budget spent, or the interval the stop rule
    judges (the samples' bootstrap of each ratio) under its target."""
    from rootcause import runner

    sessions = [load_session(built[f]) for f in ("tvm", "iree")]
    inputs = bundle_inputs(sessions[0].bundle)
    for s in sessions:
        s.set_inputs(inputs)
    result = runner.measure(sessions, budget_s=1.5, warmup_calls=3, warmup_s=0.1)
    assert result["protocol"]["blocks"] > 10_000
    assert result["blocks_run"] == len(result["orders"])
    if result["stopped"] == "budget":
        assert result["elapsed_s"] >= 1.5
    else:
        assert result["stopped"] == "converged", result["stopped"]
        target = result["protocol"]["target_rel_width"]
        for r in result["ratios"]:  # the interval the stop rule judges: the samples' bootstrap
            lo, hi = r["ci_samples"]  # (the reported ci is its hull with the blocks', which may be wider)
            assert (hi - lo) / r["ratio"] < target


def test_cupti_profiles_of_several_variants_fail_each_on_its_own(built, tmp_path):
    """`rootcause run --profile cupti` where cupti-python is not installed (this machine): the run
    measures both variants and ends well; each variant's capture fails on its own, and each
    records the one-line reason in measurement.json and, once, on stderr."""
    import importlib.util
    import json
    import subprocess
    import sys

    assert importlib.util.find_spec("cupti") is None  # the premise: no CUPTI here
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "rootcause", "run", str(built["tvm"]), str(built["iree"]),
                           "--out", str(out), "--profile", "cupti", "--budget-s", "0.5"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    profiles = json.loads((out / "measurement.json").read_text())["profiles"]
    names = [json.loads((built[f] / "manifest.json").read_text())["name"] for f in ("tvm", "iree")]
    assert sorted(profiles) == sorted(names)
    for name in names:
        assert profiles[name]["ok"] is False and "cupti-python is not installed" in profiles[name]["error"]
        assert proc.stderr.count(f"rootcause run: {name}: cupti failed: ") == 1
    assert "Traceback" not in proc.stderr


def _counting(session):
    """The session with its calls counted (the real calls still run)."""
    calls = []
    real = session.call
    session.call = lambda: (calls.append(1), real())[1]
    return calls


def test_the_capture_warm_up_ends_when_the_clock_reaches_its_maximum(built):
    """A capture's warm-up: at least its calls, then until the SM clock is within 5% of its
    maximum; clock readings made to climb from an H200's idle 345 MHz to its 1980 MHz maximum
    end it at the first reading of 1881 MHz or more, long before its seconds."""
    from rootcause.capture import _warm

    session = load_session(read_bundle(built["tvm"]))
    session.set_inputs(bundle_inputs(read_bundle(built["tvm"])))
    readings = iter([345, 1200, 1875, 1890, 1980])
    calls = _counting(session)
    warm = _warm(session, 3, seconds=30.0, clock=lambda: (next(readings), 1980))
    assert (len(calls), warm["warmup"], warm["sm_clock_mhz"]) == (3 + 3, 6, 1890)  # 3 calls, then one a reading
    assert warm["warmup_s"] < 30.0


def test_the_capture_warm_up_keeps_its_calls_and_its_seconds_without_a_full_clock(built):
    """Its calls come first even when the clock is already at its maximum; a clock held lower (a
    power cap) or none at all (no NVML, the CPU) gives the whole seconds."""
    from rootcause.capture import _warm

    bundle = read_bundle(built["tvm"])
    session = load_session(bundle)
    session.set_inputs(bundle_inputs(bundle))
    calls = _counting(session)
    assert _warm(session, 5, seconds=30.0, clock=lambda: (1980, 1980))["warmup"] == 5 == len(calls)
    for clock in (lambda: (1500, 1980), None):
        warm = _warm(session, 2, seconds=0.2, clock=clock)
        assert warm["warmup_s"] >= 0.2 and warm["warmup"] >= 2


def test_the_sm_clock_reader_matches_gpus_by_pci_bus_id():
    """CUDA writes a bus id with a 4-digit domain, NVML with an 8-digit one: one key for both.
    Without a CUDA driver (this machine) there is no reader, and no error."""
    from rootcause.host_state import _pci_key, sm_clock_reader

    assert _pci_key("0000:19:00.0") == _pci_key("00000000:19:00.0") == (0, 0x19, 0, 0)
    assert _pci_key("0000:1A:00.0") != _pci_key("0000:19:00.0")
    assert _pci_key("not a bus id") is None
    reader = sm_clock_reader(0)
    if reader is None:
        return
    mhz, top = reader()
    assert 0 < mhz <= top


def test_a_capture_child_neither_writes_through_nor_replaces_a_link_in_the_output(built, tmp_path):
    """Links planted in the run's --out where the capture children write their envelopes (the
    shared child's, then each variant's): the files they point at keep their bytes, the links
    stay, and each variant's capture fails with the one line that says why; the run ends well."""
    import json
    import subprocess
    import sys

    out = tmp_path / "run"
    out.mkdir()
    names = [json.loads((built[f] / "manifest.json").read_text())["name"] for f in ("tvm", "iree")]
    planted = {"cupti-capture_result.json": tmp_path / "shared.txt", f"{names[0]}.cupti_result.json": tmp_path / "a.txt"}
    for name, target in planted.items():
        target.write_text(f"the user's {target.name}\n")
        (out / name).symlink_to(target)
    proc = subprocess.run([sys.executable, "-m", "rootcause", "run", str(built["tvm"]), str(built["iree"]),
                           "--out", str(out), "--profile", "cupti", "--budget-s", "0.5"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    for name, target in planted.items():
        assert (out / name).is_symlink() and target.read_text() == f"the user's {target.name}\n"
    profiles = json.loads((out / "measurement.json").read_text())["profiles"]
    assert profiles[names[0]]["ok"] is False
    assert f"{out / names[0]}.cupti_result.json: exists and is not a file rootcause wrote" \
        in profiles[names[0]]["error"]
    assert "Traceback" not in proc.stderr
