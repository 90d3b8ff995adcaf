"""PyTorch models: torch.export, decomposed to core ATen, with the parameters made arguments.

A compiler gets the model's weights as arguments (role 'weight'), not as constants: the bundle
then carries no weight (the runner draws them from the spec's seed) and both compilers see the
same function. Buffers (a RoPE table, batch-norm statistics) stay constants: they are part of
what the model computes, not something it learned.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from rootcause.errors import UsageError
from rootcause.exporters import Exported, failure, load_factory


def export(source: Path, factory: str) -> tuple[Any, Exported]:
    """(ExportedProgram whose parameters are user inputs, its arguments and op module paths)."""
    import torch

    made = load_factory(source, factory)
    if not (isinstance(made, tuple) and len(made) == 2 and isinstance(made[0], torch.nn.Module)):
        raise UsageError(f"{source}: {factory}() must return (torch.nn.Module, example_inputs), got "
                         f"{type(made).__name__}")
    module, example = made
    example = tuple(example) if isinstance(example, (tuple, list)) else (example,)
    if not all(isinstance(t, torch.Tensor) for t in example):
        raise UsageError(f"{source}: {factory}()'s example inputs must be tensors")
    try:
        program = torch.export.export(module.eval(), example).run_decompositions()
    except Exception as err:  # noqa: BLE001  torch.export's own diagnosis of the model
        raise failure(source, "torch.export", err) from None
    program, arguments = _weights_as_inputs(program)
    return program, Exported(arguments, module_paths(program), versions={"torch": torch.__version__})


def _weights_as_inputs(program: Any) -> tuple[Any, list[dict[str, Any]]]:
    import torch
    from torch.export import graph_signature as gs

    specs, arguments = [], []
    placeholders = {n.name: n for n in program.graph.nodes if n.op == "placeholder"}
    for spec in program.graph_signature.input_specs:
        role = {gs.InputKind.PARAMETER: "weight", gs.InputKind.USER_INPUT: "input"}.get(spec.kind)
        if role == "weight":
            spec = gs.InputSpec(gs.InputKind.USER_INPUT, spec.arg, None)
        specs.append(spec)
        if role is not None:
            value = placeholders[spec.arg.name].meta["val"]
            arguments.append({"name": spec.arg.name, "shape": [int(d) for d in value.shape],
                              "dtype": str(value.dtype).removeprefix("torch."), "role": role})
    signature = gs.ExportGraphSignature(specs, program.graph_signature.output_specs)
    params = {s.target for s in program.graph_signature.input_specs if s.kind == gs.InputKind.PARAMETER}
    state = {k: v for k, v in program.state_dict.items() if k not in params}
    rewritten = torch.export.ExportedProgram(
        root=program.graph_module, graph=program.graph, graph_signature=signature, state_dict=state,
        range_constraints=program.range_constraints, module_call_graph=[], example_inputs=None,
        constants=program.constants)
    return rewritten, arguments


def module_paths(program: Any) -> dict[str, str]:
    """FX node name -> the innermost module it was traced in ('layers.3.mlp.down'); '' (the
    model itself) is left out."""
    out = {}
    for node in program.graph.nodes:
        stack = node.meta.get("nn_module_stack") or {}
        path = next(reversed(stack.values()), ("",))[0]
        if node.op == "call_function" and path:
            out[node.name] = path
    return out


def located(program: Any, paths: dict[str, str]) -> None:
    """Give each op the module path as its innermost location, so that it survives into a
    compiler's dispatches: the MLIR importers turn a node's stack trace into a file location,
    and a frame whose file is 'layers.3.mlp.down' (line 0) reads back as that path."""
    for node in program.graph.nodes:
        if node.name in paths:
            trace = node.meta.get("stack_trace") or ""
            node.meta["stack_trace"] = f'{trace}\n  File "{paths[node.name]}", line 0, in {node.name}\n'
