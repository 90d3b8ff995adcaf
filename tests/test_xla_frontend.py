"""The XLA frontend (jax.export, compiled by XLA through jax) and the module-path tier that aligns
two producers' kernels by the model's own structure. Real compilers on the CPU: XLA through jaxlib,
IREE through iree-base-compiler. The truths are the models' construction (their shapes and scopes,
read from model.py), jax's own compile of the same function and jax's profiler, never rootcause's
own output."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.model_files import load_model

pytestmark = pytest.mark.slow  # the slow tier (README): minutes of builds and analyses

jax = pytest.importorskip("jax")
pytest.importorskip("iree.compiler")

ROOT = Path(__file__).resolve().parents[1]
JAX_MLP = ROOT / "fixtures" / "models" / "jax_mlp"
EINSUM = ROOT / "fixtures" / "cases" / "einsum_jax"


def _rootcause(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rootcause", *map(str, args)], capture_output=True, text=True)


@pytest.fixture(scope="module")
def mlp_case(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """jax_mlp with an XLA variant, one with XLA's fusion pass off, and IREE's, in one spec."""
    folder = tmp_path_factory.mktemp("jax_mlp")
    (folder / "model.py").write_text((JAX_MLP / "model.py").read_text())
    base = (JAX_MLP / "variants.toml").read_text().split("[variants.")[0]
    (folder / "v.toml").write_text(base + '[variants.xla]\nname = "mlp_xla"\nfrontend = "xla"\n'
                                   '[variants.xla_nofusion]\nname = "mlp_xla_nofusion"\nfrontend = "xla"\n'
                                   'xla = { options = { xla_disable_hlo_passes = "fusion" } }\n'
                                   '[variants.iree]\nname = "mlp_iree"\nfrontend = "iree"\n')
    return folder / "v.toml"


@pytest.fixture(scope="module")
def xla_bundle(mlp_case: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("b") / "xla"
    proc = _rootcause("build", f"{mlp_case}#xla", "--out", out)
    assert proc.returncode == 0, proc.stderr
    return out


def test_the_catalog_is_xlas_own_compile_of_the_model(xla_bundle: Path) -> None:
    """One kernel per entry instruction that runs, named as XLA names it; the contractions'
    flops are the model's: 2 * TOKENS * DIM * HIDDEN per matmul, two a block."""
    model = load_model(JAX_MLP)
    manifest = json.loads((xla_bundle / "manifest.json").read_text())
    kernels = manifest["kernels"]
    hlo = (xla_bundle / "ir" / "optimized.hlo.txt").read_text()
    entry = hlo[hlo.index("\nENTRY"):]
    for k in kernels:
        assert re.search(rf"%{re.escape(k['name'])} = ", entry), k["name"]
    dots = [k for k in kernels if "dot_general" in k["source_op_kinds"] and k["schedule"].get("library")]
    assert len(dots) == 2 * model.BLOCKS
    assert sum(k["flops"] for k in dots) == 2 * model.BLOCKS * 2 * model.TOKENS * model.DIM * model.HIDDEN
    paths = {p for k in kernels for p in k["module_paths"]}
    assert paths == {f"blocks.{i}.{part}" for i in range(model.BLOCKS) for part in ("norm", "mlp")}
    assert manifest["versions"]["jaxlib"] == jax.__version__ or manifest["versions"]["jaxlib"]


def test_the_run_computes_what_jax_computes_and_compiles_the_catalogs_kernels(xla_bundle: Path) -> None:
    from rootcause.artifacts.bundle import bundle_inputs, read_bundle
    from rootcause.sessions import load_session

    model = load_model(JAX_MLP)
    bundle = read_bundle(xla_bundle)
    session = load_session(bundle, "cpu")
    arrays = bundle_inputs(bundle)
    session.set_inputs(arrays)
    session.call()
    params = {f"block{i}": {"down": arrays[3 * i], "scale": arrays[3 * i + 1], "up": arrays[3 * i + 2]}
              for i in range(model.BLOCKS)}  # the pytree's leaves in jax's order (sorted keys)
    expected = np.asarray(jax.jit(model.model)(params, arrays[-1]))
    np.testing.assert_allclose(session.outputs()[0], expected, rtol=1e-5, atol=1e-5)
    assert f"the same {len(bundle.manifest['kernels'])} kernels as the build's catalog" in session.timer_includes


def test_the_cpu_profile_is_jaxs_profiler_trace_of_every_kernel(xla_bundle: Path, tmp_path: Path) -> None:
    from rootcause.frontends.xla.cpu_profile import capture

    record = capture(xla_bundle, tmp_path, 3)
    events = json.loads((tmp_path / record["file"]).read_text())["traceEvents"]
    names = [k["name"] for k in json.loads((xla_bundle / "manifest.json").read_text())["kernels"]]
    for call in range(3):
        assert [e["name"] for e in events if e["args"]["call"] == call] == names  # program order, each once
    assert all(e["dur"] > 0 for e in events)


def test_xla_options_that_touch_files_are_refused(mlp_case: Path, tmp_path: Path) -> None:
    spec = tmp_path / "v.toml"
    (tmp_path / "model.py").write_text((JAX_MLP / "model.py").read_text())
    text = mlp_case.read_text().replace('xla_disable_hlo_passes = "fusion"', 'xla_dump_to = "/tmp/x"')
    spec.write_text(text)
    proc = _rootcause("build", f"{spec}#xla_nofusion", "--out", tmp_path / "b")
    assert proc.returncode == 2 and "xla_dump_to" in proc.stderr and "refused" in proc.stderr, proc.stderr


def test_xla_against_xla_with_fusion_off_is_a_same_frontend_pair(mlp_case: Path, tmp_path: Path) -> None:
    """XLA's fusion pass off: more kernels a call (what HLO's entry shows), aligned by the ops
    both compiles name (provenance), the headline in the direction the launches say if any."""
    out = tmp_path / "out"
    proc = _rootcause("analyze", f"{mlp_case}#xla", f"{mlp_case}#xla_nofusion", "--out", out)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((out / "attribution.json").read_text())
    a_hlo = (out / "bundles" / "mlp_xla" / "ir" / "optimized.hlo.txt").read_text()
    b_hlo = (out / "bundles" / "mlp_xla_nofusion" / "ir" / "optimized.hlo.txt").read_text()
    assert b_hlo.count(" fusion(") != a_hlo.count(" fusion(")  # the flag changed the compile
    methods = {u["method"] for u in doc["units"]}
    assert "provenance" in methods and "module-path" not in methods and "remainder" not in methods


def test_iree_against_xla_aligns_units_by_module(mlp_case: Path, tmp_path: Path) -> None:
    """Two producers of one JAX model: every unit that holds both sides' kernels was joined by the
    module both compute in, one unit a module instance (IREE's deduplicated executables split per
    call site), each unit's module one of the model's, and no unit joined by remainder."""
    model = load_model(JAX_MLP)
    out = tmp_path / "out"
    proc = _rootcause("analyze", f"{mlp_case}#iree", f"{mlp_case}#xla", "--out", out)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((out / "attribution.json").read_text())
    modules = {f"blocks.{i}.{part}" for i in range(model.BLOCKS) for part in ("norm", "mlp")}
    both = [u for u in doc["units"] if u["kernels_a"] and u["kernels_b"]]
    assert both and all(u["method"] == "module-path" for u in both)
    assert not [u for u in doc["units"] if u["method"] == "remainder"]
    catalogs = {side: {k["name"]: k for k in json.loads(
        (out / "bundles" / name / "manifest.json").read_text())["kernels"]} for side, name in
        (("a", "mlp_iree"), ("b", "mlp_xla"))}
    mlp_units = 0
    for u in both:
        xla_paths = {p for k in u["kernels_b"] for p in catalogs["b"][k.split("#@")[0]]["module_paths"]}
        assert xla_paths <= modules and len({p.split(".")[1] for p in xla_paths}) == 1, u  # one block
        mlp_units += any(p.endswith(".mlp") for p in xla_paths)
    assert mlp_units == model.BLOCKS  # each block's MLP its own unit, IREE's shared matmuls split per site
    # XLA's contractions are library calls (a custom fusion in its HLO); where IREE's generated ones
    # are the slower, the unit says so, and no schedule key of one compiler is held against the other's
    for u in both:
        rules = {f["rule"] for f in u["findings"]}
        assert "schedule" not in rules
        xla_libraries = [catalogs["b"][k.split("#@")[0]]["schedule"].get("library") for k in u["kernels_b"]]
        if any(xla_libraries) and u["delta_ns"]["median"] < 0 and u["significant"]:
            assert "library-call" in rules, u["findings"]


def test_seed_002_block_in_jax_iree_against_xla(tmp_path: Path) -> None:
    """seeds/002's block as its users compare it: the contraction's unit holds both sides'
    contraction kernels; each side computes every sigmoid once per element of its operand
    (N * N * C a side, read from XLA's HLO), so no recomputation is named."""
    out = tmp_path / "out"
    proc = _rootcause("analyze", f"{EINSUM / 'variants.toml'}#iree", f"{EINSUM / 'variants.toml'}#xla", "--out", out)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((out / "attribution.json").read_text())
    assert not [u for u in doc["units"] if u["method"] == "remainder"]
    xla = json.loads((out / "bundles" / "einsum-jax-xla" / "manifest.json").read_text())["kernels"]
    hlo = (out / "bundles" / "einsum-jax-xla" / "ir" / "optimized.hlo.txt").read_text()
    n, c = 24, 8
    # XLA's CPU pipeline expands the sigmoid (logistic) into exp and divide: one exp an element
    exps = [int(np.prod([int(d) for d in dims.split(",")])) for dims in
            re.findall(r"= f32\[([\d,]+)\]\{[\d,]*\} exponential\(", hlo)]
    assert sum(exps) == 2 * n * n * c
    assert sum(k["evaluations"].get("exp", 0) for k in xla) == 2 * n * n * c
    assert not [f for f in doc.get("findings", []) if f.get("rule") == "recomputation"]
