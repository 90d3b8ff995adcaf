"""XLA frontend, through jax: a JAX model ([model] exporter = "jax") exported with jax.export and
compiled by XLA. XLA compiles where it runs, so the bundle carries the serialized export
(module.jaxexport) and the compile options; build.py also compiles it here for the catalog (one
kernel per thunk of the optimized HLO's entry computation: a fusion, a library call, a copy),
runtime.py compiles it again where it runs and says when the fusions differ from the catalog's,
cpu_profile.py takes jax's profiler trace of the CPU thunks, hybrids.py plans none."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from rootcause.frontends.base import PackageFrontend


class XlaFrontend(PackageFrontend):
    name = "xla"
    package = __name__
    compiler_packages = ("jax", "jaxlib")
    runtime_packages = ("jax", "jaxlib")
    versioned_with_compiler = ("jaxlib",)
    schedule_keys = ("fusion_kind", "library")

    def input_files(self, spec: Any) -> list[Path]:
        return []


FRONTEND = XlaFrontend()
