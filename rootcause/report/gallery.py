"""Regenerate reports/: one attribution, HTML report and Markdown comment per real capture.

    python -m rootcause.report.gallery [--out reports] [--rebuild-catalogs]

Every input is a committed file: the H200 captures under fixtures/captures/, and the bundle
manifests (catalogs) under reports/inputs/, which `--rebuild-catalogs` rebuilds with
`rootcause build` from fixtures/cases/. The steps are the CLI's own (`rootcause compare`,
then `rootcause report`), run from the repository root so the paths recorded in each
attribution.json are relative and the gallery can be moved with the repository.
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any


ROOT = Path(__file__).resolve().parents[2]
RUN = "fixtures/captures/h200-2026-12-02-run"
SHARED = "fixtures/captures/h200-2026-12-02/tvm_pool_fusion.cupti.json"
INPUTS = "reports/inputs"

# name -> what goes into `rootcause compare`. A is the baseline (FuseOps off), B the candidate.
# Not here: the ncu run (fixtures/captures/h200-2026-12-02-run/ncu/), one profiled call per
# variant, which split_calls cuts into 6 "calls" of 3 signatures for OFF (see reports/README.md).
ENTRIES: dict[str, dict[str, Any]] = {
    "pool_fusion_h200_cupti": {
        "title": "seed 000, TVM pool fusion on the H200: FuseOps ON against OFF (CUPTI, measured)",
        "profiles": (f"{RUN}/pool_fusion_off.cupti.json", f"{RUN}/pool_fusion_on.cupti.json"),
        "measurement": f"{RUN}/measurement.json",
        "catalogs": (f"{INPUTS}/pool_fusion_off.manifest.json", f"{INPUTS}/pool_fusion_on.manifest.json"),
        "labels": ("pool_fusion_off", "pool_fusion_on"),
    },
    "pool_fusion_h200_shared_capture": {
        "title": "seed 000, TVM pool fusion on the H200: ON against OFF in one process (CUPTI, profiled span)",
        "profiles": (f"{SHARED}#1", f"{SHARED}#0"),
        "measurement": None,
        "catalogs": (f"{INPUTS}/pool_fusion_off.manifest.json", f"{INPUTS}/pool_fusion_on.manifest.json"),
        "labels": ("OFF", "ON"),
    },
    "einsum_cpu_local_task": {
        "title": "seed 002, IREE einsum: fused generic against split producers, small size on CPU (local-task)",
        "profiles": (f"{INPUTS}/einsum_cpu/split_small.dispatch.jsonl", f"{INPUTS}/einsum_cpu/fused_small.dispatch.jsonl"),
        "measurement": None,
        "catalogs": (f"{INPUTS}/einsum_cpu/einsum_split_small.manifest.json",
                     f"{INPUTS}/einsum_cpu/einsum_fused_small.manifest.json"),
        "labels": ("einsum-split-small", "einsum-fused-small"),
        "device": None,
    },
}

# Catalog manifests: (spec, output name) built by --rebuild-catalogs.
CATALOG_SPECS = (("fixtures/cases/pool_fusion/variants.toml#off", "pool_fusion_off.manifest.json"),
                 ("fixtures/cases/pool_fusion/variants.toml#on", "pool_fusion_on.manifest.json"),
                 ("fixtures/cases/einsum_fusion/variants.toml#split_small", "einsum_cpu/einsum_split_small.manifest.json"),
                 ("fixtures/cases/einsum_fusion/variants.toml#fused_small", "einsum_cpu/einsum_fused_small.manifest.json"))

def _rootcause(*args: str) -> str:
    r = subprocess.run([sys.executable, "-m", "rootcause", *args], cwd=ROOT, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"rootcause {' '.join(args)} failed (exit {r.returncode}):\n{r.stderr.strip()}")
    return r.stdout


def rebuild_catalogs() -> None:
    for spec, name in CATALOG_SPECS:
        with tempfile.TemporaryDirectory() as tmp:
            _rootcause("build", spec, "--out", f"{tmp}/bundle")
            shutil.copyfile(f"{tmp}/bundle/manifest.json", ROOT / INPUTS / name)
            print(f"rebuilt {INPUTS}/{name} from {spec}")


def make(name: str, entry: dict[str, Any], out: Path) -> dict[str, Any]:
    folder = out / name
    folder.mkdir(parents=True, exist_ok=True)
    rel = folder.resolve().relative_to(ROOT) if folder.resolve().is_relative_to(ROOT) else folder.resolve()
    args = ["compare", *entry["profiles"], "--catalog-a", entry["catalogs"][0], "--catalog-b", entry["catalogs"][1],
            "--label-a", entry["labels"][0], "--label-b", entry["labels"][1], "--out", str(rel)]
    device = entry.get("device", "H200")
    if device:
        args += ["--device", device]
    if entry["measurement"]:
        args += ["--measurement", entry["measurement"]]  # `rootcause run`'s measurement.json as is
    summary = _rootcause(*args)
    (folder / "compare.txt").write_text(f"$ rootcause {' '.join(args)}\n{summary}")
    for fmt, file in (("html", "report.html"), ("markdown", "report.md")):
        _rootcause("report", f"{rel}/attribution.json", "--format", fmt, "--out", f"{rel}/{file}",
                   *(["--device", device] if device else []), "--title", entry["title"])
    return {"name": name, "args": args, "summary": summary.splitlines()[0]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rootcause.report.gallery", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "reports")
    parser.add_argument("--rebuild-catalogs", action="store_true",
                        help="rebuild reports/inputs/*.manifest.json with rootcause build first (TVM, nvcc)")
    parser.add_argument("--only", action="append", choices=sorted(ENTRIES), help="make only these entries")
    args = parser.parse_args(argv)
    if args.rebuild_catalogs:
        rebuild_catalogs()
    for name in args.only or ENTRIES:
        done = make(name, ENTRIES[name], args.out)
        print(f"{name}: {done['summary']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
