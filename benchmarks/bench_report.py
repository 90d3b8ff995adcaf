"""Benchmark: HTML and Markdown reports of an attribution with ~10,000 kernels.

The large attribution is a real one replicated: `rootcause compare` on the H200 CUPTI capture
of the pool_fusion case (fixtures/captures/h200-2026-12-02, OFF = segment 1, ON = segment 0, with the
gallery/inputs catalogs), whose 2 units (6 kernels of OFF, 3 of ON) are copied 1,112 times
under new names ('pool2d_r7_kernel'): 2,224 units, 10,008 kernels. Its per-kernel launch facts
and one-call timeline (measured from the capture, then replicated the same way, calls laid
back to back) go into the optional 'kernels' and 'timeline' sections, so the renderers draw
all 10,008 kernels (a 24,000-bar timeline) without re-reading a profile.
Targets: each report under 5 s on the 2-core CPU machine, the HTML under 10 MB.
Run: .venv/bin/python benchmarks/bench_report.py
"""
from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rootcause.report import kernels, render_html, render_markdown

ROOT = Path(__file__).parent.parent
CAPTURE = ROOT / "fixtures/captures/h200-2026-12-02/tvm_pool_fusion.cupti.json"
REPLICAS = 1112


def rename(name: str, r: int) -> str:
    return re.sub(r"(_kernel\d*)?$", lambda m: f"_r{r}{m.group(0)}", name, count=1)


def real_attribution(out: Path) -> dict:
    subprocess.run([sys.executable, "-m", "rootcause", "compare", f"{CAPTURE}#1", f"{CAPTURE}#0",
                    "--catalog-a", "gallery/inputs/pool_fusion_off.manifest.json",
                    "--catalog-b", "gallery/inputs/pool_fusion_on.manifest.json",
                    "--label-a", "OFF", "--label-b", "ON", "--gpu", "H200", "--out", str(out)],
                   check=True, cwd=ROOT, capture_output=True)
    return json.loads((out / "attribution.json").read_text())


def replicate(doc: dict, replicas: int) -> dict:
    prof = kernels.profiles(doc)
    big = copy.deepcopy(doc)
    big["units"], big["kernels"], big["timeline"] = [], [], {}
    for r in range(replicas):
        for u in doc["units"]:
            u = copy.deepcopy(u)
            u["unit"] = len(big["units"])
            u["kernels_a"] = [rename(k, r) for k in u["kernels_a"]]
            u["kernels_b"] = [rename(k, r) for k in u["kernels_b"]]
            big["units"].append(u)
    for v in "ab":
        for k in prof[v]["kernels"]:
            big["kernels"] += [{**k, "variant": v, "kernel": rename(k["kernel"], r)} for r in range(replicas)]
        call = prof[v]["timeline"]["kernels"]
        span = max(k["end_ns"] for k in call)
        big["timeline"][v] = {"call": prof[v]["timeline"]["call"], "kernels": [
            {**k, "kernel": rename(k["kernel"], r), "start_ns": k["start_ns"] + r * span,
             "end_ns": k["end_ns"] + r * span} for r in range(replicas) for k in call]}
    return big


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        doc = real_attribution(Path(tmp))
    big = replicate(doc, REPLICAS)
    n_kernels = len({(k["variant"], k["kernel"]) for k in big["kernels"]})
    bars = sum(len(t["kernels"]) for t in big["timeline"].values())
    print(f"attribution: {len(big['units']):,} units, {n_kernels:,} kernels, {bars:,} timeline bars")
    ok = True
    for name, fn, limit in (("html", render_html, 10_000_000), ("markdown", render_markdown, 65_536)):
        t0 = time.perf_counter()
        text = fn(big, device="H200")
        dt = time.perf_counter() - t0
        size = len(text.encode())
        fits = dt < 5.0 and size < limit
        ok &= fits
        print(f"{name:8s}: {dt:5.2f} s, {size / 1e6:6.2f} MB ({size:,} bytes; limit {limit:,})"
              f"  {'ok' if fits else 'OVER TARGET'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
