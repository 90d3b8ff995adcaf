"""npgraph: a small frontend that lives outside rootcause, registered only by an entry point
in the group 'rootcause.frontends' (tests/test_frontend_plugin.py writes the distribution's
metadata). It compiles a Python source listing NumPy stages; `fuse = true` in its [npgraph]
table makes one fused kernel of all stages (the fusion decision a real compiler makes)."""
from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np

from rootcause.errors import UsageError
from rootcause.fileio import write_json
from rootcause.model import BuildOutput, CatalogKernel


def _stages(path: Path) -> list[tuple[str, Any]]:
    scope: dict[str, Any] = {}
    exec(compile(path.read_text(), str(path), "exec"), scope)
    return scope["STAGES"]


def _kernels(stages, fuse: bool) -> list[tuple[str, list[str], Any]]:
    """(kernel name, source ops, function) in launch order."""
    if not fuse:
        return [(name, [f"main/{name}"], fn) for name, fn in stages]

    def fused(x, fns=[fn for _, fn in stages]):
        for fn in fns:
            x = fn(x)
        return x
    return [("fused_" + "_".join(n for n, _ in stages), [f"main/{n}" for n, _ in stages], fused)]


class NpSession:
    def __init__(self, bundle, device: str):
        self.bundle, self.device = bundle, device
        self.kernels = _kernels(_stages(bundle.module_path), bundle.manifest["spec"]["options"]["fuse"])
        self._x = self._out = None

    def set_inputs(self, arrays):
        self._x = np.array(arrays[0])

    def call(self):
        x = self._x
        for _, _, fn in self.kernels:
            x = fn(x)
        self._out = x

    def outputs(self):
        return [self._out]

    timer_includes = "time.perf_counter around `number` calls"

    def timer(self, number: int = 10):
        def sample():
            t0 = time.perf_counter()
            for _ in range(number):
                self.call()
            return (time.perf_counter() - t0) / number
        return sample


class NpGraph:
    name = "npgraph"
    compiler_packages = ()
    schedule_keys = ()

    def check_options(self, table, place, files):
        if set(table) - {"fuse"}:
            raise UsageError(f"{place(sorted(set(table) - {'fuse'})[0])}: unknown key; valid: fuse")
        if not isinstance(table.get("fuse", False), bool):
            raise UsageError(f"{place('fuse')}: must be true or false")
        return {"fuse": table.get("fuse", False)}

    def input_files(self, spec):
        return []

    def build(self, spec, out_dir: Path) -> BuildOutput:
        out_dir.mkdir(parents=True, exist_ok=True)
        module = out_dir / "module.py"
        shutil.copy2(spec.source, module)
        kernels = [CatalogKernel(name, name, ops, ["main"], schedule={"fused": len(ops) > 1})
                   for name, ops, _ in _kernels(_stages(module), spec.options["fuse"])]
        return BuildOutput(module_path=module, kernels=kernels, versions={"numpy": np.__version__})

    def load_session(self, bundle, device: str):
        return NpSession(bundle, device)

    def cpu_profile(self, bundle_dir: Path, out_dir: Path, calls: int) -> dict:
        from rootcause.artifacts.bundle import bundle_inputs, read_bundle
        from rootcause.frontends.base import profile_name

        bundle = read_bundle(bundle_dir)
        out_file = Path(out_dir) / profile_name(bundle.name, ".npgraph.json")
        session = NpSession(bundle, "cpu")
        x0 = bundle_inputs(bundle)[0]
        events = []
        for call in range(calls):
            x = x0
            for name, _, fn in session.kernels:
                t0 = time.perf_counter_ns()
                x = fn(x)
                t1 = time.perf_counter_ns()
                events.append({"name": name, "ph": "X", "cat": "kernel", "pid": 0, "tid": 0, "ts": t0 / 1e3,
                               "dur": (t1 - t0) / 1e3, "args": {"call": call}})
        out_file.parent.mkdir(parents=True, exist_ok=True)
        write_json(out_file, {"traceEvents": events, "displayTimeUnit": "ns"})
        return {"profiler": "npgraph", "ok": True, "file": out_file.name, "calls": calls}

    def plan_hybrids(self, spec_a, spec_b, catalog_a, catalog_b, bundles, work_dir, notes):
        notes.append("npgraph plans no hybrids")
        return []


FRONTEND = NpGraph()
