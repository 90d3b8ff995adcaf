"""IREE frontend: compile a spec's MLIR with iree-compile and catalog every dispatch.

One iree-compile run writes most of what the catalog is read from (out_dir layout):
- module.vmfb
- ir/configured_<module>_<executable>.mlir (<module>: the MLIR module's name, 'module' when unnamed): translation_info (pipeline, workgroup_size,
  subgroup_size) on the export's func.func and lowering_config on its root op
- ir/<module>_<executable>.mlir: the executable sources (--iree-hal-dump-executable-sources-to)
- ir/phases/<stem>.<n>.<phase>.mlir: flow, stream and hal phases (--dump-compilation-phases-to)
- ir/flow_located.mlir: a second run to the flow phase with --mlir-print-debuginfo: the input
  locations of every dispatch's ops (catalog source_locs)
- ir/before_dedup.mlir: the module just before iree-flow-deduplicate-executables
  (--mlir-print-ir-before), which still names every call site's own dispatch
- binaries/<module>_<executable>_<variant>.{ptx,hsaco,so}
- with [iree] substitute_configurations: ir/substitutions/<executable>.mlir (the file handed to
  --iree-hal-substitute-executable-configuration, renamed to the executable it replaces),
  copied over ir/configured_<module>_<executable>.mlir (IREE dumps configurations before it
  substitutes them); IREE's own dump is kept as ir/unsubstituted/configured_<module>_<executable>.mlir

Call sites come from the flow phase (flow.dispatch ops per function, closed over util.call);
the pre-dedup names from before_dedup.mlir, zipped in op order per function, so a deduplicated
executable serving prefill_bs2 and prefill_bs8 gets source_ops 'prefill_bs2/prefill_bs2$async_
dispatch_0_..' and 'prefill_bs8/prefill_bs8$async_dispatch_0_..' and both call sites. Static
workgroup counts come from hal.command_buffer.dispatch in the hal phase.

The text is read by rootcause.frontends.iree.ir_text; compile.py holds the iree-compile command line,
configs.py the configured dumps and their substitution, catalog.py the catalog and the
per-kernel resources of the dumped binaries.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from rootcause.frontends.iree import ir_text
from rootcause.artifacts import handoff
from rootcause.child import first_error_line, tied
from rootcause.errors import UsageError
from rootcause.frontends.iree.catalog import catalog
from rootcause.frontends.iree.catalog import LOCATED_FLOW
from rootcause.frontends.iree.compile import (DEDUP_PASS, KEEP_PHASES, check_flags, compile_command,
                                             compile_error, compiler_version, locations_command)
from rootcause.frontends.iree.configs import check_substitutions, prepare_substitutions
from rootcause.frontends.iree.model import exported_spec, module_paths
from rootcause.model import BuildOutput


def check_syntax(source: Path) -> None:
    """UsageError when the source is not MLIR that parses (the user's input is wrong: exit 2),
    so that what iree-compile rejects afterwards is the compiler's failure (exit 3). Parsed with
    the compiler's own MLIR bindings, every IREE input dialect registered; a dialect they do not
    know is left for iree-compile to judge."""
    try:
        from iree.compiler import ir
    except ImportError:  # a toolchain without the bindings: iree-compile alone judges
        return
    try:
        ir.Module.parse(source.read_text(encoding="utf-8", errors="replace"), ir.Context())
    except Exception as err:  # noqa: BLE001  MLIRError, and ValueError for bad text
        text = str(err)
        if "dialect" in text and ("unregistered" in text or "not loaded" in text):
            return
        line = first_error_line(text.replace('"-":', f"{source.name}:"))
        raise UsageError(f"{source}: not valid MLIR: {line}") from None


def build(spec: Any, out_dir: Path) -> BuildOutput:
    """Compile spec.source with iree-compile into out_dir and catalog its dispatches."""
    out_dir = Path(out_dir)
    ir = out_dir / "ir"
    bins = out_dir / "binaries"
    for d in (ir, bins):
        d.mkdir(parents=True, exist_ok=True)
    exported = None
    if spec.model is not None:
        spec, exported = exported_spec(spec, out_dir)
    check_syntax(spec.source)
    check_flags(spec)
    substitutions = prepare_substitutions(spec, ir)
    handoff.note_step(out_dir, "iree-compile")
    cmd = compile_command(spec, out_dir, substitutions)
    proc = subprocess.run(cmd, capture_output=True, text=True, **tied())
    before, log = ir_text.ir_before(proc.stderr, DEDUP_PASS)
    if proc.returncode != 0:
        (out_dir / "iree-compile.log").write_text(proc.stderr)
        raise compile_error(spec.source, log, out_dir / "iree-compile.log")
    notes: list[str] = check_substitutions(spec, substitutions, log, ir)
    if log.strip():
        (out_dir / "iree-compile.log").write_text(log)
        notes.append("iree-compile printed diagnostics: see iree-compile.log")
    if before:
        (ir / "before_dedup.mlir").write_text(before)
    else:
        notes.append(f"no IR printed before {DEDUP_PASS}: source_ops use post-dedup dispatch names")
    for p in (ir / "phases").glob("*.mlir"):
        if p.stem.split(".")[-1] not in KEEP_PHASES:
            p.unlink()
    handoff.note_step(out_dir, "iree-compile --compile-to=flow (source locations)")
    located = subprocess.run(locations_command(spec, ir / LOCATED_FLOW), capture_output=True, text=True,
                             **tied())
    if located.returncode != 0:
        (ir / LOCATED_FLOW).unlink(missing_ok=True)
        notes.append("no source locations: iree-compile --compile-to=flow --mlir-print-debuginfo failed: "
                     + (located.stderr.strip().splitlines() or ["no output"])[-1])

    handoff.note_step(out_dir, "reading the dispatches (catalog)")
    kernels = catalog(out_dir, spec.target, notes)
    source_text = spec.source.read_text(errors="replace")
    for kernel in kernels:
        kernel.source_op_kinds = ir_text.ops_at(source_text, spec.source.name, kernel.source_locs)
    versions = {"iree-compiler": compiler_version(), "python": sys.version.split()[0]}
    if exported is not None:
        # a deduplicated executable's body keeps its first site's locations; its calls keep each site's
        located = ir / LOCATED_FLOW
        text = located.read_text() if located.is_file() else ""
        scopes = bool(spec.model and spec.model.exporter == "jax")  # jax: module paths are in the name stacks
        sites = ir_text.call_site_locations(text, scopes=scopes) if text else {}
        if text and scopes:
            bodies = ir_text.dispatch_locations(text, str(located), scopes=True)
        else:
            bodies = {k.function: k.source_locs for k in kernels}
        for kernel in kernels:
            locs = bodies.get(kernel.function, []) + sites.get(kernel.function, [])
            kernel.module_paths = module_paths(locs, exported.module_paths)
        versions.update(exported.versions)
    if any(k.resources.get("format") == "vmfb/ptx->ptxas" for k in kernels):
        from rootcause import ptxas
        versions["ptxas"] = ptxas.ptxas_version() or "unknown"
    ir_files = [spec.source] if exported is not None else []  # the exported model.mlir
    ir_files += sorted(ir.glob("*.mlir")) + sorted((ir / "phases").glob("*.mlir"),
                                                   key=lambda p: int(p.stem.split(".")[-2]))
    ir_files += sorted((ir / "substitutions").glob("*")) + sorted((ir / "unsubstituted").glob("*.mlir"))
    return BuildOutput(module_path=out_dir / "module.vmfb", kernels=kernels, ir_files=ir_files,
                       binary_files=sorted(p for p in bins.iterdir() if p.is_file()),
                       versions=versions, notes=notes, inputs=None if exported is None else spec.inputs)
