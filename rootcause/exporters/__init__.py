"""Exporters: a model as users have it (a PyTorch nn.Module or a JAX function in a Python file)
turned into what a compiler takes, with the real exporters.

A spec names such a model with `source = "model.py"` and a `[model]` table (rootcause.spec.ModelSpec).
The file defines a factory (default `make_model`) that returns:
- torch: `(module, example_inputs)`: an nn.Module and a tuple of example tensors;
- jax:   `(function, params, example_inputs)`: `function(params, *inputs)`, params a pytree of arrays.

Every export returns the same plain data (`Exported`): the function's arguments in order, each a
row {name, shape, dtype, role}, where role 'weight' is a parameter the model learned (drawn from
the spec's seed, never read from a checkpoint) and 'input' one of the example inputs; and
`module_paths`, for each name the exporter gives an op, the module it sits in ('layers.3.mlp.down').

The torch and jax modules import their framework inside their functions, so this package imports
cheaply; `python -m rootcause.exporters` runs an export as a child (child.py's protocol), because
running the model's file is running user code and importing torch costs seconds.
"""
from __future__ import annotations

import re
import runpy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rootcause.errors import UsageError

EXPORTERS = ("torch", "jax")
ROLES = ("weight", "input")


@dataclass
class Exported:
    """What an export hands on: the source text (MLIR) where one is written, and its arguments."""

    arguments: list[dict[str, Any]]  # {name, shape, dtype, role} in call order
    module_paths: dict[str, str] = field(default_factory=dict)  # op name -> module path
    text: str | None = None  # the MLIR module, for compilers that read text
    versions: dict[str, str] = field(default_factory=dict)  # exporter packages and their versions

    def to_dict(self) -> dict[str, Any]:
        return {"arguments": self.arguments, "module_paths": self.module_paths, "versions": self.versions}


def load_factory(source: Path, factory: str) -> Any:
    """Run the model's file and call its factory; a failure inside it is the model's (UsageError
    naming the file and line)."""
    from rootcause.child import user_place

    try:
        namespace = runpy.run_path(str(source), run_name="rootcause_model")
    except Exception as err:  # noqa: BLE001  the user's file: any failure is its own
        raise UsageError(f"{source}: running it failed at {user_place(err)}: {type(err).__name__}: {err}") from None
    make = namespace.get(factory)
    if not callable(make):
        raise UsageError(f"{source}: defines no function '{factory}' (the [model] factory)")
    try:
        return make()
    except Exception as err:  # noqa: BLE001
        raise UsageError(f"{source}: {factory}() failed at {user_place(err)}: {type(err).__name__}: {err}") from None


_INDEX = re.compile(r"(?<=\.)\d+(?=\.|$)|^\d+(?=\.)")


def pattern(path: str) -> str:
    """A module path with its repeat indices as '*': 'layers.3.mlp.down' -> 'layers.*.mlp.down'."""
    return _INDEX.sub("*", path)


def collapse(paths: list[str]) -> list[str]:
    """The distinct patterns of paths, in first-seen order."""
    return list(dict.fromkeys(pattern(p) for p in paths if p))
