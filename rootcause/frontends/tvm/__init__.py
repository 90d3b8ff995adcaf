"""TVM (Relax) frontend: build.py compiles a spec pass by pass into module.so and its catalog,
runtime.py runs a bundle (runtime-only TVM on a GPU host), cpu_profile.py times each kernel on
the CPU through the VM's instrument hook, hybrids.py plans the counterfactual builds."""
from __future__ import annotations

from pathlib import Path
from typing import Any


class TvmFrontend:
    name = "tvm"
    compiler_packages = ("apache-tvm",)
    schedule_keys = ("rule",)

    def check_options(self, table: dict[str, Any], where) -> dict[str, Any]:
        return table  # [tvm] is parsed by rootcause.spec (TvmOptions)

    def input_files(self, spec: Any) -> list[Path]:
        return list(spec.tvm.schedule_overrides.values())

    def build(self, spec: Any, out_dir: Path):
        from rootcause.frontends.tvm import build

        return build.build(spec, out_dir)

    def load_session(self, bundle: Any, device: str):
        from rootcause.frontends.tvm import runtime

        return runtime.load(bundle, device)

    def cpu_profile(self, bundle_dir: Path, out_dir: Path, calls: int) -> dict[str, Any]:
        from rootcause.artifacts.bundle import read_bundle
        from rootcause.frontends.base import profile_name
        from rootcause.frontends.tvm import cpu_profile

        name = profile_name(read_bundle(bundle_dir).name, ".tvm-vm.json")
        return cpu_profile.capture(bundle_dir, Path(out_dir) / name, calls=calls)

    def plan_hybrids(self, spec_a, spec_b, catalog_a, catalog_b, bundles, work_dir, notes):
        from rootcause.frontends.tvm import hybrids

        return hybrids.plan(spec_a, spec_b, catalog_a, catalog_b, notes)


FRONTEND = TvmFrontend()
