"""Bundles: a built variant as a self-contained directory other stages (and hosts) can read.

Layout (the contract other stages read): manifest.json, module.so | module.vmfb, inputs/N.npy,
reference/N.npy, ir/..., binaries/... . Inputs over 64 MB (by shape x dtype) are neither made
nor stored (file: null); the runner regenerates them from the input spec with numpy
default_rng(seed), as `make_input` does. Without all inputs the reference is not computed.
"""
from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np

import rootcause
from rootcause.errors import UsageError
from rootcause.fileio import write_atomic, write_json
from rootcause.inputs import make_input, nbytes, shape_dtype
from rootcause.frontends import BuildOutput
from rootcause.model import CatalogKernel
from rootcause.spec import InputSpec, VariantSpec

MAX_STORED_BYTES = 64 * 1024 * 1024


def reference_outputs(spec: VariantSpec, inputs: list[np.ndarray]) -> list[np.ndarray] | None:
    """Run the spec's [reference] python function on the inputs (CPU, NumPy)."""
    if spec.reference is None:
        return None
    ref = spec.reference
    module_spec = importlib.util.spec_from_file_location(f"rootcause_reference_{ref.file.stem}", ref.file)
    module = importlib.util.module_from_spec(module_spec)
    try:
        module_spec.loader.exec_module(module)
    except Exception as err:
        raise UsageError(f"{spec.where('reference', 'python')}: {ref.file.name} failed to load: "
                         f"{type(err).__name__}: {err}") from None
    func = getattr(module, ref.function, None)
    if not callable(func):
        raise UsageError(f"{spec.where('reference', 'python')}: no function \"{ref.function}\" in {ref.file.name}")
    out = func(*inputs)
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    return [np.asarray(o) for o in outs]


def write_bundle(spec: VariantSpec, built: BuildOutput, build_dir: Path, bundle_dir: Path,
                 cache_key: str) -> Path:
    """Copy a build into the bundle layout and write manifest.json last (its presence = complete)."""
    bundle_dir.mkdir(parents=True, exist_ok=True)
    (bundle_dir / "manifest.json").unlink(missing_ok=True)
    module_name = built.module_path.name
    shutil.copy2(built.module_path, bundle_dir / module_name)
    ir = [_copy(p, build_dir, bundle_dir) for p in built.ir_files]
    binaries = [_copy(p, build_dir, bundle_dir) for p in built.binary_files]
    inputs, arrays, unstored = [], [], []
    for n, ispec in enumerate(spec.inputs):
        where = spec.where(f"inputs[{n}]")
        shape, dtype = shape_dtype(ispec, where=where)
        row = {"shape": list(shape), "dtype": str(dtype), "distribution": ispec.distribution,
               "low": ispec.low, "high": ispec.high, "mean": ispec.mean, "std": ispec.std, "seed": ispec.seed,
               "source_file": str(ispec.file) if ispec.file else None, "file": None}
        # decided from shape x dtype: an input too big to store is never made here (the runner
        # regenerates it on the GPU host), so a 1.25 GiB weight costs the build nothing
        if nbytes(ispec, where=where) <= MAX_STORED_BYTES:
            arrays.append(make_input(ispec, where=where))
            row["file"] = _save(bundle_dir / "inputs" / f"{n}.npy", arrays[-1])
        else:
            unstored.append(f"inputs[{n}] {'x'.join(map(str, shape))} {dtype}")
        inputs.append(row)
    notes = list(built.notes)
    reference = None
    if spec.reference is not None and unstored:
        notes.append(f"reference not computed: {', '.join(unstored)} over {MAX_STORED_BYTES >> 20} MB, not made "
                     "at build (the runner regenerates them); the variants' outputs are compared with each other")
    elif spec.reference is not None:
        outs = reference_outputs(spec, arrays)
        reference = [{"file": _save(bundle_dir / "reference" / f"{n}.npy", o) if o.nbytes <= MAX_STORED_BYTES
                      else None, "shape": list(o.shape), "dtype": str(o.dtype)} for n, o in enumerate(outs)]
    manifest = {
        "rootcause_version": rootcause.__version__, "name": spec.name, "frontend": spec.frontend,
        "target": spec.target, "entry": spec.entry, "module": module_name, "spec": spec.to_dict(),
        "versions": built.versions, "cache_key": cache_key, "inputs": inputs, "reference": reference,
        "rtol": spec.reference.rtol if spec.reference else None,
        "atol": spec.reference.atol if spec.reference else None,
        "kernels": [_relative_resources(k.to_dict(), build_dir) for k in built.kernels],
        "binaries": binaries, "ir": ir,
        "notes": notes,
    }
    write_json(bundle_dir / "manifest.json", manifest)
    return bundle_dir


def _relative_resources(kernel: dict[str, Any], build_dir: Path) -> dict[str, Any]:
    """Resource rows name the binary they were read from: make that bundle-relative."""
    file = kernel.get("resources", {}).get("file")
    if file and Path(file).is_relative_to(build_dir):
        kernel["resources"]["file"] = str(Path(file).relative_to(build_dir))
    return kernel


def _copy(path: Path, build_dir: Path, bundle_dir: Path) -> str:
    rel = path.relative_to(build_dir)
    (bundle_dir / rel).parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(path, bundle_dir / rel)
    return str(rel)


def _save(path: Path, array: np.ndarray) -> str:
    import io

    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=False)
    write_atomic(path, buf.getvalue())
    return f"{path.parent.name}/{path.name}"


def read_manifest(bundle_dir: str | Path) -> dict[str, Any]:
    """manifest.json of a bundle, checked for the keys every reader relies on."""
    from rootcause.runners import read_bundle  # the one manifest reader (also the GPU host's)

    manifest = read_bundle(bundle_dir).manifest
    for key in ("name", "frontend", "target", "entry", "module", "inputs", "kernels"):
        if key not in manifest:
            raise UsageError(f"{Path(bundle_dir) / 'manifest.json'}: missing key \"{key}\"")
    return manifest


def kernels(bundle_dir: str | Path) -> list[CatalogKernel]:
    return [CatalogKernel.from_dict(k) for k in read_manifest(bundle_dir)["kernels"]]


def load_inputs(bundle_dir: str | Path) -> list[np.ndarray]:
    """The bundle's inputs: stored .npy files, else regenerated from the input spec."""
    bundle_dir = Path(bundle_dir)
    out = []
    for row in read_manifest(bundle_dir)["inputs"]:
        if row.get("file"):
            out.append(np.load(bundle_dir / row["file"]))
        else:
            out.append(make_input(InputSpec(shape=row["shape"], dtype=row["dtype"],
                                            distribution=row["distribution"], low=row["low"], high=row["high"],
                                            mean=row.get("mean", 0.0), std=row.get("std", 1.0),
                                            seed=row["seed"],
                                            file=Path(row["source_file"]) if row.get("source_file") else None)))
    return out


def load_reference(bundle_dir: str | Path) -> list[np.ndarray] | None:
    bundle_dir = Path(bundle_dir)
    ref = read_manifest(bundle_dir).get("reference")
    if ref is None or any(r.get("file") is None for r in ref):
        return None
    return [np.load(bundle_dir / r["file"]) for r in ref]
