"""Cross-producer alignment at scale: `rootcause compare` of one JAX model's two producers (IREE
from jax.export's StableHLO, XLA through jax) at about 1,000 kernel launches a call, as a user
runs it (the installed command, whole process, CPU seconds and wall).

Set-up (not timed): the jax_mlp model of fixtures/models with BLOCKS blocks (default 100: XLA
launches about 10 kernels a block, IREE about 4), built and profiled on the CPU by `rootcause
analyze` with a short budget. Timed: `rootcause compare` of the two CPU profiles with the two
bundles as catalogs, which reads both profiles, aligns (module-path tier: one unit a module
instance), attributes and writes the report set.

Goal: the compare of a 1,000-launch call in at most 5 s CPU.

    python benchmarks/bench_align_cross.py [--blocks 100] [--runs 3]
"""
from __future__ import annotations

import argparse
import json
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ROOTCAUSE = str(Path(sys.executable).parent / "rootcause")


def case(folder: Path, blocks: int) -> Path:
    model = (ROOT / "fixtures" / "models" / "jax_mlp" / "model.py").read_text()
    (folder / "model.py").write_text(re.sub(r"BLOCKS = 4", f"BLOCKS = {blocks}", model.replace(
        "TOKENS, DIM, HIDDEN, BLOCKS = 32, 64, 256, 4", f"TOKENS, DIM, HIDDEN, BLOCKS = 32, 64, 256, {blocks}")))
    base = (ROOT / "fixtures" / "models" / "jax_mlp" / "variants.toml").read_text().split("[variants.")[0]
    spec = folder / "variants.toml"
    spec.write_text(base + '[variants.iree]\nname = "iree"\nfrontend = "iree"\n'
                           '[variants.xla]\nname = "xla"\nfrontend = "xla"\n')
    return spec


def timed(argv: list[str]) -> tuple[float, float, int]:
    """(wall s, CPU s of the child, exit status)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        print(proc.stderr[-2000:], file=sys.stderr)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), proc.returncode


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--blocks", type=int, default=100)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        spec = case(folder, args.blocks)
        out = folder / "analyze"
        wall, cpu, rc = timed([ROOTCAUSE, "analyze", f"{spec}#iree", f"{spec}#xla", "--out", str(out), "--budget-s", "2"])
        if rc != 0:
            return 1
        profiles = json.loads((out / "cpu-profiles" / "profiles.json").read_text())["records"]
        launches = {}
        for name in ("iree", "xla"):
            manifest = json.loads((out / "bundles" / name / "manifest.json").read_text())
            launches[name] = len(manifest["kernels"])
        print(f"set-up: analyze of {args.blocks} blocks {wall:.1f} s wall; catalog kernels: iree {launches['iree']}, "
              f"xla {launches['xla']}")
        argv = [ROOTCAUSE, "compare", str(out / "cpu-profiles" / profiles["iree"]["file"]),
                str(out / "cpu-profiles" / profiles["xla"]["file"]), "--catalog-a", str(out / "bundles" / "iree"),
                "--catalog-b", str(out / "bundles" / "xla")]
        rows = []
        for run in range(args.runs):
            wall, cpu, rc = timed(argv + ["--out", str(folder / f"compare{run}")])
            if rc != 0:
                return 1
            rows.append((wall, cpu))
        doc = json.loads((folder / "compare0" / "attribution.json").read_text())
        methods = {}
        for u in doc["units"]:
            methods[u["method"]] = methods.get(u["method"], 0) + 1
        walls, cpus = sorted(r[0] for r in rows), sorted(r[1] for r in rows)
        print(f"compare (median of {args.runs}): {cpus[len(cpus) // 2]:.2f} s CPU, {walls[len(walls) // 2]:.2f} s wall "
              f"(min {cpus[0]:.2f} s CPU); units by tier: {methods}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
