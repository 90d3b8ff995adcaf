"""Frontends turn a VariantSpec into a compiled module plus a kernel catalog, and load, run
and profile what they built. rootcause.frontends.base defines the protocol; each frontend is a
package defining FRONTEND. The built-in ones are listed here; any other installed distribution
adds one with an entry point in the group 'rootcause.frontends' (name = "package"), so a new
frontend needs no edit to rootcause.
"""
from __future__ import annotations

import importlib
from importlib import metadata
from typing import Any

from rootcause.errors import UsageError

FRONTENDS: dict[str, str] = {
    "tvm": "rootcause.frontends.tvm",
    "iree": "rootcause.frontends.iree",
}
ENTRY_POINT_GROUP = "rootcause.frontends"


def registered() -> dict[str, str]:
    """name -> the module defining FRONTEND: the built-in ones, then the installed plug-ins
    (a plug-in never replaces a built-in name)."""
    found = dict(FRONTENDS)
    for entry in metadata.entry_points(group=ENTRY_POINT_GROUP):
        found.setdefault(entry.name, entry.value.partition(":")[0])
    return found


def names() -> tuple[str, ...]:
    return tuple(registered())


def module_of(name: str) -> str:
    """The module that defines the frontend's FRONTEND (a package's __init__ for a package)."""
    module = FRONTENDS.get(name) or registered().get(name)
    if module is None:
        raise UsageError(f"unknown frontend {name!r} (known: {', '.join(names())})")
    return module


def get(name: str) -> Any:
    """The registered frontend object (a rootcause.frontends.base.Frontend)."""
    return importlib.import_module(module_of(name)).FRONTEND


def default_device(target: str) -> str:
    """The device a target runs on: 'cuda', 'rocm' or 'cpu'."""
    kind = target.split(":", 1)[0]
    return {"cuda": "cuda", "rocm": "rocm", "hip": "rocm"}.get(kind, "cpu")
