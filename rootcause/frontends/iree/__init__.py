"""IREE frontend: build.py runs iree-compile with phase dumps into module.vmfb and its catalog,
runtime.py runs a bundle through iree.runtime, cpu_profile.py takes a local-task host-execution
profile, hybrids.py plans the counterfactual builds (substituted executable configurations)."""
from __future__ import annotations

from pathlib import Path
from typing import Any


class IreeFrontend:
    name = "iree"
    compiler_packages = ("iree-base-compiler",)
    schedule_keys = ("pipeline", "workgroup_size", "subgroup_size")

    def check_options(self, table: dict[str, Any], where) -> dict[str, Any]:
        return table  # [iree] is parsed by rootcause.spec (IreeOptions)

    def input_files(self, spec: Any) -> list[Path]:
        return list(spec.iree.substitute_configurations.values())

    def build(self, spec: Any, out_dir: Path):
        from rootcause.frontends.iree import build

        return build.build(spec, out_dir)

    def load_session(self, bundle: Any, device: str):
        from rootcause.frontends.iree import runtime

        return runtime.load(bundle, device)

    def cpu_profile(self, bundle_dir: Path, out_dir: Path, calls: int) -> dict[str, Any]:
        from rootcause.artifacts.bundle import read_bundle
        from rootcause.frontends.base import profile_name
        from rootcause.frontends.iree import cpu_profile

        name = profile_name(read_bundle(bundle_dir).name, ".iree-dispatch.jsonl")
        return cpu_profile.capture(bundle_dir, Path(out_dir) / name, calls)

    def plan_hybrids(self, spec_a, spec_b, catalog_a, catalog_b, bundles, work_dir, notes):
        from rootcause.frontends.iree import hybrids

        return hybrids.plan(spec_a, spec_b, catalog_a, catalog_b, bundles, work_dir, notes)


FRONTEND = IreeFrontend()
