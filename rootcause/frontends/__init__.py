"""Frontends turn a VariantSpec into a compiled module plus a kernel catalog, and load, run
and profile what they built. rootcause.frontends.base defines the protocol; each frontend is a
package defining FRONTEND. The built-in ones are listed here; any other installed distribution
adds one with an entry point in the group 'rootcause.frontends' (name = "package"), so a new
frontend needs no edit to rootcause.
"""
from __future__ import annotations

import importlib
import sys
from importlib import metadata
from typing import Any

from rootcause.errors import UsageError

FRONTENDS: dict[str, str] = {
    "tvm": "rootcause.frontends.tvm",
    "iree": "rootcause.frontends.iree",
    "xla": "rootcause.frontends.xla",
}
ENTRY_POINT_GROUP = "rootcause.frontends"


_plugins: tuple[tuple[str, ...], dict[str, str]] | None = None  # (sys.path scanned, what was found)


def registered() -> dict[str, str]:
    """name -> the module defining FRONTEND: the built-in ones, then the installed plug-ins
    (a plug-in never replaces a built-in name). The distributions' entry points are scanned once
    per sys.path (a scan takes milliseconds, and the analysis asks for every unit)."""
    global _plugins
    if _plugins is None or _plugins[0] != tuple(sys.path):
        scanned = {e.name: e.value.partition(":")[0] for e in metadata.entry_points(group=ENTRY_POINT_GROUP)}
        _plugins = (tuple(sys.path), scanned)
    return {**FRONTENDS, **{name: module for name, module in _plugins[1].items() if name not in FRONTENDS}}


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


def hooks(name: str) -> list[Any]:
    """The registered frontends' attribute `name` (an optional hook of rootcause.frontends.base),
    in registry order, for those that have it: how the analysis asks frontends without importing one."""
    found = (getattr(get(frontend), name, None) for frontend in names())
    return [hook for hook in found if hook is not None]


def default_device(target: str) -> str:
    """The device a target runs on: 'cuda', 'rocm' or 'cpu'."""
    kind = target.split(":", 1)[0]
    return {"cuda": "cuda", "rocm": "rocm", "hip": "rocm"}.get(kind, "cpu")
