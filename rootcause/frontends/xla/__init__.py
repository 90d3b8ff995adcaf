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
    # None pinned for running: XLA compiles the serialized export where it runs, with that host's
    # jax (jax.export reads exports of older releases); the run records which jaxlib compiled it.
    runtime_packages = ()
    versioned_with_compiler = ()
    schedule_keys = ("fusion_kind", "library")

    def input_files(self, spec: Any) -> list[Path]:
        return []

    def run_catalog(self, bundle: Any, run_dir: Path, events: Any, notes: list[str]) -> Any:
        """The catalog of what XLA compiled on the run host (runcatalog.py), or None."""
        return self._stage("runcatalog").run_catalog(bundle, run_dir, events, notes)


FRONTEND = XlaFrontend()
