"""JAX models: jax.export of the jitted function, StableHLO text out.

The factory returns (function, params, example_inputs) with function(params, *inputs); the exported
function takes the params' leaves first (role 'weight', named by their pytree path), then the
inputs. jax.export keeps the MLIR module's name (`module @jit_<function>`).

Module paths come from JAX's name stack, which jax.export writes into each op's location
(`loc("jit(model)/blocks.0/mlp/dot_general")`): the scopes a model opens with jax.named_scope, or
that Flax opens per module, joined with '.' ('blocks.0.mlp'); the transformations (`jit(model)`)
and the primitive are not part of it. A function that opens no scope has no module paths.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from rootcause.errors import UsageError
from rootcause.exporters import Exported, failure, load_factory


def to_stablehlo(source: Path, factory: str) -> Exported:
    return export(source, factory)[1]


def export(source: Path, factory: str, platforms: tuple[str, ...] | None = None) -> tuple[Any, Exported]:
    """jax.export of the model: (jax's Exported, which serializes, and the export record)."""
    import jax

    made = load_factory(source, factory)
    if not (isinstance(made, tuple) and len(made) == 3 and callable(made[0])):
        raise UsageError(f"{source}: {factory}() must return (function, params, example_inputs), got "
                         f"{type(made).__name__}")
    function, params, example = made
    example = tuple(example) if isinstance(example, (tuple, list)) else (example,)
    leaves, tree = jax.tree_util.tree_flatten_with_path(params)
    arguments = [_row(jax.tree_util.keystr(path).strip("[]'.").replace("']['", "."), leaf, "weight")
                 for path, leaf in leaves]
    arguments += [_row(f"input{i}", x, "input") for i, x in enumerate(example)]
    n = len(leaves)

    def flat(*args: Any) -> Any:
        return function(jax.tree_util.tree_unflatten(tree, args[:n]), *args[n:])

    flat.__name__ = getattr(function, "__name__", "model")
    shapes = [jax.ShapeDtypeStruct(tuple(r["shape"]), r["dtype"]) for r in arguments]
    try:
        exported = jax.export.export(jax.jit(flat), platforms=platforms)(*shapes)
        text = exported.mlir_module()
    except Exception as err:  # noqa: BLE001  jax's own diagnosis of the function
        raise failure(source, "jax.export", err) from None
    return exported, Exported(arguments, name_stack_paths(text), text=text, versions={"jax": jax.__version__})


_QUOTED = re.compile(r'"([^"\\]+)"')
_TRANSFORM = re.compile(r"^[\w.-]+\(.*\)$")  # jit(model), vmap(f), transpose(jvp(f))


def name_stack_paths(text: str) -> dict[str, str]:
    """Each name-stack location in the exported text -> the module path it names (module doc)."""
    out = {}
    for name in set(_QUOTED.findall(text)):
        path = module_path(name)
        if path:
            out[name] = path
    return out


CALL_EXPORTED = "call_exported"  # the scope jax opens where a deserialized export is called


def module_path(name: str) -> str | None:
    """The module path one name stack names ('jit(model)/blocks.0/mlp/dot_general' ->
    'blocks.0.mlp'), or None for what is no op's name stack (an argument's or a file's location,
    an op outside every scope). A name stack that passes through a called export
    ('jit(call)/call_exported/jit(model)/...', XLA's names of a deserialized jax.export) counts
    from inside it."""
    parts = name.split("/")
    if CALL_EXPORTED in parts:
        parts = parts[len(parts) - parts[::-1].index(CALL_EXPORTED):]
    if len(parts) < 2 or not _TRANSFORM.match(parts[0]):
        return None
    scopes = [p for p in parts[1:-1] if not _TRANSFORM.match(p)]
    return ".".join(scopes) or None


def _row(name: str, value: Any, role: str) -> dict[str, Any]:
    return {"name": name or role, "shape": [int(d) for d in value.shape], "dtype": str(value.dtype), "role": role}
