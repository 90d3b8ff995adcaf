"""Device binaries: the fatbins and cubins module.so holds, and their per-kernel resources."""
from __future__ import annotations

from pathlib import Path

from rootcause.fileio import write_atomic
from rootcause.model import CatalogKernel


def extract_binaries(module_path: Path, out_dir: Path) -> tuple[list[Path], list[str]]:
    """binaries/: each CUDA module's fatbin from module.so, and the cubins inside it.

    Read with parsers.tvm_library and parsers.fatbin, so the files are what the exported
    library really holds (a source-only fallback module has no fatbin and says so).
    """
    from parsers import ParseError, fatbin, tvm_library

    data = module_path.read_bytes()
    try:
        library = tvm_library.read_library(data, str(module_path))
    except ParseError as err:
        return [], [f"device binaries not extracted: {err}"]
    bin_dir = out_dir / "binaries"
    paths: list[Path] = []
    notes: list[str] = []
    cuda = [m for m in library.modules if m.kind == "cuda"]
    for i, module in enumerate(cuda):
        stem = "module" if i == 0 else f"module{i}"
        if module.blob_format != "fatbin":
            notes.append(f"{module_path.name}: CUDA module {i} holds {module.blob_format or 'no binary'}, "
                         "not a fatbin (was libcuda loadable at build time?)")
            continue
        paths.append(write_atomic(bin_dir / f"{stem}.fatbin", module.blob))
        for entry in fatbin.entries(module.blob, f"{stem}.fatbin"):
            if entry.kind == "cubin":
                paths.append(write_atomic(bin_dir / f"{stem}.{entry.arch}.cubin", entry.data))
    return paths, notes


def fill_resources(kernels: list[CatalogKernel], cubins: list[Path], target: str) -> list[str]:
    """Per-kernel resources (registers, shared, local) of the built cubins, via rootcause.inspect."""
    if not cubins:
        return []
    from rootcause import inspect as rc_inspect

    found = rc_inspect.inspect_paths(cubins, arch=target.split(":", 1)[1])
    rows = {}
    for record in found.records:
        rows.setdefault(record.name, record.to_dict())
    for kernel in kernels:
        kernel.resources = rows.get(kernel.name, {})
    missing = [k.name for k in kernels if not k.resources]
    notes = list(found.errors)
    if missing:
        notes.append(f"no resources found in the cubins for: {', '.join(missing)}")
    return notes
