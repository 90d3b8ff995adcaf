"""Frontends turn a VariantSpec into a compiled module plus a kernel catalog.

Each frontend module (tvm, iree) exposes `build(spec, out_dir: Path) -> BuildOutput`. Paths in
BuildOutput are inside out_dir; the bundle stage copies them into the bundle layout.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rootcause.model import CatalogKernel


@dataclass
class BuildOutput:
    module_path: Path  # module.so (TVM) or module.vmfb (IREE)
    kernels: list[CatalogKernel] = field(default_factory=list)
    ir_files: list[Path] = field(default_factory=list)  # IR dumps, in pipeline order
    binary_files: list[Path] = field(default_factory=list)  # extracted device binaries
    versions: dict[str, str] = field(default_factory=dict)  # compiler and tool versions
    notes: list[str] = field(default_factory=list)  # what could not be filled, said plainly


def frontend(name: str) -> Any:
    """The frontend module for a spec's `frontend` key ('tvm' -> rootcause.frontends.tvm)."""
    return importlib.import_module(f"rootcause.frontends.{name}")
