"""TVM (Relax) frontend: build.py compiles a spec pass by pass into module.so and its catalog,
runtime.py runs a bundle (runtime-only TVM on a GPU host), cpu_profile.py times each kernel on
the CPU through the VM's instrument hook, hybrids.py plans the counterfactual builds."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from rootcause.frontends.base import PackageFrontend


class TvmFrontend(PackageFrontend):
    name = "tvm"
    package = __name__
    compiler_packages = ("apache-tvm",)
    # One wheel holds compiler and runtime; its FFI library is a dependency pip resolves to the
    # newest release, which an older apache-tvm may not link against: a toolchain may pin it.
    runtime_packages = ("apache-tvm", "apache-tvm-ffi")
    schedule_keys = ("rule",)

    def input_files(self, spec: Any) -> list[Path]:
        return list(spec.options.schedule_overrides.values())

    def check_with_compiler(self, spec: Any) -> None:
        """skip_passes against the pass names of the target's pipeline, asked of TVM."""
        self._stage("passes").check_skips(spec)

    def alignment_tiers(self) -> tuple[Any, ...]:
        return self._stage("alignment").TIERS


FRONTEND = TvmFrontend()
