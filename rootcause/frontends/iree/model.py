"""[model] sources for IREE: the model exported to MLIR in a child process (the model's file is
user code, and torch or jax cost seconds to import), then compiled like any MLIR source.

- torch: torch.export (rootcause.exporters.torch_export), imported to the torch dialect by the
  FX importer iree-base-compiler ships (iree.compiler.extras.fx_importer); each op's innermost
  location is its module path, so a dispatch's source_locs name the modules it computes.
  Under another release's compiler (a `toolchain` variant) the importer is still the user's
  iree-base-compiler: the torch dialect it writes is what that release is given to compile.
- jax: jax.export's StableHLO (rootcause.exporters.jax_export), the module's own name kept.
"""
from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any

from rootcause import child, envs
from rootcause.artifacts import handoff
from rootcause.exporters import Exported
from rootcause.fileio import write_atomic
from rootcause.spec import VariantSpec, model_inputs

INPUT_TYPES = {"torch": "torch", "jax": "stablehlo"}
SOURCE = "model.mlir"


def exported_spec(spec: VariantSpec, out_dir: Path) -> tuple[VariantSpec, Exported]:
    """spec with its source replaced by the exported MLIR (out_dir/model.mlir), its inputs by the
    model's, and its input type set; plus the export record."""
    assert spec.model is not None
    request = handoff.write_spec_request(out_dir, "export", spec)
    # the user's python, also when a toolchain environment builds: the framework is installed there
    proc = child.run([envs.user_python(), "-m", "rootcause.frontends.iree.model", str(request), str(out_dir)],
                     env=child.python_env())
    log = write_atomic(handoff.log_file(out_dir, "export"), proc.stdout + proc.stderr)
    doc = child.result(proc, handoff.result_file(out_dir, "export"), f"{spec.spec_file.name}: the {spec.model.exporter} export of '{spec.name}'", log)
    exported = Exported(doc["arguments"], doc["module_paths"], versions=doc["versions"])
    options = dataclasses.replace(spec.options, input_type=spec.options.input_type or INPUT_TYPES[spec.model.exporter])
    return dataclasses.replace(spec, source=out_dir / SOURCE, options=options,
                               inputs=model_inputs(spec, exported.arguments)), exported


def module_paths(locs: list[str], exported: dict[str, str]) -> list[str]:
    """The module paths a dispatch's locations name, in order: 'layers.0.mlp.gate:0:0' (torch,
    written by torch_export.located) or a name stack 'jit(model)/blocks.0/mlp/dot_general' (jax);
    exported is the export's op name -> module path."""
    known = set(exported.values())
    paths = (exported.get(loc) or (loc.rsplit(":", 2)[0] if loc.endswith(":0:0") else "") for loc in locs)
    return list(dict.fromkeys(p for p in paths if p in known))


def _export(spec: VariantSpec, out_dir: Path) -> dict[str, Any]:
    assert spec.model is not None
    if spec.model.exporter == "jax":
        from rootcause.exporters import jax_export

        exported = jax_export.to_stablehlo(spec.source, spec.model.factory)
    else:
        exported = _torch_mlir(spec)
    write_atomic(out_dir / SOURCE, exported.text or "")
    return exported.to_dict()


def _torch_mlir(spec: VariantSpec) -> Exported:
    import torch  # noqa: F401  (before the importer, which imports it too)
    from iree.compiler import ir
    from iree.compiler.extras.fx_importer import FxImporter

    from rootcause.exporters import torch_export

    program, exported = torch_export.export(spec.source, spec.model.factory)
    torch_export.located(program, exported.module_paths)
    context = ir.Context()
    context.allow_unregistered_dialects = True  # the torch dialect is iree-compile's to parse
    importer = FxImporter(context=context, config_check=False)
    importer.import_program(program, func_name=spec.options.function or spec.entry)
    exported.text = importer.module.operation.get_asm(enable_debug_info=True)
    return exported


def _main(argv: list[str]) -> int:
    request, out_dir = Path(argv[0]), Path(argv[1])

    def work() -> dict[str, Any]:
        return _export(handoff.read_spec_request(request), out_dir)

    return child.serve(work, handoff.result_file(out_dir, "export"))


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
