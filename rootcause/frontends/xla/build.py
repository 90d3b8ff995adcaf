"""XLA build: the model exported and compiled in a child process (the model's file is user code,
and jax costs seconds to import), its optimized HLO read into the catalog here.

Bundle layout (out_dir):
- module.jaxexport: jax.export's serialized module (what the runtime compiles where it runs)
- ir/model.stablehlo.mlir: the exported StableHLO
- ir/optimized.hlo.txt: XLA's optimized HLO of that module compiled for the target's platform here,
  with the spec's [xla] options (the catalog is read from it)

One catalog kernel per entry instruction that runs (hlo.thunks): its name is the instruction's,
which XLA's profiler reports (`hlo_op`); source_ops its body's metadata op_names (JAX name
stacks); module_paths the model modules those name; flops from the body's shapes; schedule the
fusion kind and the library that runs it (a custom fusion or custom call: YNNPACK, oneDNN,
cuBLAS).
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from rootcause import child, envs
from rootcause.artifacts import handoff
from rootcause.errors import UsageError
from rootcause.exporters import jax_export
from rootcause.fileio import write_atomic
from rootcause.frontends.xla import hlo
from rootcause.model import BuildOutput, CatalogKernel
from rootcause.spec import model_inputs

MODULE = "module.jaxexport"
STABLEHLO = "ir/model.stablehlo.mlir"
OPTIMIZED = "ir/optimized.hlo.txt"
PLATFORMS = {"llvm": "cpu", "cuda": "cuda", "rocm": "rocm"}


def platform(target: str, where: str = "target") -> str:
    """jax's platform for a spec target: 'llvm' -> cpu, 'cuda:sm_90' -> cuda, 'rocm:gfx942' -> rocm."""
    kind = target.split(":", 1)[0]
    if kind not in PLATFORMS:
        raise UsageError(f"{where}: the XLA frontend needs 'llvm', 'cuda:sm_XX' or 'rocm:gfxNNN', got {target!r}")
    return PLATFORMS[kind]


def build(spec: Any, out_dir: Path) -> BuildOutput:
    out_dir = Path(out_dir)
    (out_dir / "ir").mkdir(parents=True, exist_ok=True)
    if spec.model is None or spec.model.exporter != "jax":
        raise UsageError(f"{spec.where('', 'source')}: the XLA frontend builds JAX models: give a [model] table "
                         "with exporter = \"jax\"")
    plat = platform(spec.target, spec.where("", "target"))
    request = handoff.write_spec_request(out_dir, "xla", spec)
    proc = child.run([envs.user_python(), "-m", "rootcause.frontends.xla.build", str(request), str(out_dir), plat],
                     env=child.python_env())
    log = write_atomic(handoff.log_file(out_dir, "xla"), proc.stdout + proc.stderr)
    doc = child.result(proc, handoff.result_file(out_dir, "xla"),
                       f"{spec.spec_file.name}: the XLA build of '{spec.name}'", log)
    notes: list[str] = []
    hlo_file = out_dir / OPTIMIZED
    kernels = catalog(hlo_file.read_text()) if hlo_file.is_file() else []
    if not hlo_file.is_file():
        notes.append(f"XLA compiles for {plat} where it runs: no {plat} compiler here, so the catalog is empty "
                     "until the run host compiles it")
    ir_files = [out_dir / STABLEHLO] + ([hlo_file] if hlo_file.is_file() else [])
    versions = {**doc["versions"], "python": sys.version.split()[0]}
    return BuildOutput(module_path=out_dir / MODULE, kernels=kernels, ir_files=ir_files, binary_files=[],
                       versions=versions, notes=notes, inputs=model_inputs(spec, doc["arguments"]))


def catalog(text: str) -> list[CatalogKernel]:
    """One CatalogKernel per entry instruction that runs, in program order."""
    comps = hlo.read(text)
    kernels = []
    inherited = _consumers_paths(comps)
    for instr in hlo.thunks(comps):
        work = hlo.work(comps, instr)
        paths = [p for p in (jax_export.module_path(n) for n in work.op_names) if p] or inherited.get(instr.name, [])
        schedule: dict[str, Any] = {"fusion_kind": instr.attr("kind") or instr.opcode}
        if work.library:
            schedule["library"] = work.library
        kernels.append(CatalogKernel(instr.name, instr.name, source_ops=work.op_names,
                                     source_op_kinds=[n.rsplit("/", 1)[-1] for n in work.op_names],
                                     schedule=schedule, flops=work.flops, evaluations=work.evaluations,
                                     module_paths=list(dict.fromkeys(paths))))
    return kernels


def _own_paths(comps: dict[str, hlo.Computation], instr: hlo.Instruction) -> list[str]:
    return [p for p in (jax_export.module_path(n) for n in hlo.work(comps, instr).op_names) if p]


def _consumers_paths(comps: dict[str, hlo.Computation]) -> dict[str, list[str]]:
    """For an entry instruction whose body names no module (XLA's helper fusions, a reduce-window
    it split off a reduction, keep no metadata), the modules of the instructions that consume its
    value: what it computes belongs where its result is used. Resolved in reverse program order, so
    a chain of such helpers takes its last consumer's modules."""
    entry = hlo.entry(comps).instructions
    users: dict[str, list[hlo.Instruction]] = {}
    for instr in entry:
        for operand in instr.operands:
            users.setdefault(operand, []).append(instr)
    found: dict[str, list[str]] = {}
    for instr in reversed(entry):
        if instr.opcode in hlo.NOT_RUN or _own_paths(comps, instr):
            continue
        paths = [p for user in users.get(instr.name, []) for p in (_own_paths(comps, user) or found.get(user.name, []))]
        if paths:
            found[instr.name] = list(dict.fromkeys(paths))
    return found


def _compile(spec: Any, out_dir: Path, plat: str) -> dict[str, Any]:
    """The child's work: export, serialize, and (where this host has the platform) compile."""
    import jax
    import jaxlib

    exported, record = jax_export.export(spec.source, spec.model.factory, platforms=(plat,))
    (out_dir / MODULE).write_bytes(exported.serialize())
    write_atomic(out_dir / STABLEHLO, record.text or "")
    if plat in {d.platform for d in jax.devices()} or plat == "cpu":
        shapes = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in exported.in_avals]
        try:
            compiled = jax.jit(exported.call).lower(*shapes).compile(compiler_options=spec.options.options or None)
        except Exception as err:  # noqa: BLE001  XLA refusing the options is the spec's
            raise UsageError(f"{spec.where('xla', 'options')}: XLA refused the compile: "
                             f"{child.first_error_line(str(err))}") from None
        write_atomic(out_dir / OPTIMIZED, compiled.as_text())
    versions = {"jax": jax.__version__, "jaxlib": jaxlib.__version__, "xla-platform": plat}
    return {"arguments": record.arguments, "versions": versions}


def _main(argv: list[str]) -> int:
    request, out_dir, plat = Path(argv[0]), Path(argv[1]), argv[2]

    def work() -> dict[str, Any]:
        return _compile(handoff.read_spec_request(request), out_dir, plat)

    return child.serve(work, handoff.result_file(out_dir, "xla"))


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
