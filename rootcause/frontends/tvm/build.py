"""TVM Relax frontend: build a VariantSpec into module.so plus a kernel catalog.

The build runs in a subprocess (`python -m rootcause.frontends.tvm.build REQUEST OUT`): TVM decides
whether it can make cubins when it first loads its CUDA runtime, so on a GPU-less machine the
build-only libcuda stub must be on LD_LIBRARY_PATH before `import tvm` (docs/GPU_HOST.md).

Inside, the target's Relax pipeline runs pass by pass, as a triage thread does by hand: library dispatch +
legalize passes (honouring skip_passes, dataflow boundaries before FuseOps (boundaries.py),
schedule overrides before ApplyDefaultSchedule (overrides.py)), then dataflow-lower + finalize
passes, then relax.build. The catalog comes from the IR: provenance (provenance.py: input
call_tir bindings -> FuseOps groups -> FuseTIR PrimFuncs), the DLight rule that scheduled each
PrimFunc (rules.py: re-applied one rule at a time and checked against the real pass's output),
the arithmetic work of each PrimFunc as scheduled and built (work.py), and launch extents and allocations
read from the lowered device functions, the ones codegen turns into the exported kernels
(catalog.py). binaries.py extracts the device binaries from module.so in the parent.

Only the worker imports TVM (inside functions of these modules), so the parent side and a GPU
host without the compiler can import the package.
"""
from __future__ import annotations

import dataclasses
import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

from rootcause import child
from rootcause.artifacts import handoff
from rootcause.errors import UsageError
from rootcause.fileio import write_atomic
from rootcause.frontends.tvm.binaries import extract_binaries, fill_resources
from rootcause.frontends.tvm.boundaries import split_dataflow
from rootcause.frontends.tvm.catalog import kernel_catalog
from rootcause.frontends.tvm.overrides import apply_overrides
from rootcause.frontends.tvm.provenance import provenance
from rootcause.frontends.tvm.rules import rule_choices, verify_rules
from rootcause.frontends.tvm.source import from_model, load_source
from rootcause.frontends.tvm.work import work_counts
from rootcause.model import BuildOutput
from rootcause.model import CatalogKernel
from rootcause.spec import InputSpec, VariantSpec, model_inputs

SAVED_STAGES = ("FuseOps", "FuseTIR", "ApplyDefaultSchedule")


# ---------------------------------------------------------------- parent side (no TVM import)

def build(spec: VariantSpec, out_dir: Path) -> BuildOutput:
    """Build one variant into out_dir (module.so, ir/, binaries/); UsageError on bad specs,
    ToolFailed when TVM (or nvcc under it) fails, with the compiler's own error line."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if importlib.util.find_spec("tvm") is None:  # as a missing IREE is: bad input, with the install line
        raise UsageError("apache-tvm is not installed here (pip install 'rootcause[compilers]'), so no TVM variant "
                         "can be built")
    request = handoff.write_spec_request(out_dir, "build", spec)
    handoff.note_step(out_dir, "starting the TVM build child (importing TVM)")
    proc = child.run([sys.executable, "-m", "rootcause.frontends.tvm.build", str(request), str(out_dir)],
                     env=child.python_env(base=build_env(spec.target)))
    log = write_atomic(handoff.log_file(out_dir, "build"), proc.stdout + proc.stderr)
    result = child.result(proc, handoff.result_file(out_dir, "build"),
                          f"{spec.spec_file.name}: the TVM build of '{spec.name}'", log)
    kernels = [CatalogKernel.from_dict(k) for k in result["kernels"]]
    module_path = out_dir / result["module_path"]
    binaries, notes = extract_binaries(module_path, out_dir) if spec.target.startswith("cuda") else ([], [])
    notes = list(result["notes"]) + notes
    notes += fill_resources(kernels, [p for p in binaries if p.suffix == ".cubin"], spec.target)
    inputs = result.get("inputs")
    return BuildOutput(module_path=module_path, kernels=kernels,
                       ir_files=[out_dir / p for p in result["ir_files"]], binary_files=binaries,
                       versions=result["versions"], notes=notes,
                       inputs=None if inputs is None else [InputSpec.from_dict(i) for i in inputs])


def build_env(target: str) -> dict[str, str]:
    """Environment for the build subprocess: CUDA targets get nvcc and, without a driver, the stub."""
    from rootcause import cuda_tools

    env = dict(os.environ)
    if target.startswith("cuda"):
        nvcc = cuda_tools.require_tool("nvcc")
        env["PATH"] = f"{nvcc.parent}{os.pathsep}{env.get('PATH', '')}"
        env["CUDA_HOME"] = str(cuda_tools.cuda_home())
        env["TVM_CUDA_COMPILE_MODE"] = "nvcc"
        if not cuda_tools.real_driver_present():
            stub = cuda_tools.libcuda_stub_dir()
            env["LD_LIBRARY_PATH"] = f"{stub}{os.pathsep}{env.get('LD_LIBRARY_PATH', '')}".rstrip(os.pathsep)
    return env


# ---------------------------------------------------------------- worker side (imports TVM)

def _worker(request: Path, out_dir: Path) -> int:
    def work() -> dict[str, Any]:
        spec = handoff.read_spec_request(request)
        try:
            return _build_in_process(spec, out_dir)
        except UsageError:
            raise
        except Exception as err:  # noqa: BLE001  TVM's own failures are the compiler's; others are ours
            raise child.tool_failure(err, "tvm") or err

    return child.serve(work, handoff.result_file(out_dir, "build"))


def _build_in_process(spec: VariantSpec, out_dir: Path) -> dict[str, Any]:
    if spec.model is None:  # a TVMScript source: nothing of torch is needed
        from rootcause.frontends.tvm.runtime import import_tvm

        import_tvm()
    import tvm
    from tvm import relax

    if spec.target.startswith("cuda"):
        import tvm.support.nvcc  # noqa: F401  registers the nvcc compile callback TVM uses
    target = make_target(spec)
    stages = pipeline_module(spec, target)
    ir_dir = out_dir / "ir"
    ir_dir.mkdir(parents=True, exist_ok=True)
    exported = None
    if spec.model is not None:
        mod, exported = from_model(spec)
        spec = dataclasses.replace(spec, inputs=model_inputs(spec, exported.arguments))
    else:
        mod = load_source(spec)
    _check_inputs(spec, mod)
    ir_files = [_save_ir(ir_dir / "00_input.py", mod)]
    notes: list[str] = []
    with target, tvm.transform.PassContext(opt_level=spec.options.opt_level):
        first = stages.library_dispatch_passes(target) + stages.legalize_passes(target)
        second = stages.dataflow_lower_passes(target) + stages.finalize_passes(target)
        check_skips(spec, [pass_name(p) for p in first + second])
        base = provenance_base = None
        rules: dict[str, dict[str, Any]] = {}
        overridden = False
        for index, transform in enumerate(first, start=1):
            name = pass_name(transform)
            if name == "FuseOps":
                mod = split_dataflow(mod, spec)
                provenance_base = mod
            if name == "ApplyDefaultSchedule":
                mod = apply_overrides(mod, spec, target)
                overridden = True
                expected = rule_choices(mod, transform, target)
            if name in spec.options.skip_passes:
                continue
            handoff.note_step(out_dir, f"TVM pass {name}")
            mod = transform(mod)
            if name == "FuseOps":
                base = mod
            if name == "ApplyDefaultSchedule":
                rules = verify_rules(mod, expected)
            if name in SAVED_STAGES:
                ir_files.append(_save_ir(ir_dir / f"{index:02d}_{name}.py", mod))
        if provenance_base is None:  # a pipeline without FuseOps: every op stays its own kernel
            mod = provenance_base = split_dataflow(mod, spec)
        if not overridden:
            mod = apply_overrides(mod, spec, target)
        after_fuse_tir = mod
        groups, content = provenance(provenance_base, base if base is not None else provenance_base, after_fuse_tir)
        for transform in second:
            if pass_name(transform) not in spec.options.skip_passes:
                handoff.note_step(out_dir, f"TVM pass {pass_name(transform)}")
                mod = transform(mod)
        # work of the PrimFuncs as scheduled, the ones built (an inlined producer counts per output)
        catalog = kernel_catalog(mod, target, groups, rules, spec, work_counts(mod))
        for kernel in catalog:  # what lets alignment join kernels of two source files (model.py)
            ops = kernel["source_ops"]  # one location per op, in op order, or none
            kernel["source_locs"] = [content[op] for op in ops] if all(op in content for op in ops) else []
        handoff.note_step(out_dir, "TVM relax.build (code generation)")
        executable = relax.build(mod, target=target, relax_pipeline=None, tir_pipeline="default")
    module_path = out_dir / "module.so"
    executable.export_library(str(module_path))
    versions = _versions(spec)
    if exported is not None:
        for kernel in catalog:
            kernel["module_paths"] = op_module_paths(kernel["source_ops"], exported.module_paths)
        versions.update(exported.versions)
    return {"module_path": "module.so", "kernels": catalog,
            "ir_files": [str(p.relative_to(out_dir)) for p in ir_files],
            "versions": versions, "notes": notes,
            "inputs": [dataclasses.asdict(i) for i in spec.inputs] if exported is not None else None}


def op_module_paths(source_ops: list[str], paths: dict[str, str]) -> list[str]:
    """The module paths of provenance ids '<fn>/<binding>:<callee>', in op order, each once."""
    names = [op.split("/", 1)[-1].rsplit(":", 1)[0] for op in source_ops]
    return list(dict.fromkeys(paths[n] for n in names if n in paths))


def make_target(spec: VariantSpec) -> Any:
    import tvm

    host = {"kind": "llvm", "mcpu": "generic"}
    if spec.target == "llvm":
        return tvm.target.Target(host)
    if spec.target.startswith("cuda:"):
        return tvm.target.Target({"kind": "cuda", "arch": spec.target.split(":", 1)[1]}, host=host)
    raise UsageError(f"{spec.where('', 'target')}: the tvm frontend builds 'cuda:sm_XX' and 'llvm', "
                     f"not \"{spec.target}\"")


def pipeline_module(spec: VariantSpec, target: Any) -> Any:
    """The backend pipeline module whose pass lists the build runs (cuda or cpu_generic)."""
    if target.kind.name == "cuda":
        from tvm.relax.backend.cuda import pipeline
    else:
        from tvm.relax.backend.cpu_generic import pipeline
    return pipeline


def pass_name(transform: Any) -> str:
    return str(transform.info.name).split(".")[-1]


def check_skips(spec: VariantSpec, names: list[str]) -> None:
    """UsageError for a skip_passes entry that is not one of names (the pipeline's passes)."""
    from rootcause.names import did_you_mean

    for i, name in enumerate(spec.options.skip_passes):
        if name not in names:
            raise UsageError(f"{spec.where('tvm', 'skip_passes')}[{i}]: unknown pass \"{name}\" in the "
                             f"{spec.target} pipeline{did_you_mean(name, names)}; valid: {', '.join(names)}")


def pipeline_passes(target_name: str) -> list[str]:
    """The names of the passes the build runs for a target ('llvm', 'cuda:sm_XX'), in order."""
    spec = VariantSpec("", "tvm", Path(), target_name, "", [], None, Path())
    target = make_target(spec)
    stages = pipeline_module(spec, target)
    with target:
        passes = (stages.library_dispatch_passes(target) + stages.legalize_passes(target)
                  + stages.dataflow_lower_passes(target) + stages.finalize_passes(target))
    return [pass_name(p) for p in passes]


def _check_inputs(spec: VariantSpec, mod: Any) -> None:
    """The spec's inputs against the entry function's parameters (count, dtype, static shape),
    before anything is built: a float32 graph fed int32 is one line at build, not an error at run."""
    from rootcause import spec as spec_mod

    if spec.entry not in [gv.name_hint for gv in mod.get_global_vars()]:
        return  # load_source names the entry's absence itself
    params = []
    for p in mod[spec.entry].params:
        ty = getattr(p, "ty", None) or getattr(p, "struct_info", None)
        shape = getattr(ty, "shape", None)
        dims = [int(d) if hasattr(d, "value") else str(d) for d in shape] if shape is not None else None
        params.append((dims, str(getattr(ty, "dtype", ""))))
    spec_mod.check_signature(spec, params)


def _save_ir(path: Path, mod: Any) -> Path:
    write_atomic(path, mod.script())
    return path


def _versions(spec: VariantSpec) -> dict[str, str]:
    import platform

    import tvm
    import rootcause
    from rootcause import cuda_tools

    versions = {"tvm": tvm.__version__, "python": platform.python_version(),
                "rootcause": rootcause.__version__}
    if spec.target.startswith("cuda"):
        versions["nvcc"] = cuda_tools.tool_version("nvcc") or "missing"
    return versions


if __name__ == "__main__":
    sys.exit(_worker(Path(sys.argv[1]), Path(sys.argv[2])))
