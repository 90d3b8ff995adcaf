"""Run a built bundle on this host: load it, feed inputs, call it, read outputs, time it.

A bundle is a directory with manifest.json (layout: the bundle contract, DESIGN.md). Each
runner module (tvm, iree) exposes `load(bundle, device) -> Session`. A session:

    session.set_inputs(arrays)   copy inputs to the device (outside any timer)
    session.call()               one call of the entry function, synchronised with the device
    session.outputs()            outputs of the last call, as NumPy arrays
    session.timer()              a callable returning seconds per call, measured with device sync

Only runtimes are imported here (tvm.runtime, iree.runtime), never a compiler, so this runs
on a GPU host that has no TVM compiler and no iree-compiler.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Protocol

import numpy as np

from rootcause.errors import UsageError
from rootcause.inputs import make_input


@dataclass
class Bundle:
    """A bundle directory and its parsed manifest."""

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


_REQUIRED = ("frontend", "module", "inputs")


def read_bundle(path: str | Path) -> Bundle:
    """Parse BUNDLE/manifest.json; UsageError (one line) when it is missing or malformed."""
    path = Path(path)
    manifest_file = path / "manifest.json"
    if not manifest_file.is_file():
        raise UsageError(f"{path}: not a bundle (no manifest.json)")
    try:
        manifest = json.loads(manifest_file.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise UsageError(f"{manifest_file}: invalid JSON: {err}") from None
    if not isinstance(manifest, dict):
        raise UsageError(f"{manifest_file}: top level is {type(manifest).__name__}, expected an object")
    missing = [key for key in _REQUIRED if key not in manifest]
    if missing:
        raise UsageError(f"{manifest_file}: missing key(s) {', '.join(missing)}")
    if manifest["frontend"] not in ("tvm", "iree"):
        raise UsageError(f"{manifest_file}: frontend: unknown {manifest['frontend']!r} (tvm|iree)")
    bundle = Bundle(path, manifest)
    if not bundle.module_path.is_file():
        raise UsageError(f"{manifest_file}: module: {manifest['module']} does not exist in the bundle")
    return bundle


def bundle_inputs(bundle: Bundle) -> list[np.ndarray]:
    """The inputs a bundle's entry function is called with, in order."""
    return [make_input(spec, bundle.path, f"inputs[{i}]") for i, spec in enumerate(bundle.manifest["inputs"])]


def bundle_reference(bundle: Bundle) -> list[np.ndarray] | None:
    """The stored reference outputs, or None when the spec has none or it was too big to store."""
    refs = bundle.manifest.get("reference")
    if not refs or any(not ref.get("file") for ref in refs):
        return None  # a reference is data, never regenerated from a random spec
    return [make_input(ref, bundle.path, f"reference[{i}]") for i, ref in enumerate(refs)]


class Session(Protocol):
    bundle: Bundle
    device: str

    def set_inputs(self, arrays: list[np.ndarray]) -> None: ...
    def call(self) -> None: ...
    def outputs(self) -> list[np.ndarray]: ...
    def timer(self, number: int = 10) -> Callable[[], float]: ...


def default_device(bundle: Bundle) -> str:
    """The device a bundle's target runs on: 'cuda', 'rocm' or 'cpu'."""
    kind = bundle.target.split(":", 1)[0]
    return {"cuda": "cuda", "rocm": "rocm", "hip": "rocm"}.get(kind, "cpu")


def load(bundle: Bundle | str | Path, device: str | None = None) -> Session:
    """Load a bundle with the runner of its frontend, on `device` (default: from its target)."""
    if not isinstance(bundle, Bundle):
        bundle = read_bundle(bundle)
    device = device or default_device(bundle)
    if bundle.frontend == "tvm":
        from rootcause.runners import tvm as runner
    else:
        from rootcause.runners import iree as runner
    return runner.load(bundle, device)
