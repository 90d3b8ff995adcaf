"""Compiler versions as variants, with real IREE releases from the package registry (CI reaches
it): fixtures/cases/iree_versions (PROVENANCE.md) is one matmul that IREE up to 3.7.1 data-tiles
into four dispatches and 3.8.0 compiles as one, about twice as slow.

Slow (each release is a ~500 MB environment, made once and kept under $ROOTCAUSE_ENVS or the
user's cache; builds and measurements go to a fresh cache per session). The truths are outside
rootcause: the executables the release's own iree-compile dumps, the release's own version
string, NumPy's matmul, and the first release with the change (documented, measured with
iree-benchmark-module).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest

from rootcause import envs

ROOT = Path(__file__).resolve().parent.parent
CASE = ROOT / "fixtures" / "cases" / "iree_versions"
SPEC = CASE / "variants.toml"
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory):
    """A fresh build cache for this module; environments stay where the user keeps them."""
    path = tmp_path_factory.mktemp("cache")
    old = {k: os.environ.get(k) for k in ("ROOTCAUSE_CACHE", "ROOTCAUSE_ENVS")}
    os.environ["ROOTCAUSE_ENVS"] = str(envs.envs_root())
    os.environ["ROOTCAUSE_CACHE"] = str(path)
    yield path
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def _cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rootcause", *args], capture_output=True, text=True, cwd=cwd,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))


def _dumped_executables(python: Path, out: Path) -> int:
    """How many executables the release's own iree-compile makes of the case (no rootcause)."""
    code = "from iree.compiler.tools import binaries; print(binaries.find_tool('iree-compile'))"
    compile_tool = subprocess.run([str(python), "-I", "-c", code], capture_output=True, text=True).stdout.strip()
    subprocess.run([compile_tool, str(CASE / "matmul_512.mlir"), "--iree-hal-target-device=local",
                    "--iree-hal-local-target-device-backends=llvm-cpu", "--iree-llvmcpu-target-cpu=generic",
                    f"--iree-hal-dump-executable-sources-to={out}", "-o", str(out / "m.vmfb")], check=True)
    return len(list(out.glob("*.mlir")))


@pytest.fixture(scope="module")
def bundles(cache: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("bundles")
    made = {}
    for v in ("v3_7_1", "v3_8_0"):
        proc = _cli("build", f"{SPEC}#{v}", "--out", str(out / v))
        assert proc.returncode == 0, proc.stderr
        made[v] = out / v
    return made


def test_each_release_builds_its_own_kernels(bundles: dict[str, Path], tmp_path: Path) -> None:
    for v, compiler, runtime in (("v3_7_1", "3.7.1", "3.7.0"), ("v3_8_0", "3.8.0", "3.8.0")):
        manifest = json.loads((bundles[v] / "manifest.json").read_text())
        record = manifest["toolchain"]
        assert record["compiler"] == {"iree-base-compiler": compiler}
        assert record["runtime"] == {"iree-base-runtime": runtime}
        python = Path(record["python"])
        said = subprocess.run([str(python), "-I", "-c", "from iree.compiler import version; print(version.VERSION)"],
                              capture_output=True, text=True).stdout
        assert said.startswith(compiler) and manifest["versions"]["iree-compiler"].startswith(compiler)
        (tmp_path / v).mkdir()
        assert len(manifest["kernels"]) == _dumped_executables(python, tmp_path / v)
    counts = {v: len(json.loads((bundles[v] / "manifest.json").read_text())["kernels"]) for v in bundles}
    assert counts == {"v3_7_1": 4, "v3_8_0": 1}  # the formation change PROVENANCE.md documents


def test_each_bundle_runs_with_its_own_runtime(bundles: dict[str, Path]) -> None:
    """Neither runtime is this process's: each bundle is loaded in a child of its environment,
    and its outputs are NumPy's matmul of the bundle's inputs."""
    from rootcause.artifacts.bundle import bundle_inputs, read_bundle
    from rootcause.sessions import RemoteSession, load_session

    for path in bundles.values():
        bundle = read_bundle(path)
        session = load_session(bundle)
        try:
            assert isinstance(session, RemoteSession)
            a, b = bundle_inputs(bundle)
            session.set_inputs([a, b])
            session.call()
            (got,) = session.outputs()
            np.testing.assert_allclose(got, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-4, atol=1e-4)
            assert session.timer(2)() > 0
        finally:
            session.close()


def test_the_runtime_childs_failures_come_back_typed(bundles: dict[str, Path]) -> None:
    """A call the release's runtime refuses (an input of a shape the module was not compiled for)
    comes back as bad input, one line naming the function and the dimension; a child that died
    (what a crash of the runtime does) answers as a failed tool."""
    from rootcause.artifacts.bundle import bundle_inputs, read_bundle
    from rootcause.errors import ToolFailed, UsageError
    from rootcause.sessions import load_session

    bundle = read_bundle(bundles["v3_8_0"])
    session = load_session(bundle)
    try:
        a, b = bundle_inputs(bundle)
        session.set_inputs([np.ascontiguousarray(a[:, :7]), b])
        with pytest.raises(UsageError, match=r"refused the bundle's inputs.*expected 512 but have 7") as refused:
            session.call()
        assert "\n" not in str(refused.value) and "Traceback" not in str(refused.value)
        session._proc.kill()
        session._proc.wait()
        with pytest.raises(ToolFailed, match="the runtime child .* ended"):
            session.call()
    finally:
        session.close()


def test_run_measures_two_releases_interleaved(bundles: dict[str, Path], tmp_path: Path) -> None:
    proc = _cli("run", str(bundles["v3_7_1"]), str(bundles["v3_8_0"]), "--out", str(tmp_path / "run"),
                "--profile", "none", "--budget-s", "2")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((tmp_path / "run" / "measurement.json").read_text())
    assert all(c.get("ok", True) for c in doc["verification"]["checks"])
    timers = doc["measurement"]["timers"]
    assert all("child process of" in timers[n] for n in timers)
    assert len(doc["measurement"]["ratios"]) == 1


def test_bisect_by_catalog_finds_3_8_0(cache: Path, tmp_path: Path) -> None:
    proc = _cli("bisect", f"{SPEC}#v3_3_0", "--good", "3.3.0", "--bad", "3.8.0", "--by", "catalog",
                "--out", str(tmp_path / "b"), "--no-analyze")
    assert proc.returncode == 0, proc.stderr
    result = json.loads((tmp_path / "b" / "bisect.json").read_text())
    labels = [c["label"] for c in result["candidates"]]
    assert labels == ["3.3.0", "3.4.0", "3.5.0", "3.6.0", "3.7.0", "3.7.1", "3.8.0"]  # PyPI's releases
    assert (result["last_good"], result["first_bad"]) == ("3.7.1", "3.8.0")
    tested = [c["label"] for c in result["candidates"] if c["status"] != "untested"]
    assert len(tested) <= 5  # a bisection, not a sweep: good, bad and log2(5) between


def test_a_bisect_whose_analyze_cannot_finish_does_not_exit_0(cache: Path, tmp_path: Path) -> None:
    """3.7.1 against 3.8.0 on the CPU: iree-base-runtime 3.7 has no host-execution profiler, so
    the follow-on analyze cannot attribute; the bisection stands, and the exit status says the
    command did not do all it was asked."""
    proc = _cli("bisect", f"{SPEC}#v3_3_0", "--good", "3.3.0", "--bad", "3.8.0", "--by", "catalog",
                "--out", str(tmp_path / "b"))
    assert proc.returncode == 2, proc.stderr
    assert json.loads((tmp_path / "b" / "bisect.json").read_text())["first_bad"] == "3.8.0"
    line = [x for x in proc.stderr.splitlines() if x.startswith("rootcause bisect:")]
    assert len(line) == 1 and "no host-execution profiler" in line[0] and "--no-analyze" in line[0]


def test_bisect_by_time_finds_3_8_0_and_reruns_from_cache(cache: Path, tmp_path: Path) -> None:
    args = ("bisect", f"{SPEC}#v3_3_0", "--good", "3.3.0", "--bad", "3.8.0", "--min-change", "0.2",
            "--budget-s", "3", "--out", str(tmp_path / "b"), "--no-analyze")
    proc = _cli(*args)
    assert proc.returncode == 0, proc.stderr
    result = json.loads((tmp_path / "b" / "bisect.json").read_text())
    assert (result["last_good"], result["first_bad"]) == ("3.7.1", "3.8.0")
    bad = next(c for c in result["candidates"] if c["label"] == "3.8.0")
    assert result["direction"] == "slower" and bad["ratio"]["low"] > 1.2
    again = _cli(*args)
    assert again.returncode == 0 and "measuring" not in again.stderr and "making the environment" not in again.stderr
    assert json.loads((tmp_path / "b" / "bisect.json").read_text())["first_bad"] == "3.8.0"


def test_bisect_refuses_bad_ranges(cache: Path, tmp_path: Path) -> None:
    for args, words in ((("--good", "3.3.0", "--bad", "9.9.9"), "--bad: iree-base-compiler 9.9.9 is not a release"),
                        (("--versions", "3.3.0"), "--versions: give at least two"),
                        (("--versions", "3.3.0,numpy==2.0.0"), "--versions: 'numpy==2.0.0'"),
                        (("--good", "3.3.0"), "--good and --bad")):
        proc = _cli("bisect", f"{SPEC}#v3_3_0", *args, "--out", str(tmp_path / "b"))
        assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
        assert words in proc.stderr, proc.stderr


def test_version_order_is_pep_440() -> None:
    """envs.version_key against pip's own PEP 440 implementation."""
    from pip._vendor.packaging.version import Version

    versions = ["3.7.1", "3.7.0", "3.10.0", "3.4.0rc20250415", "3.4.0", "3.4.0.dev1", "3.4.0a1", "0.27.0.post1",
                "0.27.0", "2.9.0", "3.4.0b2", "3.4.0.post1"]
    assert sorted(versions, key=envs.version_key) == sorted(versions, key=Version)



def test_bisect_on_ray_builds_side_by_side_and_finds_what_sequential_finds(cache: Path, tmp_path: Path) -> None:
    """--ray local (2 CPUs): the builds run as Ray tasks and come back through the object
    store; the search is the sequential one's (same verdict for every candidate, same first bad)."""
    pytest.importorskip("ray")
    base = ("bisect", f"{SPEC}#v3_3_0", "--good", "3.3.0", "--bad", "3.8.0", "--by", "catalog", "--no-analyze")
    seq = _cli(*base, "--out", str(tmp_path / "seq"))
    par = _cli(*base, "--out", str(tmp_path / "ray"), "--ray", "local", "--num-cpus", "2", "--max-in-flight", "2")
    assert seq.returncode == 0 and par.returncode == 0, par.stderr
    assert "building on Ray: 3.3.0, 3.8.0, " in par.stderr and "building on Ray" not in seq.stderr
    a, b = (json.loads((tmp_path / x / "bisect.json").read_text()) for x in ("seq", "ray"))
    assert b["first_bad"] == a["first_bad"] == "3.8.0"
    assert [(c["label"], c["status"]) for c in b["candidates"]] == [(c["label"], c["status"]) for c in a["candidates"]]
    for c in b["candidates"]:  # each bundle published here is the one its own release compiled
        path = tmp_path / "ray" / "bundles" / c["label"] / "manifest.json"
        if c["status"] != "untested":
            assert json.loads(path.read_text())["toolchain"]["compiler"] == {"iree-base-compiler": c["label"]}


def test_bisect_refuses_bad_ray_options(cache: Path, tmp_path: Path) -> None:
    proc = _cli("bisect", f"{SPEC}#v3_3_0", "--good", "3.3.0", "--bad", "3.8.0", "--ray", "local",
                "--max-in-flight", "0", "--out", str(tmp_path / "b"))
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == \
        ["rootcause bisect: --max-in-flight: must be >= 1, got 0"], proc.stderr


def _copy_for_gpu_host(bundle: Path, dest: Path) -> Path:
    """A copy of a bundle as the GPU host sees it: the environment that built it is not there
    (its path in the manifest names nothing)."""
    import shutil

    shutil.copytree(bundle, dest)
    manifest = json.loads((dest / "manifest.json").read_text())
    manifest["toolchain"]["python"] = str(dest.parent / "not-on-this-host" / "bin" / "python")
    (dest / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return dest


def test_offline_runtime_environment_from_the_carried_wheel(bundles: dict[str, Path], tmp_path: Path) -> None:
    """ROOTCAUSE_OFFLINE (the GPU host): the bundle's runtime environment is made from the wheel
    in its toolchain/ alone, stripped as gpu/stage_versions.py strips it, over this python's
    packages; the child that runs it imports that release's runtime, and the outputs are NumPy's."""
    raw = tmp_path / "raw"
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "-d", str(raw),
                    "iree-base-runtime==3.8.0"], check=True, capture_output=True)
    (wheel,) = raw.glob("*.whl")
    bundle = _copy_for_gpu_host(bundles["v3_8_0"], tmp_path / "b" / "v3_8_0")
    subprocess.run([sys.executable, str(ROOT / "gpu" / "strip_wheel.py"), str(wheel), str(bundle / "toolchain"),
                    "--store", "--drop", "iree/_runtime_libs_tracy/"], check=True, capture_output=True)
    offline = dict(os.environ, PYTHONPATH=str(ROOT), ROOTCAUSE_OFFLINE="1", ROOTCAUSE_ENVS=str(tmp_path / "envs"))
    proc = subprocess.run([sys.executable, "-m", "rootcause", "run", str(bundle), "--out", str(tmp_path / "run"),
                           "--profile", "none", "--budget-s", "1"], capture_output=True, text=True, env=offline)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((tmp_path / "run" / "measurement.json").read_text())
    assert doc["verification"]["ok"] and [c["against"] for c in doc["verification"]["checks"]] == ["reference"]
    (made,) = (tmp_path / "envs").glob("*/toolchain.json")
    code = ("import importlib.metadata as m, iree.runtime as r, os; "
            "print(m.version('iree-base-runtime'), os.path.isdir(os.path.join(os.path.dirname(r.__file__), "
            "'..', '_runtime_libs_tracy')), r.__file__)")
    said = subprocess.run([str(made.parent / "bin" / "python"), "-I", "-c", code], capture_output=True, text=True,
                          check=True).stdout.split()
    assert said[:2] == ["3.8.0", "False"] and said[2].startswith(str(made.parent))
    assert json.loads(made.read_text())["packages"]["iree-base-runtime"] == "3.8.0"
    # offline, a runtime with no carried wheel stops in one line
    bare = _copy_for_gpu_host(bundles["v3_7_1"], tmp_path / "b" / "v3_7_1")
    proc = subprocess.run([sys.executable, "-m", "rootcause", "run", str(bare), "--out", str(tmp_path / "run2"),
                           "--profile", "none", "--budget-s", "1"], capture_output=True, text=True, env=offline)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "ROOTCAUSE_OFFLINE: iree-base-runtime==3.7.0" in proc.stderr


def test_python_key_builds_and_runs_in_an_existing_environment(bundles: dict[str, Path], tmp_path: Path) -> None:
    """`python = PATH`: the spec names an environment that is already there (here the one made
    for 3.8.0); the build runs in it, the manifest names it, the catalog is that compiler's."""
    import shutil

    python = Path(json.loads((bundles["v3_8_0"] / "manifest.json").read_text())["toolchain"]["python"])
    for name in ("matmul_512.mlir", "reference.py"):
        shutil.copy2(CASE / name, tmp_path / name)
    spec = SPEC.read_text().split("[variants.")[0] + (f'[variants.mine]\npython = "{python}"\n'
                                                      "allow_outside_paths = true\n")
    (tmp_path / "mine.toml").write_text(spec)
    proc = _cli("build", f"{tmp_path / 'mine.toml'}#mine", "--out", str(tmp_path / "bundle"))
    assert proc.returncode == 0, proc.stderr
    record = json.loads((tmp_path / "bundle" / "manifest.json").read_text())
    said = subprocess.run([str(python), "-I", "-c", "from iree.compiler import version; print(version.VERSION)"],
                          capture_output=True, text=True).stdout
    assert record["toolchain"]["source"] == "python" and record["toolchain"]["python"] == str(python)
    assert said.startswith(record["toolchain"]["compiler"]["iree-base-compiler"])
    (tmp_path / "dump").mkdir()
    assert len(record["kernels"]) == _dumped_executables(python, tmp_path / "dump")
    proc = _cli("run", str(tmp_path / "bundle"), "--out", str(tmp_path / "run"), "--profile", "none", "--budget-s", "1")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((tmp_path / "run" / "measurement.json").read_text())
    assert doc["verification"]["ok"] and [c["against"] for c in doc["verification"]["checks"]] == ["reference"]


TVM_CASE = ROOT / "fixtures" / "cases" / "tvm_versions"

# Run by each apache-tvm release's own python, no rootcause: legalize the case with the release's
# CUDA pipeline and print the first kernel's (blockIdx.x, blockIdx.y) launch extents from its TIR.
_TVM_OWN_LAUNCH = """
import re, sys
import tvm
from tvm.relax.backend.cuda import pipeline
from tvm.script import ir as I, relax as R
text = open(sys.argv[1]).read()
mod = tvm.script.from_source(text[text.index("@I.ir_module"):], extra_vars=dict(I=I, R=R))
target = tvm.target.Target({"kind": "cuda", "arch": "sm_90"}, host={"kind": "llvm", "mcpu": "generic"})
with target, tvm.transform.PassContext(opt_level=3):
    mod = tvm.transform.Sequential(pipeline.library_dispatch_passes(target) + pipeline.legalize_passes(target))(mod)
script = mod["sort"].script()
first = script[:script.index('launch_thread("threadIdx.x"', script.index('launch_thread("threadIdx.x"') + 1)]
extent = {a: int(n) for a, n in re.findall(r'launch_thread\\("(blockIdx\\.[xy])", T\\.int64\\((\\d+)\\)\\)', first)}
print(extent["blockIdx.x"], extent["blockIdx.y"])
"""


def test_two_tvm_releases_build_the_sort_with_other_launch_grids(cache: Path, tmp_path: Path) -> None:
    """fixtures/cases/tvm_versions: apache-tvm 0.26.0 and 0.27.0.post1 build the same four CUDA
    kernels of R.sort, and each catalog's launch grid is what that release's own lowering says:
    0.27 puts the 64 rows on blockIdx.x, 0.26 on blockIdx.y."""
    from rootcause import cuda_tools

    if cuda_tools.find_tool("nvcc") is None:
        pytest.skip("no nvcc: install rootcause[cuda-tools]")
    spec = TVM_CASE / "variants.toml"
    grids, names = {}, {}
    for v, release in (("v0_26_0", "0.26.0"), ("v0_27_0", "0.27.0.post1")):
        proc = _cli("build", f"{spec}#{v}", "--out", str(tmp_path / v))
        assert proc.returncode == 0, proc.stderr
        manifest = json.loads((tmp_path / v / "manifest.json").read_text())
        assert manifest["toolchain"]["compiler"] == {"apache-tvm": release}
        kernels = {k["name"]: k for k in manifest["kernels"]}
        names[v] = sorted(kernels)
        python = Path(manifest["toolchain"]["python"])
        env = dict(os.environ, LD_LIBRARY_PATH=str(cuda_tools.libcuda_stub_dir()), PYTHONPATH="")
        own = subprocess.run([str(python), "-c", _TVM_OWN_LAUNCH, str(TVM_CASE / "sort.py")], capture_output=True,
                             text=True, env=env, cwd=tmp_path)
        assert own.returncode == 0, own.stderr[-2000:]
        grids[v] = kernels["sort_kernel"]["launch"]["grid"][:2]
        assert grids[v] == [int(n) for n in own.stdout.split()]
    assert names["v0_26_0"] == names["v0_27_0"] and len(names["v0_26_0"]) == 4
    assert grids == {"v0_26_0": [4, 64], "v0_27_0": [64, 4]}
    # what a report says changed between the two catalogs: the launches, read from the manifests
    from rootcause.artifacts.attribution import catalog_section
    from rootcause.report import kernels

    cats = {x: catalog_section(str(tmp_path / v / "manifest.json")) for x, v in (("a", "v0_26_0"), ("b", "v0_27_0"))}
    said = kernels.launch_changes(cats, "A", "B")
    assert f"Launch of sort_kernel: grid {grids['v0_26_0'][0]}x{grids['v0_26_0'][1]}x1 block 1024x1x1 in A, grid " \
           f"{grids['v0_27_0'][0]}x{grids['v0_27_0'][1]}x1 block 1024x1x1 in B." in said


JAX_MLP = ROOT / "fixtures" / "models" / "jax_mlp" / "variants.toml"


@pytest.fixture(scope="module")
def release_pair(cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """jax_mlp built by iree-base-compiler 3.8.0 against the installed release, for a GPU host."""
    pytest.importorskip("jax")
    out = tmp_path_factory.mktemp("release-pair")
    proc = _cli("analyze", f"{JAX_MLP}#iree_3_8", f"{JAX_MLP}#iree", "--bundle-only", "--target", "cuda:sm_80",
                "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    return out


def test_a_model_exported_here_builds_with_another_release(release_pair: Path) -> None:
    """The 3.8.0 environment has no jax: the export runs in this python, 3.8.0's own iree-compile
    compiles the StableHLO (before, the export ran in the environment: an internal error)."""
    plan = json.loads((release_pair / "plan.json").read_text())
    old = json.loads((release_pair / plan["bundles"]["jax_mlp_iree_3_8"] / "manifest.json").read_text())
    assert old["toolchain"]["compiler"] == {"iree-base-compiler": "3.8.0"}
    assert old["versions"]["iree-compiler"].startswith("3.8.0")
    assert "jax" in old["versions"]


def test_hybrids_another_release_refuses_are_recorded_not_fatal(release_pair: Path) -> None:
    """3.13's executable configurations written into 3.8.0's build: the older iree-compile refuses
    them; A and B are built, each refused hybrid is named with the compiler's failure."""
    plan = json.loads((release_pair / "plan.json").read_text())
    assert {"jax_mlp_iree_3_8", "jax_mlp_iree"} <= set(plan["bundles"])
    assert plan["failed"], "no hybrid refused: 3.8.0 took 3.13's configuration attributes"
    assert all("iree-compile failed" in why for why in plan["failed"].values())


def test_a_pytorch_model_under_another_tvm_release_asks_for_torch(cache: Path, tmp_path: Path) -> None:
    """TVM imports a torch.export program in its own process: apache-tvm 0.26.0's environment
    (fixtures/cases/tvm_versions' pins) has no torch, so a model built there is refused in one line
    that says what to add (before: the build failed inside TVM's importer, exit 3)."""
    pytest.importorskip("torch")
    folder = ROOT / "fixtures" / "models" / "llama"
    shutil.copy(folder / "model.py", tmp_path / "model.py")
    pins = tomllib.loads((TVM_CASE / "variants.toml").read_text())["variants"]["v0_26_0"]["toolchain"]
    (tmp_path / "variants.toml").write_text((folder / "variants.toml").read_text()
                                            + f'\n[variants.old]\nname = "llama_tvm_old"\ntoolchain = {json.dumps(pins)}\n')
    proc = _cli("build", f"{tmp_path / 'variants.toml'}#old", "--out", str(tmp_path / "b"))
    assert proc.returncode == 2, proc.stderr
    line = proc.stderr.strip()
    assert "\n" not in line and "[variants.old].toolchain" in line and "no torch" in line


def test_a_release_pair_plans_no_hybrid_that_differs_only_in_spelling(bundles: dict[str, Path], tmp_path: Path) -> None:
    """3.8.0 against the installed 3.13.0: their pipelines are one pipeline spelled two ways
    (`pipeline = CPUDoubleTilingExpert` against `#iree_cpu.pipeline<DoubleTilingExpert>`, read
    from the configured dumps here), their vector tiles differ. The configuration hybrid names the
    tiles and not the pipeline, keeps 3.8.0's spelling of what means the same, and 3.8.0 builds it."""
    import re

    from rootcause import spec as spec_mod
    from rootcause.artifacts.bundle import read_bundle
    from rootcause.frontends.iree import hybrids

    base = bundles["v3_8_0"]
    proc = _cli("build", f"{SPEC}#installed", "--out", str(tmp_path / "installed"))
    assert proc.returncode == 0, proc.stderr
    other = tmp_path / "installed"
    infos = {}
    for name, path in (("3.8.0", base), ("3.13.0", other)):
        text = next((path / "ir").glob("configured_*.mlir")).read_text()
        infos[name] = re.search(r"translation_info = (#iree_codegen\.translation_info<.*?>)\}", text).group(1)
    assert "CPUDoubleTilingExpert" in infos["3.8.0"] and "#iree_cpu.pipeline<DoubleTilingExpert>" in infos["3.13.0"]
    spec_a = spec_mod.with_target(spec_mod.load(f"{SPEC}#v3_8_0"), "llvm")
    spec_b = spec_mod.with_target(spec_mod.load(f"{SPEC}#installed"), "llvm")
    notes: list[str] = []
    found = hybrids.plan(spec_a, spec_b, read_bundle(base).kernels(), read_bundle(other).kernels(),
                         {"a": base, "b": other}, tmp_path / "hybrids", notes)
    configured = [h for h in found if h.change.get("substitute_configurations") and h.base == "a"
                  and "configuring" in h.description]
    assert len(configured) == 1, [h.description for h in found]
    (hybrid,) = configured
    assert "vector_common_parallel" in hybrid.description and "pipeline" not in hybrid.description
    text = Path(hybrid.change["substitute_configurations"]["main_dispatch_0"]).read_text()
    assert infos["3.8.0"] in text and "#iree_cpu.pipeline" not in text  # 3.8.0's spelling kept
    assert "vector_common_parallel = [8, 4, 0]" in text  # 3.13.0's tiles
    from rootcause.build import build_bundle

    built = build_bundle(hybrid.spec, tmp_path / "hybrid-bundle")
    assert json.loads((built / "manifest.json").read_text())["toolchain"]["compiler"] == {"iree-base-compiler": "3.8.0"}
