"""A machine with only the README's install (PyPI CUDA tools, no system toolkit) builds fp16 TVM
kernels for cuda:sm_90: cuda_fp16.h includes <nv/target>, which comes from PyPI nvidia-cuda-cccl
in the cuda-tools extra. No GPU is needed (the build uses the libcuda stub).

In CI this runs in a clean venv made from the README's `pip install -e '.[test]'`; here it checks
the same facts in whatever venv runs it: the header nvcc finds is the one that package installed,
and the cubin of an fp16 graph is there, as PyPI's cuobjdump (not rootcause's reader) lists it.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest

from rootcause import cuda_tools
from rootcause.errors import UsageError

ROOT = Path(__file__).resolve().parent.parent
GRAPH = '''from tvm.script import ir as I, relax as R
@I.ir_module
class Module:
    @R.function
    def main(a: R.Tensor((64, 64), dtype="float16"), b: R.Tensor((64, 64), dtype="float16")) -> R.Tensor((64, 64), dtype="float16"):
        with R.dataflow():
            c = R.add(a, b)
            d = R.multiply(c, a)
            R.output(d)
        return d
'''
SPEC = '''name = "fp16"
frontend = "tvm"
source = "graph.py"
target = "cuda:sm_90"
entry = "main"
inputs = [{ shape = [64, 64], dtype = "float16" }, { shape = [64, 64], dtype = "float16" }]
'''


def _extra(name: str) -> list[str]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"][name]


def test_readme_install_brings_cccl():
    """`.[test]` (the README's install) pulls cuda-tools, and cuda-tools pins nvidia-cuda-cccl."""
    self_ref = next(r for r in _extra("test") if r.startswith("rootcause["))
    assert {"compilers", "cuda-tools"} <= set(self_ref[len("rootcause["):-1].split(","))
    pins = dict(req.split("==") for req in _extra("cuda-tools"))
    assert "nvidia-cuda-cccl" in pins
    assert metadata.version("nvidia-cuda-cccl") == pins["nvidia-cuda-cccl"]


def test_nvcc_finds_the_packaged_nv_target():
    if cuda_tools.find_tool("nvcc") is None:
        pytest.skip("no nvcc (install rootcause[cuda-tools])")
    files = [f for f in metadata.files("nvidia-cuda-cccl") or [] if str(f).endswith("nv/target")]
    assert files, "nvidia-cuda-cccl does not ship nv/target"
    packaged = {Path(f.locate()).resolve() for f in files}
    assert cuda_tools.nv_target_header(cuda_tools.cuda_home()).resolve() in packaged


def test_toolkit_without_nv_target_is_one_line(tmp_path, monkeypatch):
    (tmp_path / "bin").mkdir()
    (tmp_path / "include").mkdir()
    fake = tmp_path / "bin" / "nvcc"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.setattr(cuda_tools, "require_tool", lambda name: fake)
    with pytest.raises(UsageError) as err:
        cuda_tools.cuda_home()
    assert str(err.value) == (f"{tmp_path / 'include'}: no nv/target, which cuda_fp16.h includes: install "
                              "rootcause[cuda-tools] (PyPI nvidia-cuda-cccl)")


def test_fp16_graph_builds_for_sm90_with_a_cubin(tmp_path):
    cuobjdump = cuda_tools.find_tool("cuobjdump")
    if cuda_tools.find_tool("nvcc") is None or cuobjdump is None:
        pytest.skip("no nvcc/cuobjdump (install rootcause[cuda-tools])")
    pytest.importorskip("tvm")
    (tmp_path / "graph.py").write_text(GRAPH)
    (tmp_path / "spec.toml").write_text(SPEC)
    env = {**os.environ, "ROOTCAUSE_CACHE": str(tmp_path / "cache"),
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    proc = subprocess.run([sys.executable, "-m", "rootcause", "build", str(tmp_path / "spec.toml"), "--out",
                           str(tmp_path / "bundle"), "--no-cache"], env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr
    fatbins = sorted((tmp_path / "bundle" / "binaries").glob("*.fatbin"))
    assert fatbins, "no fatbin extracted from module.so"
    listing = subprocess.run([str(cuobjdump), "--list-elf", str(fatbins[0])], capture_output=True, text=True,
                             check=True).stdout
    assert ".sm_90.cubin" in listing, listing
    cubins = sorted((tmp_path / "bundle" / "binaries").glob("*.sm_90.cubin"))
    elf = subprocess.run([str(cuobjdump), "-elf", str(cubins[0])], capture_output=True, text=True, check=True).stdout
    entries = [line.split()[-1] for line in elf.splitlines() if " FUNC " in line and " ENTRY " in line]
    assert entries == ["fused_add_multiply_kernel"], elf
    assert "-arch sm_90" in elf
