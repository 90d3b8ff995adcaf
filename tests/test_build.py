"""`rootcause build`: bundles, the build cache, and reference outputs against the TVM VM on CPU."""
import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from rootcause.inputs import make_input

ROOT = Path(__file__).resolve().parent.parent
CASE = ROOT / "fixtures" / "cases" / "pool_fusion"
SPEC = CASE / "variants.toml"


@pytest.fixture(scope="session")
def env(tmp_path_factory):
    return {**os.environ, "ROOTCAUSE_CACHE": str(tmp_path_factory.getbasetemp() / "rootcause-cache")}


# The real rootcause.cli.main, with its table narrowed to `build`: the other commands' modules
# are built by other tests and must not decide whether this one's tests pass.
_CLI = ("import sys; from rootcause import cli; cli.COMMANDS = {'build': cli.COMMANDS['build']}; "
        "sys.exit(cli.main(sys.argv[1:]))")


def cli(env, *args):
    return subprocess.run([sys.executable, "-c", _CLI, "build", *map(str, args)], env=env,
                          capture_output=True, text=True)


@pytest.fixture(scope="session")
def llvm_bundles(env, tmp_path_factory):
    out = {}
    for variant in ("off", "partial", "on"):
        path = tmp_path_factory.getbasetemp() / "cli" / variant
        proc = cli(env, f"{SPEC}#{variant}", "--target", "llvm", "--out", path)
        assert proc.returncode == 0, proc.stderr
        out[variant] = path
    return out


def seed_reference():
    spec = importlib.util.spec_from_file_location("pool_reference", CASE / "reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.reference


@pytest.mark.slow


def test_manifest_follows_the_bundle_contract(llvm_bundles):
    path = llvm_bundles["on"]
    m = json.loads((path / "manifest.json").read_text())
    for key in ("rootcause_version", "name", "frontend", "target", "entry", "module", "spec", "versions",
                "cache_key", "inputs", "reference", "rtol", "atol", "kernels", "binaries", "ir"):
        assert key in m, key
    assert (m["frontend"], m["target"], m["entry"], m["module"]) == ("tvm", "llvm", "main", "module.so")
    assert m["versions"]["tvm"] == "0.27.0.post1" and (path / "module.so").is_file()
    assert all((path / f).is_file() for f in m["ir"] + m["binaries"])
    assert [Path(f).name for f in m["ir"]] == ["00_input.py", "06_FuseOps.py", "07_FuseTIR.py"]
    assert (m["rtol"], m["atol"]) == (2e-4, 2e-5)


def test_inputs_are_drawn_as_the_seed_draws_them(llvm_bundles):
    path = llvm_bundles["on"]
    m = json.loads((path / "manifest.json").read_text())
    want = np.random.default_rng(0).uniform(-.5, .5, (1, 16, 64, 64)).astype("float32")  # the pool_fusion case's inputs()
    row = m["inputs"][0]
    # drawn from the seed: not stored, its digest recorded and the array regenerated from the row
    assert row["file"] is None and not (path / "inputs").exists()
    assert row["sha256"] == hashlib.sha256(want.tobytes()).hexdigest()
    x = make_input(row, path)
    np.testing.assert_array_equal(x, want)
    ref = [np.load(path / r["file"]) for r in m["reference"]]
    for got, expected in zip(ref, seed_reference()(want)):
        np.testing.assert_array_equal(got, expected)


def test_a_drawn_input_that_regenerates_differently_is_refused(llvm_bundles, tmp_path):
    """A bundle whose recorded digest does not match the draw (another NumPy, an edited seed) is
    refused in one line before anything runs: exit 2, the input named."""
    bundle = tmp_path / "bundle"
    shutil.copytree(llvm_bundles["on"], bundle)
    m = json.loads((bundle / "manifest.json").read_text())
    m["inputs"][0]["seed"] += 1
    (bundle / "manifest.json").write_text(json.dumps(m))
    proc = subprocess.run([sys.executable, "-m", "rootcause", "run", str(bundle), str(llvm_bundles["off"]),
                           "--out", str(tmp_path / "run"), "--profile", "none", "--budget-s", "1"],
                          capture_output=True, text=True)
    assert proc.returncode == 2, proc.stderr
    assert "inputs[0]: drawn again from seed 1" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("variant", ["off", "partial", "on"])
def test_reference_matches_the_cpu_vm(llvm_bundles, variant):
    import tvm
    from tvm import relax

    path = llvm_bundles[variant]
    m = json.loads((path / "manifest.json").read_text())
    vm = relax.VirtualMachine(tvm.runtime.load_module(str(path / "module.so")), tvm.cpu())
    x = make_input(m["inputs"][0], path)
    outs = vm["main"](tvm.runtime.tensor(x, device=tvm.cpu()))
    ref = [np.load(path / r["file"]) for r in m["reference"]]
    assert len(outs) == len(ref) == 2
    for got, want in zip(outs, ref):
        np.testing.assert_allclose(got.numpy(), want, rtol=m["rtol"], atol=m["atol"])


def test_second_build_reuses_the_cache(env, llvm_bundles, tmp_path):
    proc = cli(env, f"{SPEC}#on", "--target", "llvm", "--out", tmp_path / "again")
    key = json.loads((llvm_bundles["on"] / "manifest.json").read_text())["cache_key"]
    assert proc.returncode == 0 and f"reused cached build {key}" in proc.stderr
    assert (tmp_path / "again" / "module.so").read_bytes() == (llvm_bundles["on"] / "module.so").read_bytes()


def test_cache_key_follows_source_bytes(tmp_path):
    from rootcause import spec as spec_mod
    from rootcause.build import cache_key

    for name in ("variants.toml", "graph_tvmscript.py", "reference.py", "serial_kernel.py"):
        shutil.copy(CASE / name, tmp_path / name)
    first = cache_key(spec_mod.load(f"{tmp_path / 'variants.toml'}#on"))
    assert first == cache_key(spec_mod.load(f"{tmp_path / 'variants.toml'}#on"))
    assert first != cache_key(spec_mod.load(f"{tmp_path / 'variants.toml'}#off"))
    with open(tmp_path / "graph_tvmscript.py", "a") as f:
        f.write("# edited\n")
    assert first != cache_key(spec_mod.load(f"{tmp_path / 'variants.toml'}#on"))


def test_bad_specs_exit_2_with_one_line(env, tmp_path):
    proc = cli(env, SPEC, "--out", tmp_path / "x")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "holds several variants" in proc.stderr and "off, partial, on, serial" in proc.stderr
    bad = tmp_path / "bad.toml"
    bad.write_text(SPEC.read_text().replace('source = "graph_tvmscript.py"', f'source = "{CASE}/graph_tvmscript.py"\n'
                                            'allow_outside_paths = true')
                   .replace('python = "reference.py', f'python = "{CASE}/reference.py')
                   + '\n[variants.bad.tvm]\nskip_passes = ["FuseOp"]\n')
    proc = cli(env, f"{bad}#bad", "--target", "llvm", "--out", tmp_path / "y")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert 'bad.toml: [variants.bad.tvm].skip_passes[0]: unknown pass "FuseOp"' in proc.stderr
