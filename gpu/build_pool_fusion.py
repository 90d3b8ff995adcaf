"""Build the seed 000 pool_fusion pair (FuseOps+FuseTIR on / off) for CUDA sm_90 as bundles.

A stand-in for engineer D's `rootcause build` until it lands: the recipe is the seed thread's
build_variant() (../shared/seeds/000_*.txt), the layout is the bundle contract (manifest.json,
module.so, inputs/, reference/). Run on the CPU machine (needs the TVM compiler and nvcc):

    .venv/bin/python gpu/build_pool_fusion.py OUT_DIR [--case ../shared/cases/pool_fusion/graph_tvmscript.py]

Writes OUT_DIR/pool_fusion_on/ and OUT_DIR/pool_fusion_off/.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from pathlib import Path

import numpy as np

from rootcause.toolchain import find_tool, libcuda_stub_dir, real_driver_present, tool_version

SHAPE = (1, 16, 64, 64)
SEED = 0


def reference(x: np.ndarray) -> list[np.ndarray]:
    """The seed's NumPy reference: 9 add branches, two concats, 2x2 max pool, two adds."""
    one = np.float32(1)
    groups = []
    for _ in range(3):
        leaves = [(x + one).astype("float32") for _ in range(3)]
        groups.append((np.concatenate(leaves, axis=1) + one).astype("float32"))
    y = np.concatenate(groups, axis=1)
    pooled = np.maximum.reduce([y[:, :, i::2, j::2] for i in range(2) for j in range(2)])
    a = (pooled + one).astype("float32")
    return [a, (a + one).astype("float32")]


def _module(case: Path):
    import tvm
    from tvm.script import ir as I, relax as R, tirx as T

    text = case.read_text().split("\n", 1)[1]  # first line is the import
    return tvm.script.from_source(text, extra_vars=dict(I=I, R=R, T=T), s_tir=True)


def build_variant(case: Path, fuse: bool, arch: str, out: Path) -> None:
    import tvm
    import tvm.support.nvcc  # noqa: F401  registers the nvcc compile callback
    from tvm import relax
    from tvm.relax.backend.cuda import pipeline

    target = tvm.target.Target({"kind": "cuda", "arch": arch}, host={"kind": "llvm", "mcpu": "generic"})
    mod = _module(case)
    with target, tvm.transform.PassContext(opt_level=3):
        for transform in pipeline.library_dispatch_passes(target) + pipeline.legalize_passes(target):
            name = str(transform.info.name).split(".")[-1]
            if not fuse and name in ("FuseOps", "FuseTIR"):
                continue
            mod = transform(mod)
        for transform in pipeline.dataflow_lower_passes(target) + pipeline.finalize_passes(target):
            mod = transform(mod)
        (out / "ir").mkdir(parents=True, exist_ok=True)
        (out / "ir" / "lowered.py").write_text(mod.script())
        ex = relax.build(mod, target=target, relax_pipeline=None, tir_pipeline="default")
    ex.export_library(str(out / "module.so"))


def write_bundle(case: Path, fuse: bool, arch: str, out: Path) -> None:
    import tvm

    out.mkdir(parents=True, exist_ok=True)
    build_variant(case, fuse, arch, out)
    x = np.random.default_rng(SEED).uniform(-0.5, 0.5, SHAPE).astype("float32")
    (out / "inputs").mkdir(exist_ok=True)
    (out / "reference").mkdir(exist_ok=True)
    np.save(out / "inputs" / "0.npy", x)
    refs = reference(x)
    for i, r in enumerate(refs):
        np.save(out / "reference" / f"{i}.npy", r)
    name = "pool_fusion_" + ("on" if fuse else "off")
    manifest = {
        "rootcause_version": "0.1.0",
        "name": name,
        "frontend": "tvm",
        "target": f"cuda:{arch}",
        "entry": "main",
        "module": "module.so",
        "spec": {"name": name, "frontend": "tvm", "target": f"cuda:{arch}", "entry": "main",
                 "tvm": {"opt_level": 3, "skip_passes": [] if fuse else ["FuseOps", "FuseTIR"]},
                 "built_by": "gpu/build_pool_fusion.py"},
        "versions": {"tvm": tvm.__version__, "nvcc": tool_version("nvcc"), "python": platform.python_version()},
        "cache_key": None,
        "inputs": [{"shape": list(SHAPE), "dtype": "float32", "distribution": "uniform",
                    "low": -0.5, "high": 0.5, "seed": SEED, "file": "inputs/0.npy"}],
        "reference": [{"file": f"reference/{i}.npy"} for i in range(len(refs))],
        "rtol": 2e-4,
        "atol": 2e-5,
        "kernels": [],
        "binaries": [],
        "ir": ["ir/lowered.py"],
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--case", type=Path,
                        default=Path(__file__).resolve().parents[2] / "shared/cases/pool_fusion/graph_tvmscript.py")
    parser.add_argument("--arch", default="sm_90")
    args = parser.parse_args()
    if not real_driver_present() and "_RC_STUB" not in os.environ:
        # TVM must find a libcuda at load time or it emits a source-only module: re-exec with the stub.
        env = dict(os.environ, _RC_STUB="1", TVM_CUDA_COMPILE_MODE="nvcc",
                   LD_LIBRARY_PATH=f"{libcuda_stub_dir()}:{os.environ.get('LD_LIBRARY_PATH', '')}",
                   PATH=f"{find_tool('nvcc').parent}:{os.environ['PATH']}")
        os.execve(sys.executable, [sys.executable, *sys.argv], env)
    for fuse in (True, False):
        write_bundle(args.case, fuse, args.arch, args.out / ("pool_fusion_" + ("on" if fuse else "off")))
        print("built", args.out / ("pool_fusion_" + ("on" if fuse else "off")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
