"""Regenerate gallery/: one attribution, HTML report and Markdown comment per real capture.

    python tools/gallery.py [--out reports] [--rebuild-catalogs]

Every input is a committed file: the H200 captures under fixtures/captures/, and the bundle
manifests (catalogs) under gallery/inputs/, which `--rebuild-catalogs` rebuilds with
`rootcause build` from fixtures/cases/. The step is the CLI's own `rootcause compare` (which
writes attribution.json, report.html and report.md), run from the repository root so the paths
recorded in each attribution.json are relative and the gallery can be moved with the repository.
Entries of kind 'analyze' run the split `rootcause analyze` instead: `--bundle-only` rebuilds A,
B and the hybrids from fixtures/cases/ into the entry's bundles/ (TVM and nvcc, or iree-compile
and ptxas; cached builds take seconds), then `--from-run` analyzes the committed GPU run against them;
a run committed as a tarball (`run_archive`: file, folder inside it) is unpacked under build/ first.
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from rootcause.argtypes import command_line


ROOT = Path(__file__).resolve().parents[1]
RUN = "fixtures/captures/h200-2026-12-02-run"
SEEDS = "fixtures/captures/h200-2026-12-02-seeds"
POOL_SPECS = "fixtures/cases/pool_fusion/variants.toml"
PREFILL_SPECS = "fixtures/cases/prefill_dedup/variants.toml"
SHARED = "fixtures/captures/h200-2026-12-02/tvm_pool_fusion.cupti.json"
INPUTS = "gallery/inputs"
MODELS_CAPTURE = "fixtures/captures/h200-2026-12-05-models"
POOL_CATALOGS = (f"{INPUTS}/pool_fusion_off.manifest.json", f"{INPUTS}/pool_fusion_on.manifest.json")
POOL_LABELS = ("pool_fusion_off", "pool_fusion_on")


def _pool(title: str, run_dir: str, profiler: str) -> dict[str, Any]:
    """the pool_fusion case from a `rootcause run` directory: both profiles, its measurement.json (which
    also tells compare how many calls each profile holds) and env.json beside them."""
    return {"title": title, "profiles": tuple(f"{run_dir}/{n}.{profiler}" for n in POOL_LABELS),
            "measurement": f"{run_dir}/measurement.json", "catalogs": POOL_CATALOGS, "labels": POOL_LABELS}


def _seed_run(title: str, case: str, labels: tuple[str, str], catalogs: tuple[str, str]) -> dict[str, Any]:
    """A seed case's `rootcause run` directory under SEEDS: CUPTI profiles named after the bundles,
    its measurement.json (interleaved latency, calls per profile) and env.json."""
    return {"title": title, "profiles": tuple(f"{SEEDS}/{case}/{n}.cupti.json" for n in labels),
            "measurement": f"{SEEDS}/{case}/measurement.json",
            "catalogs": tuple(f"{INPUTS}/{c}" for c in catalogs), "labels": labels}


# name -> what goes into `rootcause compare` (or, kind 'analyze', `rootcause analyze`). A is the
# baseline, B the candidate.
ENTRIES: dict[str, dict[str, Any]] = {
    "pool_fusion_h200_analyze": {
        "kind": "analyze", "specs": (f"{POOL_SPECS}#on", f"{POOL_SPECS}#off"), "target": "cuda:sm_90",
        "run": "fixtures/captures/h200-2026-12-02-analyze/run",
    },
    "prefill_dedup_h200_analyze": {
        "kind": "analyze", "specs": (f"{PREFILL_SPECS}#alone", f"{PREFILL_SPECS}#dedup"), "target": "cuda:sm_80",
        "run": "fixtures/captures/h200-2026-12-02-analyze-prefill/run",
    },
    "reduction_pair_h200_analyze": {
        "kind": "analyze", "hybrids": 8, "target": "cuda:sm_80",
        "specs": ("fixtures/zoo/iree_reduction_pair/variants.toml#legacy",
                  "fixtures/zoo/iree_reduction_pair/variants.toml#vector_distribute"),
        "run": "fixtures/zoo/iree_reduction_pair/capture/run",
    },
    "convnet_fusion_off_h200_analyze": {
        "kind": "analyze", "target": "cuda:sm_90",
        "specs": (f"{MODELS_CAPTURE}/convnet/variants.toml#tvm_fused", f"{MODELS_CAPTURE}/convnet/variants.toml#tvm_unfused"),
        "run_archive": (f"{MODELS_CAPTURE}/results.tar.gz", "results/convnet_tvm"),
    },
    "llama_iree_hfuse_h200_analyze": {
        "kind": "analyze", "target": "cuda:sm_80",
        "specs": ("fixtures/models/llama/variants.toml#iree", "fixtures/models/llama/variants.toml#iree_hfuse"),
        "run_archive": (f"{MODELS_CAPTURE}/results.tar.gz", "results/llama_iree"),
    },
    "jax_mlp_iree_release_h100_analyze": {
        "kind": "analyze", "target": "cuda:sm_80", "no_confirm": True,  # 3.8.0 refuses 3.13's configurations
        "specs": ("fixtures/models/jax_mlp/variants.toml#iree_3_8", "fixtures/models/jax_mlp/variants.toml#iree"),
        "run_archive": (f"{MODELS_CAPTURE}/h100-versions-run.tar.gz", "run/jax_mlp_rel"),
    },
    "prefill_dedup_h200_cupti": _seed_run(
        "seed 001, IREE prefill_bs8 compiled alone against deduplicated with prefill_bs2, on the H200 (CUPTI, "
        "measured)", "prefill_dedup", ("prefill_bs8-alone-cuda", "prefill_bs8-dedup-cuda"),
        ("prefill_dedup/alone.manifest.json", "prefill_dedup/dedup.manifest.json")),
    "einsum_h200_cupti": _seed_run(
        "seed 002, IREE einsum at real size (N=702, C=128) on the H200: producers left unfused against the "
        "thread's fused generic (CUPTI, measured)", "einsum_fusion", ("einsum-unfused", "einsum-fused"),
        ("einsum_fusion/unfused.manifest.json", "einsum_fusion/fused.manifest.json")),
    "pool_fusion_h200_cupti": _pool(
        "seed 000, TVM pool fusion on the H200: FuseOps ON against OFF (CUPTI, measured)", RUN, "cupti.json"),
    "pool_fusion_h200_ncu": _pool(
        "seed 000, TVM pool fusion on the H200: FuseOps ON against OFF (ncu, one profiled call, measured)",
        f"{RUN}/ncu", "ncu.csv"),
    "pool_fusion_h200_shared_capture": {
        "title": "seed 000, TVM pool fusion on the H200: ON against OFF in one process (CUPTI, no measurement: call-to-call intervals)",
        "profiles": (f"{SHARED}#1", f"{SHARED}#0"), "measurement": None, "catalogs": POOL_CATALOGS,
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
                 ("fixtures/cases/einsum_fusion/variants.toml#fused_small", "einsum_cpu/einsum_fused_small.manifest.json"),
                 ("fixtures/cases/prefill_dedup/variants.toml#alone", "prefill_dedup/alone.manifest.json"),
                 ("fixtures/cases/prefill_dedup/variants.toml#dedup", "prefill_dedup/dedup.manifest.json"),
                 ("fixtures/cases/einsum_fusion/variants.toml#unfused", "einsum_fusion/unfused.manifest.json"),
                 ("fixtures/cases/einsum_fusion/variants.toml#fused", "einsum_fusion/fused.manifest.json"))

def _rootcause(*args: str) -> str:
    r = subprocess.run([sys.executable, "-m", "rootcause", *args], cwd=ROOT, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"rootcause {' '.join(args)} failed (exit {r.returncode}):\n{r.stderr.strip()}")
    return r.stdout


def rebuild_catalogs() -> None:
    for spec, name in CATALOG_SPECS:
        with tempfile.TemporaryDirectory() as tmp:
            _rootcause("build", spec, "--out", f"{tmp}/bundle")
            (ROOT / INPUTS / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(f"{tmp}/bundle/manifest.json", ROOT / INPUTS / name)
            print(f"rebuilt {INPUTS}/{name} from {spec}")


def make_analyze(entry: dict[str, Any], folder: Path, rel: Path | str) -> dict[str, Any]:
    """The split analyze: bundles of A, B and the hybrids built here, the GPU run from fixtures/."""
    a, b = entry["specs"]
    _rootcause("analyze", a, b, "--bundle-only", "--target", entry["target"], "--out", str(rel),
               *(["--hybrids", str(entry["hybrids"])] if "hybrids" in entry else []),
               *(["--no-confirm"] if entry.get("no_confirm") else []))
    run = entry.get("run") or _unpack_run(folder.name, *entry["run_archive"])
    args = ["analyze", a, b, "--out", str(rel), "--from-run", run]
    summary = _rootcause(*args)
    (folder / "analyze.txt").write_text(f"$ {command_line(['rootcause', *args])}\n{summary}")
    return {"name": folder.name, "args": args, "summary": summary.splitlines()[0]}


def _unpack_run(name: str, archive: str, member: str) -> str:
    """The run folder `member` of a committed tarball, unpacked under build/ (relative to ROOT)."""
    dest = ROOT / "build" / "gallery-runs" / name
    shutil.rmtree(dest, ignore_errors=True)
    with tarfile.open(ROOT / archive) as tar:
        tar.extractall(dest, members=[m for m in tar.getmembers() if m.name.lstrip("./").startswith(member)],
                       filter="data")
    return str((dest / member).relative_to(ROOT))


def make(name: str, entry: dict[str, Any], out: Path) -> dict[str, Any]:
    folder = out / name
    shutil.rmtree(folder, ignore_errors=True)  # this tool's own entry, made again whole (git keeps the last)
    folder.mkdir(parents=True, exist_ok=True)
    rel = folder.resolve().relative_to(ROOT) if folder.resolve().is_relative_to(ROOT) else folder.resolve()
    if entry.get("kind") == "analyze":
        return make_analyze(entry, folder, rel)
    args = ["compare", *entry["profiles"], "--catalog-a", entry["catalogs"][0], "--catalog-b", entry["catalogs"][1],
            "--label-a", entry["labels"][0], "--label-b", entry["labels"][1], "--title", entry["title"],
            "--out", str(rel)]
    device = entry.get("device", "H200")
    if device:
        args += ["--gpu", device]
    if entry["measurement"]:
        args += ["--measurement", entry["measurement"]]  # `rootcause run`'s measurement.json as is
    summary = _rootcause(*args)
    (folder / "compare.txt").write_text(f"$ {command_line(['rootcause', *args])}\n{summary}")
    return {"name": name, "args": args, "summary": summary.splitlines()[0]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python tools/gallery.py", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "gallery")
    parser.add_argument("--rebuild-catalogs", action="store_true",
                        help="rebuild gallery/inputs/*.manifest.json with rootcause build first (TVM, nvcc)")
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
