"""Benchmark: the automatic call split (rootcause.profilers.calls.split_calls) on long traces,
printing CPU seconds per trace.

Kernel names come from the H200 CUPTI capture (fixtures/captures/h200-2026-12-02): the OFF call
(19 launches) and the fused ON kernel. Traces, launches 1 us apart:
- interleaved: N launches of one common kernel (the OFF call's first), each followed by a
  unique one ('add_u7_kernel'): nothing repeats back to back, and every common launch has
  ~N candidate periods (this took 157 s at N = 8,000 with the per-candidate search);
- repeated: the OFF call K times, then the ON kernel K times (the capture's shape, longer);
- unique: N launches of N different kernels.
Target: each trace under 10 s of CPU on the 2-core machine. Run:
.venv/bin/python benchmarks/bench_split.py [--scale S]   (S multiplies every size; default 1)
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from rootcause.profilers import load, split_calls

CAPTURE = Path(__file__).parent.parent / "fixtures/captures/h200-2026-12-02/tvm_pool_fusion.cupti.json"


def events(names: list[str]) -> pd.DataFrame:
    start = np.arange(len(names), dtype=np.int64) * 1000
    return pd.DataFrame({"kernel": names, "start_ns": start, "end_ns": start + 500,
                         "duration_ns": np.full(len(names), 500, dtype=np.int64), "source": "cupti"})


def traces(scale: float) -> dict[str, tuple[list[str], int]]:
    """name -> (kernel names, the number of calls the split must find)."""
    real = load(CAPTURE).sort_values("start_ns")
    off = real.kernel.iloc[60:79].tolist()  # 20 ON calls of 3 come first, then OFF calls of 19
    on = "fused_pool2d_add2_kernel"
    n, k = int(8000 * scale), int(50_000 * scale)
    interleaved = [v for i in range(n) for v in (off[0], f"add_u{i}_kernel")]
    return {f"interleaved {n:,} + {n:,}": (interleaved, 1),
            f"repeated OFF x{k:,} then ON x{k:,}": (off * k + [on] * k, 2 * k),
            f"unique {2 * n:,}": ([f"k{i}_kernel" for i in range(2 * n)], 1)}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--scale", type=float, default=1.0)
    scale = parser.parse_args().scale
    ok = True
    for label, (names, want_calls) in traces(scale).items():
        ev = events(names)
        t0 = time.process_time()
        got = split_calls(ev)
        cpu = time.process_time() - t0
        calls = int(got["call"].max()) + 1
        good = cpu < 10.0 and calls == want_calls
        ok &= good
        print(f"{label}: {len(names):,} launches, {calls:,} calls (want {want_calls:,}), "
              f"{cpu:.2f} s CPU {'PASS' if good else 'FAIL'}")
    print("PASS" if ok else "FAIL", "target: each split under 10 s of CPU, calls as built")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
