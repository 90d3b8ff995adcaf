"""Benchmark: align + attribute two variants of ~10,000 kernels each, ~1,000,000 events each.

The synthetic set replicates real records of the H200 CUPTI capture (fixtures/captures/
h200-2026-12-02, the pool_fusion case pool_fusion) under new names: A = the OFF call (19 launches of 6
kernels) repeated as 1,667 renamed replicas per call ('add_r7_kernel'), B = the ON call (3
launches of 3 kernels) as 3,334 replicas ('fused_pool2d_r7_add2_r7_kernel'), so A and B each
hold 10,002 kernel names; replicas 0..1666 align by fused name, B's others stay unmatched.
Each replica keeps the real call's durations and offsets; calls are laid back to back.
Target: under 10 s on the 2-core CPU machine. Run: .venv/bin/python benchmarks/bench_attribute.py
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from rootcause.analysis.align import align
from rootcause.model import strip_kernel
from rootcause.analysis.attribute import attribute
from rootcause.analysis.diagnose import diagnose
from rootcause.profilers import load, split_calls

CAPTURE = Path(__file__).parent.parent / "fixtures/captures/h200-2026-12-02/tvm_pool_fusion.cupti.json"
TARGET_EVENTS = 1_000_000


def rename(name: str, r: int) -> str:
    base = strip_kernel(name)
    if base.startswith("fused_"):
        return "fused_" + "_".join(f"{op}_r{r}" for op in base[6:].split("_")) + "_kernel"
    return f"{base}_r{r}_kernel"


def replicate(call: pd.DataFrame, replicas: int) -> pd.DataFrame:
    """One real call's records repeated `replicas` times per call under new names, for as
    many calls as reach TARGET_EVENTS."""
    call = call.sort_values("start_ns").reset_index(drop=True)
    offs = (call.start_ns - call.start_ns.min()).to_numpy()
    durs = call.duration_ns.to_numpy()
    span = int((call.end_ns.max() - call.start_ns.min()) + 2000)
    per_call = len(call) * replicas
    calls = -(-TARGET_EVENTS // per_call)
    names = np.array([rename(k, r) for r in range(replicas) for k in call.kernel], dtype=object)
    rep = np.repeat(np.arange(replicas), len(call))
    base_off = np.tile(offs, replicas) + rep * span
    starts = (np.arange(calls)[:, None] * span * replicas + base_off[None, :]).ravel()
    out = pd.DataFrame({"kernel": np.tile(names, calls), "start_ns": starts.astype("int64")})
    out["duration_ns"] = np.tile(np.tile(durs, replicas), calls).astype("int64")
    out["end_ns"] = out.start_ns + out.duration_ns
    for col in ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z",
                "registers", "shared_bytes", "local_bytes"):
        out[col] = np.tile(np.tile(call[col].to_numpy(dtype="int64"), replicas), calls)
    out["call"] = np.repeat(np.arange(calls), per_call)
    out["source"] = "cupti"
    return out


def main() -> int:
    ev = split_calls(load(CAPTURE))
    segs = [g for _, g in ev.groupby("segment")]
    on = next(g for g in segs if (g.kernel == "fused_pool2d_add2_kernel").any())
    off = next(g for g in segs if not (g.kernel == "fused_pool2d_add2_kernel").any())
    pick = lambda g: g[g.call == g.call.min() + 5]  # a steady-state call
    a = replicate(pick(off), 1667)
    b = replicate(pick(on), 3334)
    print(f"A: {a.kernel.nunique():,} kernels, {len(a):,} events, {a.call.nunique()} calls")
    print(f"B: {b.kernel.nunique():,} kernels, {len(b):,} events, {b.call.nunique()} calls")
    t0 = time.perf_counter()
    al = align(a, b)
    t1 = time.perf_counter()
    att = attribute(a, b, al, labels=("OFF x1667", "ON x3334"))
    t2 = time.perf_counter()
    diagnose(att, al, device="H200")
    t3 = time.perf_counter()
    matched = int((~al.units.flagged).sum())
    print(f"units: {len(al.units):,} ({matched:,} matched on both sides)")
    print(f"align {t1 - t0:.2f} s, attribute {t2 - t1:.2f} s, total {t2 - t0:.2f} s "
          f"(diagnose {t3 - t2:.2f} s more)")
    ok = t2 - t0 < 10.0
    print("PASS" if ok else "FAIL", "target: align + attribute under 10 s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
