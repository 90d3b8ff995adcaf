"""Source loading: the IRModule of a spec's TVMScript or Python file."""
from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import Any

from rootcause.child import first_error_line
from rootcause.errors import UsageError
from rootcause.exporters import Exported, failure
from rootcause.spec import VariantSpec

_TVMSCRIPT_RE = re.compile(r"^@(I|tvm\.script\.ir|ir)\.ir_module", re.M)


def load_source(spec: VariantSpec) -> Any:
    """The IRModule of a TVMScript file, or of a Python file exposing Module / mod / a factory."""
    import tvm

    text = spec.source.read_text(encoding="utf-8")
    if _TVMSCRIPT_RE.search(text):
        mod = parse_tvmscript(text, spec.source)
    else:
        mod = _from_python(spec.source)
    if not isinstance(mod, tvm.IRModule):
        raise UsageError(f"{spec.source}: does not define an IRModule")
    if spec.entry not in [gv.name_hint for gv in mod.get_global_vars()]:
        raise UsageError(f"{spec.where('', 'entry')}: no function \"{spec.entry}\" in {spec.source.name}; "
                         f"functions: {', '.join(sorted(gv.name_hint for gv in mod.get_global_vars()))}")
    return mod


def parse_tvmscript(text: str, file: Path) -> Any:
    """Parse TVMScript text (leading import lines dropped) with I, R, T bound and s_tir on."""
    import tvm
    from tvm.script import ir as I, relax as R, tirx as T

    lines = text.splitlines()
    start = 0
    while start < len(lines) and (not lines[start].strip() or lines[start].startswith(("from ", "import ", "#"))):
        start += 1
    try:
        return tvm.script.from_source("\n".join(lines[start:]) + "\n", extra_vars=dict(I=I, R=R, T=T),
                                      s_tir=True)
    except Exception as err:  # TVM raises DiagnosticError and others; one line is what we owe
        raise UsageError(f"{file}: TVMScript does not parse: {first_error_line(str(err) or type(err).__name__)}") \
            from None


def _from_python(path: Path) -> Any:
    import runpy

    import tvm

    try:
        namespace = runpy.run_path(str(path))
    except Exception as err:
        raise UsageError(f"{path}: running it failed: {type(err).__name__}: {err}") from None
    for key in ("Module", "mod"):
        if isinstance(namespace.get(key), tvm.IRModule):
            return namespace[key]
    for key in ("make_module", "get_module", "module", "build_module"):
        if callable(namespace.get(key)):
            return namespace[key]()
    raise UsageError(f"{path}: defines no IRModule 'Module' or 'mod' and no factory "
                     "make_module()/get_module()")


def from_model(spec: VariantSpec) -> tuple[Any, Exported]:
    """The Relax module of a [model] source and its export record, whose module_paths are keyed
    by the entry's binding names ('lv7' -> 'layers.0.mlp.gate'), the names provenance ids carry."""
    assert spec.model is not None
    if spec.model.exporter != "torch":
        raise UsageError(f"{spec.where('model', 'exporter')}: the tvm frontend takes PyTorch models "
                         f"(torch.export into Relax); build a {spec.model.exporter} model with the iree frontend")
    if spec.entry != "main":
        raise UsageError(f"{spec.where('', 'entry')}: an exported PyTorch model's function is 'main'")
    if spec.toolchain and importlib.util.find_spec("torch") is None:
        # TVM's importer reads the torch.export program in its own process (IREE's reads text)
        raise UsageError(f"{spec.where('', 'toolchain')}: TVM imports the PyTorch export in the build's own "
                         f"python, and this toolchain's environment has no torch: add the torch release "
                         f"you export with (e.g. \"torch==2.13.0\") to the variant's toolchain")
    import tvm
    from tvm.relax.frontend.torch.exported_program_translator import ExportedProgramImporter

    from rootcause.exporters import torch_export

    program, exported = torch_export.export(spec.source, spec.model.factory)
    importer = ExportedProgramImporter()
    try:
        mod = importer.from_exported_program(program, False, False, False, None)
    except Exception as err:  # noqa: BLE001  an op TVM's importer does not convert is the model's limit
        raise failure(spec.source, "TVM's PyTorch importer", err) from None
    exported.module_paths = _binding_paths(mod["main"], importer.env, exported.module_paths)
    exported.versions["apache-tvm"] = tvm.__version__
    return mod, exported


def _binding_paths(func: Any, env: dict[Any, Any], node_paths: dict[str, str]) -> dict[str, str]:
    """Relax binding name -> module path. The importer converts FX nodes in order and binds each
    node's result last, so the bindings up to a node's result var are that node's ops."""
    from tvm import relax

    owner = {var: node.name for node, var in env.items() if isinstance(var, relax.Var)}
    out: dict[str, str] = {}
    pending: list[str] = []
    for block in func.body.blocks:
        for binding in block.bindings:
            pending.append(binding.var.name)
            node = owner.get(binding.var)
            if node is None:
                continue
            if node in node_paths:
                out.update(dict.fromkeys(pending, node_paths[node]))
            pending = []
    return out
