"""A frontend is one package, registered by its distribution's entry point: the package
tests/plugins/npgraph, installed here as a distribution whose only metadata is that entry point
(no file of rootcause names it), is driven through build -> run -> compare and through analyze
on the CPU, in this process and in the measuring children.

npgraph compiles a Python source that lists NumPy stages; `fuse = true` makes one fused kernel
of all stages, so A (unfused) and B (fused) differ the way the seed regressions do. Outputs are
checked against NumPy by the run stage (the spec's reference), and units against the catalog's
provenance.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from plugin_site import PLUGINS, activate, install, write_case
from rootcause import cli, frontends

ROOT = PLUGINS.parents[1]


@pytest.fixture
def registered(tmp_path, monkeypatch):
    activate(install(tmp_path / "site"), monkeypatch)
    monkeypatch.setenv("ROOTCAUSE_CACHE", str(tmp_path / "cache"))
    yield write_case(tmp_path / "case")
    sys.modules.pop("npgraph", None)


def test_no_project_file_names_the_plugin():
    """Adding npgraph changed no file of rootcause: its name is in none of them."""
    tracked = subprocess.run(["git", "ls-files", "rootcause", "pyproject.toml", "setup.py"], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout.split()
    assert tracked and not [f for f in tracked if "npgraph" in (ROOT / f).read_text(errors="replace")]
    assert "npgraph" not in frontends.names()


def test_registered_by_its_entry_point(registered):
    assert "npgraph" in frontends.names() and frontends.module_of("npgraph") == "npgraph"
    assert frontends.get("npgraph").name == "npgraph"


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
