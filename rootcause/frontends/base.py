"""The Frontend protocol: what rootcause needs from a compiler to build, run and profile a variant.

A frontend is a package (the built-in ones under rootcause/frontends/) whose __init__ defines
FRONTEND, an object with the attributes below, registered by a line of
rootcause.frontends.FRONTENDS (built in) or an entry point in the group 'rootcause.frontends'
(any other distribution). Its __init__ imports
nothing heavy: a GPU host that has only the runtime imports it to load a session, so the
compiler is imported inside `build`, the runtime inside `load_session`.
"""
from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any, Callable, Protocol

import numpy as np

from rootcause.fileio import safe_name
from rootcause.model import BuildOutput, CatalogKernel, Hybrid

# The most single-item toggles a whole-spec bisection builds before it halves instead.
MAX_SINGLE_TOGGLES = 4


class Session(Protocol):
    """A loaded bundle on one device."""

    bundle: Any  # rootcause.artifacts.bundle.Bundle
    device: str

    def set_inputs(self, arrays: list[np.ndarray]) -> None: ...
    def call(self) -> None: ...  # one call of the entry function, synchronised with the device
    def outputs(self) -> list[np.ndarray]: ...  # outputs of the last call, as NumPy arrays
    def timer(self, number: int = 10) -> Callable[[], float]: ...  # seconds per call, device-synced
    # Optional: run_files() -> {file name: text}, what the runtime made on this host that the
    # analysis reads (XLA: the HLO it compiled here); the runner writes them into the run directory.


class Frontend(Protocol):
    name: str  # the spec's `frontend` value
    # Distributions whose installed versions key the build cache and are recorded in bundles.
    compiler_packages: tuple[str, ...]
    # Distributions a built module needs at run time (in manifests; a variant's `toolchain` may pin
    # them). Absent: none recorded.
    runtime_packages: tuple[str, ...]
    # Those of them released with the compiler: a toolchain that does not pin one gets the
    # compiler's version. Absent: none.
    versioned_with_compiler: tuple[str, ...]
    # Catalog schedule keys that name the scheduling choice (rule, pipeline, ...), in the order
    # the report and the schedule rule show them.
    schedule_keys: tuple[str, ...]
    # Input dtypes its compiler and runtime take (rootcause.inputs names); absent: all of them.
    dtypes: tuple[str, ...]

    def check_options(self, table: dict[str, Any], place: Callable[[str | None], str], files: Any) -> Any:
        """The spec's [NAME] table checked without the compiler, as the options its stages read
        from VariantSpec.options. place(key) phrases the TOML place for a UsageError;
        files.existing(rel, where) resolves a file the table names (rootcause.spec.SpecFiles:
        inside the spec's folder unless the spec allows otherwise)."""
    # Optional: options_from_dict(d) -> options, the inverse of dataclasses.asdict of what
    # check_options returned (specs reach children as JSON); absent: the options are that dict.
    def input_files(self, spec: Any) -> list[Path]:
        """Files other than source, reference and inputs that the build reads (cache key)."""
    # Optional: check_with_compiler(spec) -> None, what needs the installed compiler but no build
    # (pass names, option names), UsageError; asked of every variant before the first build starts
    # (rootcause.build.check_before_build). A variant built by another toolchain is left to its build.
    # Optional: check_source(spec) -> None, what the frontend can check of its source against the
    # spec's inputs without its compiler (UsageError); rootcause.spec calls it when present.
    # Optional, asked by the analysis (which never imports a frontend):
    #   alignment_tiers() -> tuple of rootcause.model.AlignmentTier, ways its kernel names show
    #     two builds' kernels computing the same ops (rootcause.analysis.align);
    #   normalize_op(op) -> op, a source-op id as it compares across builds (ids of other
    #     frontends unchanged);
    #   thread_work(kernel) -> dict | str | None, the threads that own work in a CatalogKernel
    #     (dict), why that could not be checked (str), or None where the kernel is not its;
    #   dispatch_owner(name) -> str | None, the function a kernel symbol was named after, where
    #     its symbols say (one executable serving another function's call sites);
    #   vector_step(schedule) -> (elements, tile levels) | None, the elements one vector step of a
    #     CPU kernel computes, read from its catalog schedule;
    #   run_catalog(bundle, run_dir, events, notes) -> list[CatalogKernel] | None, the catalog of a
    #     bundle whose build could not compile for the run's device, read from what its session's
    #     run_files kept there (a frontend that compiles where it runs: XLA).
    def build(self, spec: Any, out_dir: Path) -> BuildOutput: ...
    def load_session(self, bundle: Any, device: str) -> Session: ...
    def cpu_profile(self, bundle_dir: Path, out_dir: Path, calls: int) -> dict[str, Any]:
        """Per-kernel profile of `calls` calls of a CPU bundle, written into out_dir under a name
        the frontend picks (profile_name); the record a run keeps of a profile ({'profiler', 'ok',
        'file' (relative to out_dir), 'calls', ...})."""
    def plan_hybrids(self, spec_a: Any, spec_b: Any, catalog_a: list[CatalogKernel],
                     catalog_b: list[CatalogKernel], bundles: dict[str, Path] | None,
                     work_dir: Path | None, notes: list[str]) -> list[Hybrid]:
        """Candidate hybrids (unnamed, unit hybrids first); notes say what cannot be built."""


class PackageFrontend:
    """A frontend whose stages are modules of its package, imported only when used:
    build.build(spec, out_dir), runtime.load(bundle, device), cpu_profile.capture(bundle_dir,
    out_dir, calls) and hybrids.plan(spec_a, spec_b, catalog_a, catalog_b, bundles, work_dir,
    notes) and its [NAME] table by options.check(table, place, files) and options.from_dict(d)."""

    package = ""  # e.g. 'rootcause.frontends.tvm'

    def _stage(self, module: str) -> Any:
        return importlib.import_module(f"{self.package}.{module}")

    def check_options(self, table: dict[str, Any], place: Callable[[str | None], str], files: Any) -> Any:
        return self._stage("options").check(table, place, files)

    def options_from_dict(self, d: dict[str, Any]) -> Any:
        return self._stage("options").from_dict(d)

    def build(self, spec: Any, out_dir: Path) -> BuildOutput:
        return self._stage("build").build(spec, out_dir)

    def load_session(self, bundle: Any, device: str) -> Session:
        return self._stage("runtime").load(bundle, device)

    def cpu_profile(self, bundle_dir: Path, out_dir: Path, calls: int) -> dict[str, Any]:
        return self._stage("cpu_profile").capture(bundle_dir, out_dir, calls)

    def plan_hybrids(self, spec_a: Any, spec_b: Any, catalog_a: list[CatalogKernel],
                     catalog_b: list[CatalogKernel], bundles: dict[str, Path] | None,
                     work_dir: Path | None, notes: list[str]) -> list[Hybrid]:
        return self._stage("hybrids").plan(spec_a, spec_b, catalog_a, catalog_b, bundles, work_dir, notes)


def profile_name(bundle_name: str, suffix: str) -> str:
    """A file name for a variant's profile: the bundle name made shell- and path-safe."""
    return safe_name(bundle_name) + suffix


def bisection_subsets(items: list[Any]) -> list[list[Any]]:
    """One level of a bisection over differing items: each alone (up to MAX_SINGLE_TOGGLES),
    else the two halves. One differing item gives nothing: toggling it is the other side."""
    if len(items) < 2:
        return []
    if len(items) <= MAX_SINGLE_TOGGLES:
        return [[x] for x in items]
    half = len(items) // 2
    return [items[:half], items[half:]]
