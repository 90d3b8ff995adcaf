"""IREE frontend: build.py runs iree-compile with phase dumps into module.vmfb and its catalog,
runtime.py runs a bundle through iree.runtime, cpu_profile.py takes a local-task host-execution
profile, hybrids.py plans the counterfactual builds (substituted executable configurations)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from rootcause.frontends.base import PackageFrontend


class IreeFrontend(PackageFrontend):
    name = "iree"
    package = __name__
    compiler_packages = ("iree-base-compiler",)
    runtime_packages = ("iree-base-runtime",)
    versioned_with_compiler = ("iree-base-runtime",)  # a module needs the runtime of its compiler's version
    schedule_keys = ("pipeline", "workgroup_size", "subgroup_size")

    def input_files(self, spec: Any) -> list[Path]:
        return list(spec.iree.substitute_configurations.values())

    def check_source(self, spec: Any) -> None:
        """.mlir sources: the inputs' count and dtypes against the function's signature, read
        from the text (skipped where the function or one of its argument types is not found: the
        compiler decides). Shapes are left to the runtime: a --bundle-only build may cut inputs down."""
        from rootcause import inputs
        from rootcause.spec import check_signature, mlir_params

        if spec.source.suffix != ".mlir":
            return
        try:
            text = spec.source.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return
        params = mlir_params(text, spec.iree.function or spec.entry)
        if params is None or any(inputs.dtype_name(dtype) is None for _, dtype in params):
            return
        check_signature(spec, params, shapes=False)


FRONTEND = IreeFrontend()
