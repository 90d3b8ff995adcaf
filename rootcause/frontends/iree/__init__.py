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


FRONTEND = IreeFrontend()
