"""The IREE runner's in-process timer against iree-benchmark-module on the same module.

    python benchmarks/bench_iree_timer.py [--n 384] [--repeats 7]

Builds a float32 NxN matmul for llvm-cpu with the real iree-compile, runs it on local-task
through rootcause.runners (sync ABI: the call returns after hal.fence.await) and through
iree-benchmark-module, and prints the minima of both timers, the timer with the result read
back, and their ratios. Seen here (2 shared cores, N=384): in-process 15.3 ms vs tool 17.6 ms
on one run, 4.04 ms vs 3.29 ms (readback 2.93 ms) on another: the load decides, hence no test.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

from rootcause.artifacts.bundle import bundle_inputs
from rootcause.sessions import load_session

SOURCE = """
func.func @main(%a: tensor<{n}x{n}xf32>, %b: tensor<{n}x{n}xf32>) -> tensor<{n}x{n}xf32> {{
  %zero = arith.constant 0.0 : f32
  %init = tensor.empty() : tensor<{n}x{n}xf32>
  %fill = linalg.fill ins(%zero : f32) outs(%init : tensor<{n}x{n}xf32>) -> tensor<{n}x{n}xf32>
  %mm = linalg.matmul ins(%a, %b : tensor<{n}x{n}xf32>, tensor<{n}x{n}xf32>) outs(%fill : tensor<{n}x{n}xf32>) -> tensor<{n}x{n}xf32>
  return %mm : tensor<{n}x{n}xf32>
}}
"""


def build(directory: Path, n: int) -> Path:
    import iree.compiler as ireec

    directory.mkdir(parents=True, exist_ok=True)
    vmfb = ireec.compile_str(SOURCE.format(n=n), target_backends=["llvm-cpu"],
                             extra_args=["--iree-llvmcpu-target-cpu=generic"])
    (directory / "module.vmfb").write_bytes(vmfb)
    spec = {"shape": [n, n], "dtype": "float32", "distribution": "uniform", "low": -1.0, "high": 1.0,
            "file": None}
    manifest = {"name": "matmul", "frontend": "iree", "target": "llvm", "entry": "main",
                "module": "module.vmfb", "inputs": [dict(spec, seed=1), dict(spec, seed=2)],
                "reference": None}
    (directory / "manifest.json").write_text(json.dumps(manifest))
    return directory


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=384)
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        session = load_session(build(Path(tmp) / "matmul", args.n))
        session.set_inputs(bundle_inputs(session.bundle))
        a, b = (np.asarray(x, dtype=np.float64) for x in bundle_inputs(session.bundle))
        session.call()
        np.testing.assert_allclose(session.outputs()[0], a @ b, rtol=1e-4, atol=1e-3)
        timer = session.timer(number=10)
        for _ in range(3):
            timer()  # warm the task pool
        wall = min(timer() for _ in range(args.repeats))
        bench = min(session.benchmark(repetitions=args.repeats))
        readback = min(session.timer(number=10, readback=True)() for _ in range(args.repeats))
    print(f"matmul {args.n}x{args.n} f32 on local-task, minima of {args.repeats}:")
    print(f"  in-process timer      {wall * 1e3:8.3f} ms   ({session.timer_includes})")
    print(f"  iree-benchmark-module {bench * 1e3:8.3f} ms   ratio in-process/tool {wall / bench:.3f}")
    print(f"  in-process + readback {readback * 1e3:8.3f} ms   ratio to in-process {readback / wall:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
