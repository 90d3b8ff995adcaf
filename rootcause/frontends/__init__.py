"""Frontends turn a VariantSpec into a compiled module plus a kernel catalog, and load, run
and profile what they built. rootcause.frontends.base defines the protocol; each frontend is a
package here, registered by one line of FRONTENDS (name -> module defining FRONTEND).
"""
from __future__ import annotations

import importlib
from typing import Any

from rootcause.errors import UsageError

FRONTENDS: dict[str, str] = {
    "tvm": "rootcause.frontends.tvm",
    "iree": "rootcause.frontends.iree",
}
_BUILTIN = ("tvm", "iree")  # their spec tables are parsed by rootcause.spec itself


def names() -> tuple[str, ...]:
    return tuple(FRONTENDS)


def is_builtin(name: str) -> bool:
    return name in _BUILTIN


def get(name: str) -> Any:
    """The registered frontend object (a rootcause.frontends.base.Frontend)."""
    if name not in FRONTENDS:
        raise UsageError(f"unknown frontend {name!r} (known: {', '.join(FRONTENDS)})")
    return importlib.import_module(FRONTENDS[name]).FRONTEND


def default_device(target: str) -> str:
    """The device a target runs on: 'cuda', 'rocm' or 'cpu'."""
    kind = target.split(":", 1)[0]
    return {"cuda": "cuda", "rocm": "rocm", "hip": "rocm"}.get(kind, "cpu")
