"""Two compilers of one PyTorch model (TVM against IREE, fixtures/models/llama on the CPU): units
are the model's modules, each with both sides' kernels, and what no module names is never the
bulk of the delta. The truths are the model's own modules (read with torch from model.py) and the
catalogs' module paths, never rootcause's output alone."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.model_files import load_model

pytest.importorskip("torch")
pytest.importorskip("tvm")
pytest.importorskip("iree.compiler")

ROOT = Path(__file__).resolve().parents[1]
LLAMA = ROOT / "fixtures" / "models" / "llama"


def _modules() -> set[str]:
    return {name for name, _ in load_model(LLAMA).Decoder().named_modules() if name}


@pytest.mark.slow


def test_tvm_against_iree_units_are_the_models_modules(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "rootcause", "analyze", f"{LLAMA / 'variants.toml'}#tvm_fused",
                           f"{LLAMA / 'variants.toml'}#iree", "--out", str(out), "--budget-s", "4"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads((out / "attribution.json").read_text())
    modules = _modules()
    both = [u for u in doc["units"] if u["kernels_a"] and u["kernels_b"]]
    assert len(both) >= 8 and all(u["method"] == "module-path" for u in both)
    by_elimination = [u for u in doc["units"] if u["method"] in ("remainder", "launch-order")]
    assert sum(abs(u["share"] or 0) for u in by_elimination) <= 0.2
    catalogs = {side: {k["name"]: k for k in json.loads((out / "bundles" / name / "manifest.json").read_text())["kernels"]}
                for side, name in (("a", "llama_tvm_fused"), ("b", "llama_iree"))}
    for u in both:
        for side in ("a", "b"):
            paths = {p for k in u[f"kernels_{side}"] for p in catalogs[side][k.split("#@")[0]]["module_paths"]}
            assert paths and paths <= modules, (u["unit"], side, paths - modules)
