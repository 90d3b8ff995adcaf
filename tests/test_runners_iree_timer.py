"""The IREE runner's wall-clock timer against iree-benchmark-module, on local-task (IREE's
asynchronous CPU driver), and the ABI check that makes the wall clock a synchronised timer.

Source of truth: iree-benchmark-module (IREE's own timer, separate process) and the compiled VM
IR (the sync wrapper's hal.fence.await), not the runner's own numbers.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from rootcause import runners
from rootcause.errors import UsageError

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
                "module": "module.vmfb", "inputs": [dict(SPEC, seed=1), dict(SPEC, seed=2)], "reference": None}
    (directory / "manifest.json").write_text(json.dumps(manifest))
    return directory


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    s = runners.load(_bundle(tmp_path_factory.mktemp("iree_timer") / "matmul"))
    s.set_inputs(runners.bundle_inputs(s.bundle))
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


def test_timer_agrees_with_iree_benchmark_module(session):
    a, b = (np.asarray(x, dtype=np.float64) for x in runners.bundle_inputs(session.bundle))
    session.call()
    np.testing.assert_allclose(session.outputs()[0], a @ b, rtol=1e-4, atol=1e-3)
    timer = session.timer(number=10)
    for _ in range(3):
        timer()  # warm the task pool
    bench = min(session.benchmark(repetitions=5))
    wall = min(timer() for _ in range(7))
    # Minima of both: a shared CPU only adds time. The two processes run the same kernels.
    # Measured here (2 shared cores): wall 15.3 ms vs tool 17.6 ms (13% apart), not "a few
    # percent": the in-process timer is the faster one, so it does not stop early; the gap is
    # not explained yet (on the H200 both directions were seen, gpu/README.md).
    assert 0.75 < wall / bench < 1.25, (wall, bench)
    readback = min(session.timer(number=10, readback=True)() for _ in range(5))
    assert readback >= wall * 0.9  # copying the result out can only add
