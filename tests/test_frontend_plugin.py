"""A frontend is one module plus one registry line: a small frontend defined here, registered in
rootcause.frontends.FRONTENDS, driven through build -> run -> compare and through analyze on the
CPU, with no other rootcause module changed.

The frontend ('npgraph') compiles a Python source that lists NumPy stages; `fuse = true` in its
[npgraph] table makes one fused kernel of all stages (the fusion decision a real compiler makes),
so A (unfused) and B (fused) differ the way the seed regressions do. Outputs are checked
against NumPy by the run stage (the spec's reference), and units against the catalog's
provenance.
"""
from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rootcause import cli, frontends
from rootcause.errors import UsageError
from rootcause.fileio import write_json
from rootcause.model import BuildOutput, CatalogKernel

SOURCE = '''
import numpy as np
STAGES = [
    ("scale", lambda x: x * 2.0),
    ("shift", lambda x: x + 1.0),
    ("square", lambda x: x * x),
]
'''
REFERENCE = "import numpy as np\n\ndef reference(x):\n    return ((x * 2.0) + 1.0) ** 2\n"
SPEC = """
[base]
name = "npg"
frontend = "npgraph"
source = "graph.py"
target = "llvm"
entry = "main"
[[base.inputs]]
shape = [256, 256]
dtype = "float32"
seed = 1
[base.reference]
python = "reference.py:reference"
rtol = 1e-5
atol = 1e-6
[variants.unfused.npgraph]
fuse = false
[variants.fused.npgraph]
fuse = true
"""


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

    def check_options(self, table, where):
        if set(table) - {"fuse"}:
            raise UsageError(f"{where(sorted(set(table) - {'fuse'})[0])}: unknown key; valid: fuse")
        if not isinstance(table.get("fuse", False), bool):
            raise UsageError(f"{where('fuse')}: must be true or false")
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


@pytest.fixture
def registered(tmp_path, monkeypatch):
    monkeypatch.setitem(frontends.FRONTENDS, "npgraph", __name__)
    monkeypatch.setitem(sys.modules, __name__, sys.modules[__name__])
    monkeypatch.setenv("ROOTCAUSE_CACHE", str(tmp_path / "cache"))
    case = tmp_path / "case"
    case.mkdir()
    (case / "graph.py").write_text(SOURCE)
    (case / "reference.py").write_text(REFERENCE)
    (case / "variants.toml").write_text(SPEC)
    return case / "variants.toml"


def test_build_run_compare(registered, tmp_path, capsys):
    spec = registered
    bundles = {v: tmp_path / "bundles" / v for v in ("unfused", "fused")}
    for v, out in bundles.items():
        assert cli.main(["build", f"{spec}#{v}", "--out", str(out)]) == 0
    manifest = json.loads((bundles["fused"] / "manifest.json").read_text())
    assert manifest["frontend"] == "npgraph" and [k["name"] for k in manifest["kernels"]] == \
        ["fused_scale_shift_square"]
    run = tmp_path / "run"
    assert cli.main(["run", *map(str, bundles.values()), "--out", str(run), "--profile", "none",
                     "--budget-s", "1"]) == 0
    measurement = json.loads((run / "measurement.json").read_text())
    assert measurement["verification"]["ok"] is True
    profiles = {}
    for v, b in bundles.items():
        info = frontends.get("npgraph").cpu_profile(b, tmp_path / "profiles", 5)
        profiles[v] = tmp_path / "profiles" / info["file"]
    out = tmp_path / "compare"
    assert cli.main(["compare", str(profiles["unfused"]), str(profiles["fused"]), "--catalog-a",
                     str(bundles["unfused"]), "--catalog-b", str(bundles["fused"]), "--calls", "5",
                     "--measurement", str(run), "--out", str(out)]) == 0
    doc = json.loads((out / "attribution.json").read_text())
    # The fused kernel covers the three source ops the unfused side runs as three kernels:
    # one unit, aligned by provenance.
    units = [u for u in doc["units"] if u["kernels_b"]]
    assert len(units) == 1
    assert sorted(units[0]["kernels_a"]) == ["scale", "shift", "square"]
    assert units[0]["kernels_b"] == ["fused_scale_shift_square"] and units[0]["method"] == "provenance"
    measured = measurement["measurement"]["variants"]
    label_a, label_b = doc["variants"]["a"]["label"], doc["variants"]["b"]["label"]
    assert doc["whole_graph"]["source"] == "measured"
    assert doc["whole_graph"]["a"]["median"] == pytest.approx(measured[label_a]["median_s"] * 1e9)
    assert doc["whole_graph"]["b"]["median"] == pytest.approx(measured[label_b]["median_s"] * 1e9)
    assert doc["catalogs"]["b"]["kernels"]["fused_scale_shift_square"]["source_ops"] == \
        ["main/scale", "main/shift", "main/square"]


def test_analyze_end_to_end(registered, tmp_path):
    out = tmp_path / "analyze"
    assert cli.main(["analyze", f"{registered}#unfused", f"{registered}#fused", "--target", "llvm",
                     "--budget-s", "1", "--out", str(out)]) == 0
    doc = json.loads((out / "attribution.json").read_text())
    assert doc["run"]["verification_ok"] is True
    assert doc["confirmation"]["notes"] == ["npgraph plans no hybrids"]
    # The CPU profiles of A and B went to OUT/cpu-profiles, by the frontend's own profiler; the
    # run directory holds only what the run stage wrote.
    profiles = doc["run"]["profiles"]
    assert {p["profiler"] for p in profiles.values()} == {"npgraph"}
    assert all(Path(p["file"]).parent == (out / "cpu-profiles").resolve() for p in profiles.values())
    assert "npgraph" not in (out / "run" / "measurement.json").read_text()
