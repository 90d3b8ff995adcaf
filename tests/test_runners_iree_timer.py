"""The IREE runner's timers on local-task (IREE's asynchronous CPU driver), and the ABI check
that makes the wall clock a synchronised timer.

Source of truth: the compiled VM IR (the sync wrapper's hal.fence.await) and NumPy for the
timed call's result. The timer is compared with iree-benchmark-module in
benchmarks/bench_iree_timer.py (a timing comparison is no test on a shared machine).
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from rootcause.artifacts.bundle import bundle_inputs
from rootcause.sessions import load_session

N = 384  # a matmul of ~113 MFLOP: milliseconds per call, so per-call overheads are noise
SOURCE = f"""
func.func @main(%a: tensor<{N}x{N}xf32>, %b: tensor<{N}x{N}xf32>) -> tensor<{N}x{N}xf32> {{ATTR}} {{
  %zero = arith.constant 0.0 : f32
  %init = tensor.empty() : tensor<{N}x{N}xf32>
  %fill = linalg.fill ins(%zero : f32) outs(%init : tensor<{N}x{N}xf32>) -> tensor<{N}x{N}xf32>
  %mm = linalg.matmul ins(%a, %b : tensor<{N}x{N}xf32>, tensor<{N}x{N}xf32>) outs(%fill : tensor<{N}x{N}xf32>) -> tensor<{N}x{N}xf32>
  return %mm : tensor<{N}x{N}xf32>
}}
"""
SPEC = {"shape": [N, N], "dtype": "float32", "distribution": "uniform", "low": -1.0, "high": 1.0, "file": None}


def _bundle(directory: Path, attr: str = "") -> Path:
    import iree.compiler as ireec

    directory.mkdir(parents=True, exist_ok=True)
    vmfb = ireec.compile_str(SOURCE.replace("{ATTR}", attr), target_backends=["llvm-cpu"],
                             extra_args=["--iree-llvmcpu-target-cpu=generic"])
    (directory / "module.vmfb").write_bytes(vmfb)
    manifest = {"name": directory.name, "frontend": "iree", "target": "llvm", "entry": "main",
                "module": "module.vmfb", "inputs": [dict(SPEC, seed=1), dict(SPEC, seed=2)], "reference": None,
                "kernels": []}
    (directory / "manifest.json").write_text(json.dumps(manifest))
    return directory


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    s = load_session(_bundle(tmp_path_factory.mktemp("iree_timer") / "matmul"))
    s.set_inputs(bundle_inputs(s.bundle))
    return s


def test_sync_abi_declared_and_awaited(session):
    import iree.compiler as ireec

    assert session.abi == "sync"
    assert "no readback" in session.timer_includes
    vm = ireec.compile_str(SOURCE.replace("{ATTR}", ""), target_backends=["llvm-cpu"],
                           extra_args=["--iree-llvmcpu-target-cpu=generic", "--compile-to=vm"])
    text = vm.decode() if isinstance(vm, bytes) else vm
    main = text[text.index("vm.func private @main("):text.index("vm.export @main")]
    assert "@hal.fence.await" in main  # the exported wrapper waits for completion before returning


def test_timer_and_benchmark_time_the_checked_call(session):
    # Which timer is faster depends on this shared machine's load, so the comparison of the two
    # lives in benchmarks/bench_iree_timer.py; here: the timed call computes the right thing and
    # both timers return seconds per call.
    a, b = (np.asarray(x, dtype=np.float64) for x in bundle_inputs(session.bundle))
    session.call()
    np.testing.assert_allclose(session.outputs()[0], a @ b, rtol=1e-4, atol=1e-3)
    for readback in (False, True):
        seconds = session.timer(number=3, readback=readback)()
        assert np.isfinite(seconds) and 0 < seconds < 10
    bench = session.benchmark(repetitions=2)
    assert len(bench) == 2 and all(0 < t < 10 for t in bench)
