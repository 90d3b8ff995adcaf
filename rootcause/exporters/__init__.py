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
cheaply. The model's file is user code and torch costs seconds to import: a frontend runs an export
in a child (TVM in its build worker, IREE in `python -m rootcause.frontends.iree.model`).
"""
from __future__ import annotations

import re
import runpy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rootcause.child import first_error_line, user_place
from rootcause.errors import UsageError

EXPORTERS = ("torch", "jax")


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


def failure(source: Path, what: str, err: BaseException) -> UsageError:
    """The one line a framework's or importer's refusal of the model becomes: bad input (the
    model uses what the exporter or compiler's importer does not take), quoting its first error line."""
    return UsageError(f"{source}: {what} failed: {first_error_line(str(err) or type(err).__name__)}")


_INDEX = re.compile(r"(?<=\.)\d+(?=\.|$)|^\d+(?=\.)")


def pattern(path: str) -> str:
    """A module path with its repeat indices as '*': 'layers.3.mlp.down' -> 'layers.*.mlp.down'."""
    return _INDEX.sub("*", path)


def collapse(paths: list[str]) -> list[str]:
    """The distinct patterns of paths, in first-seen order."""
    return list(dict.fromkeys(pattern(p) for p in paths if p))
