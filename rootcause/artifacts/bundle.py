"""Bundles: a built variant as a self-contained directory other stages (and hosts) can read.

Layout: manifest.json, module.so | module.vmfb, inputs/N.npy, reference/N.npy, ir/...,
binaries/... . manifest.json is written last: its presence means the bundle is complete.
An input drawn from the spec's seed is not stored (file: null): its row keeps the recipe and the
sha256 of the array the build drew, and every reader regenerates it with numpy default_rng(seed),
as `make_input` does, and checks the digest. Only inputs read from the user's .npy files are
stored (inputs/N.npy). Inputs over 64 MB (by shape x dtype) are not even drawn at build (no
digest); without all inputs the reference is not computed.

Manifest keys: name, frontend, target, entry, module, inputs (rows of shape, dtype,
distribution, low, high, mean, std, seed, source_file, file, sha256), reference (rows of file, shape,
dtype, or null), rtol, atol, kernels (CatalogKernel dicts), binaries, ir, versions, spec,
cache_key, notes, rootcause_version, toolchain (source: installed | registry | wheel | python,
requirements, python, compiler and runtime as {distribution: version}). This module is the only reader and writer of them; a GPU
host imports it without any compiler.
"""
from __future__ import annotations

import io
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

import rootcause
from rootcause.artifacts import schema
from rootcause.artifacts.schema import NUM, Map, Opt
from rootcause.errors import UsageError
from rootcause.fileio import read_json, write_atomic, write_json
from rootcause.inputs import digest, make_input, nbytes, shape_dtype
from rootcause.model import BuildOutput, CatalogKernel
from rootcause.spec import VariantSpec

MAX_STORED_BYTES = 64 * 1024 * 1024
MANIFEST = "manifest.json"
# Keys every reader relies on (checked once, here).
REQUIRED_KEYS = ("name", "frontend", "target", "entry", "module", "inputs", "kernels")


@dataclass
class Bundle:
    """A bundle directory and its parsed, checked manifest."""

    path: Path
    manifest: dict[str, Any]

    @property
    def name(self) -> str:
        return str(self.manifest.get("name") or self.path.name)

    @property
    def frontend(self) -> str:
        return str(self.manifest["frontend"])

    @property
    def target(self) -> str:
        return str(self.manifest.get("target") or "")

    @property
    def entry(self) -> str:
        return str(self.manifest.get("entry") or "main")

    @property
    def module_path(self) -> Path:
        return self.path / self.manifest["module"]

    @property
    def toolchain(self) -> dict[str, Any]:
        """What built it: {'source', 'requirements', 'python', 'compiler', 'runtime'} ({} before
        manifests recorded it)."""
        value = self.manifest.get("toolchain")
        return value if isinstance(value, dict) else {}

    def kernels(self) -> list[CatalogKernel]:
        return catalog_kernels(self.manifest, self.path / MANIFEST)


RUN_CATALOGS = "run-catalogs"  # OUT/run-catalogs/<variant>/manifest.json: a catalog made from a run


def write_run_catalog(out: Path, bundle: Bundle, kernels: list[CatalogKernel]) -> Path:
    """A bundle's manifest with the catalog read from what its runtime compiled on the run host
    (a frontend's run_catalog), under OUT where the analysis writes: the bundle and the run
    directory are left as they are. Returns the manifest's path, which load_catalog reads."""
    manifest = {k: bundle.manifest[k] for k in ("name", "entry", "versions", "toolchain") if k in bundle.manifest}
    manifest["kernels"] = [k.to_dict() for k in kernels]
    return write_json(Path(out) / RUN_CATALOGS / bundle.name / MANIFEST, manifest)


def is_bundle(path: str | Path) -> bool:
    """A folder with a manifest (whether it reads is read_bundle's question)."""
    return (Path(path) / MANIFEST).is_file()


def read_bundle(path: str | Path) -> Bundle:
    """Parse BUNDLE/manifest.json (or the manifest.json path itself); one-line UsageError when
    it is missing or malformed."""
    path = Path(path)
    if path.name == MANIFEST and path.is_file():
        path = path.parent
    manifest_file = path / MANIFEST
    if not manifest_file.is_file():
        raise UsageError(f"{path}: not a bundle (no {MANIFEST})")
    manifest = read_json(manifest_file, "no bundle manifest here")
    if not isinstance(manifest, dict):
        raise UsageError(f"{manifest_file}: top level is {type(manifest).__name__}, expected an object")
    missing = [key for key in REQUIRED_KEYS if key not in manifest]
    if missing:
        raise UsageError(f"{manifest_file}: missing key(s) {', '.join(missing)}")
    schema.check(manifest, MANIFEST_SHAPE, str(manifest_file))
    for key, name in named_paths(manifest):
        inside(path, name, f"{manifest_file}: {key}")
    bundle = Bundle(path, manifest)
    catalog_kernels(manifest, manifest_file)  # checked here, so every reader sees the same errors
    if not bundle.module_path.is_file():
        raise UsageError(f"{manifest_file}: module: {manifest['module']} does not exist in the bundle")
    return bundle


# The manifest's shape (artifacts.schema): what align, diagnose, inspect and the runner read
# (attribution.json embeds the same catalog kernels and toolchain). The paths it names are
# checked apart (named_paths, inside): they must stay inside the bundle.
EXTENT = Opt([(int, str)])  # a launch extent: numbers, or symbols where IREE's are dynamic
COUNT = Opt(int)
RESOURCES = {"name?": Opt(str), "file?": Opt(str), "format?": Opt(str), "arch?": Opt(str), "registers?": COUNT,
             "sgpr?": COUNT, "agpr?": COUNT, "shared_bytes?": COUNT, "local_bytes?": COUNT, "stack_bytes?": COUNT,
             "param_bytes?": COUNT, "max_threads_per_block?": COUNT, "spills?": COUNT, "wavefront_size?": COUNT,
             "extra?": Opt(dict)}
CATALOG_KERNEL = {"name": str, "function?": str, "source_ops?": [str], "call_sites?": [str],
                  "launch?": {"grid?": EXTENT, "block?": EXTENT, "dynamic_shared_bytes?": COUNT, "grids?": Opt(dict)},
                  "resources?": RESOURCES, "schedule?": dict, "source_locs?": [str], "source_op_kinds?": [str],
                  "module_paths?": [str], "bytes_moved?": Opt(NUM), "flops?": Opt(NUM),
                  "evaluations?": Map(int)}
# What compare reads of a manifest given as a catalog (--catalog-a), and all a bundle's holds.
TOOLCHAIN = {"source?": Opt(str), "requirements?": Opt([str]), "python?": Opt(str),
             "compiler?": Opt(Map(Opt(str))), "runtime?": Opt(Map(Opt(str)))}
CATALOG_SHAPE = {"name?": str, "entry?": Opt(str), "kernels": [CATALOG_KERNEL],
                 "versions?": Opt(Map(Opt((str, int, float)))), "toolchain?": Opt(TOOLCHAIN)}
MANIFEST_SHAPE = {**CATALOG_SHAPE, "name": str, "frontend": str, "target": str, "entry": str, "module": str,
                  "inputs": [dict], "reference?": Opt([dict]), "rtol?": Opt(NUM), "atol?": Opt(NUM),
                  "binaries?": [str], "ir?": [str], "notes?": [str], "spec?": Opt(dict)}


INSPECTED_SHAPE = {**CATALOG_SHAPE, "module?": str, "binaries?": [str], "target?": Opt(str)}


def read_manifest(path: Path) -> dict[str, Any]:
    """BUNDLE/manifest.json checked for what `inspect` reads of it (module, binaries, kernels,
    target), so that a catalog-only bundle (no inputs, no entry) can be inspected; the paths it
    names are checked to stay inside the bundle."""
    file = Path(path) / MANIFEST
    manifest = read_json(file, "no bundle manifest here")
    schema.check(manifest, INSPECTED_SHAPE, str(file))
    for key, name in named_paths(manifest):
        inside(Path(path), name, f"{file}: {key}")
    return manifest


def named_paths(manifest: dict[str, Any]) -> list[tuple[str, str]]:
    """(key, path) of every file a manifest names: module, binaries, ir, stored inputs and references."""
    named = [("module", manifest["module"])] if isinstance(manifest.get("module"), str) else []
    named += [(key, name) for key in ("binaries", "ir") for name in manifest.get(key, [])]
    named += [(f"{key}[{i}].file", row["file"]) for key in ("inputs", "reference")
              for i, row in enumerate(manifest.get(key) or []) if isinstance(row.get("file"), str)]
    return named


def inside(bundle_dir: Path, name: str, where: str) -> Path:
    """bundle_dir/name, when name is a relative path that stays inside the bundle and passes
    through no symbolic link (an edited manifest, or a file replaced by a link, must not point a
    reader, or the runtime's loader, at a file elsewhere)."""
    rel = Path(name)
    if rel.is_absolute() or ".." in rel.parts or not name:
        raise UsageError(f"{where}: {name!r} is not a path inside the bundle")
    step = Path(bundle_dir)
    for part in rel.parts:  # a link inside the bundle can point anywhere: none is followed
        step = step / part
        if step.is_symlink():
            raise UsageError(f"{where}: {name!r} is a symbolic link; a bundle's files are regular files inside it")
    return bundle_dir / rel


def catalog_kernels(manifest: dict[str, Any], where: Path) -> list[CatalogKernel]:
    """The manifest's kernels; a kernel without 'function' takes its name (older catalogs)."""
    kernels = manifest.get("kernels")
    if not isinstance(kernels, list):
        raise UsageError(f"{where}: \"kernels\": missing or not a list")
    for i, k in enumerate(kernels):
        if not isinstance(k, dict) or not isinstance(k.get("name"), str):
            raise UsageError(f"{where}: kernels[{i}]: not a catalog kernel (no \"name\")")
    schema.check(manifest, CATALOG_SHAPE, str(where))
    return [CatalogKernel.from_dict({"function": k["name"], **k}) for k in kernels]


def load_catalog(path: str | Path | None) -> tuple[list[CatalogKernel] | None, dict[str, Any]]:
    """Catalog kernels and manifest of a bundle directory or its manifest.json; (None, {}) for None.

    Only the manifest is needed (a catalog travels without its module)."""
    if path is None:
        return None, {}
    p = Path(path)
    manifest_path = p / MANIFEST if p.is_dir() else p
    manifest = read_json(manifest_path, "no bundle manifest here")
    if not isinstance(manifest, dict):
        raise UsageError(f"{manifest_path}: top level is {type(manifest).__name__}, expected an object")
    return catalog_kernels(manifest, manifest_path), manifest


def bundle_inputs(bundle: Bundle) -> list[np.ndarray]:
    """The inputs a bundle's entry function is called with, in order (stored, else regenerated)."""
    return [make_input(spec, bundle.path, f"inputs[{i}]") for i, spec in enumerate(bundle.manifest["inputs"])]


def bundle_reference(bundle: Bundle) -> list[np.ndarray] | None:
    """The stored reference outputs, or None when the spec has none or it was too big to store."""
    refs = bundle.manifest.get("reference")
    if not refs or any(not ref.get("file") for ref in refs):
        return None  # a reference is data, never regenerated from a random spec
    return [make_input(ref, bundle.path, f"reference[{i}]") for i, ref in enumerate(refs)]


# ---- writing ------------------------------------------------------------------------------

Reference = Callable[[VariantSpec, list[np.ndarray]], "list[np.ndarray] | None"]


def write_bundle(spec: VariantSpec, built: BuildOutput, build_dir: Path, bundle_dir: Path,
                 cache_key: str, reference: Reference, toolchain: dict[str, Any] | None = None) -> Path:
    """Copy a build into the bundle layout and write manifest.json last (its presence = complete).

    reference(spec, inputs) computes the reference outputs (the build stage runs the spec's
    [reference] function); toolchain is the build's record of its compiler and runtime
    (rootcause.toolchains.toolchain_record)."""
    bundle_dir.mkdir(parents=True, exist_ok=True)
    (bundle_dir / MANIFEST).unlink(missing_ok=True)
    module_name = built.module_path.name
    shutil.copy2(built.module_path, bundle_dir / module_name)
    ir = [_copy(p, build_dir, bundle_dir) for p in built.ir_files]
    binaries = [_copy(p, build_dir, bundle_dir) for p in built.binary_files]
    inputs, arrays, unstored = [], [], []
    for n, ispec in enumerate(spec.inputs if built.inputs is None else built.inputs):
        where = spec.where(f"inputs[{n}]")
        shape, dtype = shape_dtype(ispec, where=where)
        row = {"shape": list(shape), "dtype": str(dtype), "distribution": ispec.distribution,
               "low": ispec.low, "high": ispec.high, "mean": ispec.mean, "std": ispec.std, "seed": ispec.seed,
               "source_file": str(ispec.file) if ispec.file else None, "file": None}
        # decided from shape x dtype: an input too big to store is never made here (the runner
        # regenerates it on the GPU host), so a 1.25 GiB weight costs the build nothing
        if nbytes(ispec, where=where) <= MAX_STORED_BYTES:
            arrays.append(make_input(ispec, where=where))
            if ispec.file:  # the user's data: stored, since nothing regenerates it
                row["file"] = _save(bundle_dir / "inputs" / f"{n}.npy", arrays[-1])
            else:  # drawn from the seed: regenerated where it runs, and checked against this digest
                row["sha256"] = digest(arrays[-1])
        else:
            unstored.append(f"inputs[{n}] {'x'.join(map(str, shape))} {dtype}")
        inputs.append(row)
    notes = list(built.notes)
    ref_rows = None
    if spec.reference is not None and unstored:
        notes.append(f"reference not computed: {', '.join(unstored)} over {MAX_STORED_BYTES >> 20} MB, not made "
                     "at build (the runner regenerates them); the variants' outputs are compared with each other")
    elif spec.reference is not None:
        outs = reference(spec, arrays) or []
        ref_rows = [{"file": _save(bundle_dir / "reference" / f"{n}.npy", o) if o.nbytes <= MAX_STORED_BYTES
                     else None, "shape": list(o.shape), "dtype": str(o.dtype)} for n, o in enumerate(outs)]
    manifest = {
        "rootcause_version": rootcause.__version__, "name": spec.name, "frontend": spec.frontend,
        "target": spec.target, "entry": spec.entry, "module": module_name, "spec": spec.to_dict(),
        "versions": built.versions, "cache_key": cache_key, "inputs": inputs, "reference": ref_rows,
        "rtol": spec.reference.rtol if spec.reference else None,
        "atol": spec.reference.atol if spec.reference else None,
        "kernels": [_relative_resources(k.to_dict(), build_dir) for k in built.kernels],
        "binaries": binaries, "ir": ir, "toolchain": toolchain or {},
        "notes": notes,
    }
    write_json(bundle_dir / MANIFEST, manifest)
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
    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=False)
    write_atomic(path, buf.getvalue())
    return f"{path.parent.name}/{path.name}"
