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
        return list(spec.options.substitute_configurations.values())

    def alignment_tiers(self) -> tuple[Any, ...]:
        return self._stage("alignment").TIERS

    def normalize_op(self, op: str) -> str:
        return self._stage("alignment").normalize_op(op)

    def thread_work(self, kernel: Any) -> Any:
        return self._stage("alignment").thread_work(kernel)

    def dispatch_owner(self, name: str) -> str | None:
        return self._stage("alignment").dispatch_owner(name)

    def vector_step(self, schedule: dict[str, Any]) -> Any:
        return self._stage("alignment").vector_step(schedule)

    def check_with_compiler(self, spec: Any) -> None:
        """Flag names and string-typed options against the installed iree-compile's own list."""
        self._stage("compile").check_flags(spec)

    def check_source(self, spec: Any) -> None:
        """.mlir sources: the inputs' count and dtypes against the function's signature, read
        from the text (skipped where the function or one of its argument types is not found: the
        compiler decides). Shapes are left to the runtime: a --bundle-only build may cut inputs down."""
        from rootcause import inputs
        from rootcause.frontends.iree.options import mlir_params
        from rootcause.spec import check_signature

        if spec.source.suffix != ".mlir":
            return
        try:
            text = spec.source.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return
        params = mlir_params(text, spec.options.function or spec.entry)
        if params is None or any(inputs.dtype_name(dtype) is None for _, dtype in params):
            return
        check_signature(spec, params, shapes=False)


FRONTEND = IreeFrontend()
