"""parsers.tvm_library on TVM 0.27 exports built now (CUDA sm_90 via nvcc + libcuda stub, llvm).

Sources of truth: the build subprocess's own view of the module (the CUDA kernels' names and
the thread axes bound in the scheduled TIR), cuobjdump on the extracted device blob, and the
fatbin magic. The build runs in a subprocess because the libcuda stub must be on
LD_LIBRARY_PATH before TVM loads (docs/GPU_HOST.md).
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from parsers import ParseError, tvm_library
from rootcause.cuda_tools import cuda_home, find_tool, libcuda_stub_dir

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "fixtures" / "binaries"
BUILD = FIX / "tvm" / "build_tvm.py"

def _build(out: Path, kind: str) -> dict:
    env = dict(os.environ)
    if kind == "cuda":
        nvcc = find_tool("nvcc")
        if nvcc is None:
            pytest.skip("nvcc (PyPI nvidia-cuda-nvcc) not installed")
        env.update(LD_LIBRARY_PATH=f"{libcuda_stub_dir()}:{env.get('LD_LIBRARY_PATH', '')}",
                   TVM_CUDA_COMPILE_MODE="nvcc", PATH=f"{nvcc.parent}:{env['PATH']}", CUDA_HOME=str(cuda_home()))
    truth = out.with_suffix(".truth.json")
    subprocess.run([sys.executable, str(BUILD), str(out), kind, str(truth)], check=True, capture_output=True,
                   env=env, timeout=300)
    return json.loads(truth.read_text()) if truth.exists() else {}


@pytest.fixture(scope="session")
def built(tmp_path_factory) -> dict[str, tuple[Path, dict]]:
    out = tmp_path_factory.mktemp("tvm")
    return {kind: (out / f"mm_{kind}.so", _build(out / f"mm_{kind}.so", kind)) for kind in ("cuda", "llvm")}


def test_cuda_module_tree(built):
    path, truth = built["cuda"]
    data = path.read_bytes()
    assert tvm_library.matches(data)
    lib = tvm_library.read_library(data, str(path))
    kinds = [m.kind for m in lib.modules]
    assert kinds == ["vm", "llvm", "cuda"]
    assert lib.modules[0].imports == [1] and lib.modules[1].imports == [2]
    cuda = lib.modules[2]
    assert cuda.blob[:4] == b"\x50\xed\x55\xba" and cuda.blob_format == "fatbin"
    # Kernel names from the CUDA source TVM emitted; launch tags = the thread axes the
    # scheduled TIR binds (the source may drop an axis of extent 1, the tags keep it).
    assert sorted(cuda.functions) == sorted(truth["kernels"])
    for name, tir_tags in truth["kernels"].items():
        tags = [t for t in tir_tags if not t.startswith("vthread")]  # virtual threads are lowered away
        assert tags and cuda.functions[name]["launch_param_tags"] == tags, name
        assert set(truth["source_tags"][name]) <= set(tags)
        assert cuda.functions[name]["arg_types"] == truth["arg_types"][name], name
    # Host PrimFuncs are the library's __tvm_ffi_<name> symbols.
    assert sorted(lib.modules[1].functions) == sorted(truth["host_functions"])


def test_cuda_blob_kernels_match_cuobjdump(built, tmp_path):
    cuobjdump = find_tool("cuobjdump")
    if cuobjdump is None:
        pytest.skip("cuobjdump (PyPI nvidia-cuda-cuobjdump) not installed")
    path, _ = built["cuda"]
    cuda = tvm_library.read_library(path.read_bytes(), str(path)).modules[2]
    blob = tmp_path / "blob.fatbin"
    blob.write_bytes(cuda.blob)
    out = subprocess.run([str(cuobjdump), "-elf", str(blob)], capture_output=True, text=True, check=True).stdout
    assert "arch = sm_90" in out
    names = set(re.findall(r"^\.text\.(\w+)$", out, re.M))
    assert names == set(cuda.functions)


def test_llvm_export(built):
    path, truth = built["llvm"]
    lib = tvm_library.read_library(path.read_bytes(), str(path))
    assert [m.kind for m in lib.modules] == ["vm", "llvm"]
    assert lib.modules[0].type_key == "relax.VMExecutable" and lib.modules[0].blob
    assert sorted(lib.modules[1].functions) == sorted(truth["host_functions"])


def test_fixtures_still_parse():
    lib = tvm_library.read_library((FIX / "tvm" / "mm_cuda_sm90.so").read_bytes(), "fixture")
    assert sorted(lib.modules[2].functions) == ["add_kernel", "matmul_kernel"]
    assert lib.modules[2].functions["add_kernel"]["launch_param_tags"] == ["blockIdx.x", "threadIdx.x"]


def test_not_a_tvm_library():
    host = (FIX / "host" / "mm_embedded_elf_x86_64.so").read_bytes()
    assert not tvm_library.matches(host)
    with pytest.raises(ParseError, match="no __tvm_ffi__library_bin symbol"):
        tvm_library.read_library(host, "iree.so")


REAL = (FIX / "tvm" / "mm_cuda_sm90.so").read_bytes()
BIN_AT = REAL.find(b"relax.VMExecutable") - 80  # mutate around the module tree, not only ELF headers


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, 14000), st.integers(0, 255)), max_size=6), st.booleans())
def test_mutated_input_raises_only_parse_error(flips, in_tree):
    data = bytearray(REAL)
    for at, value in flips:
        pos = BIN_AT + at if in_tree else at % len(data)
        if pos < len(data):
            data[pos] = value
    try:
        tvm_library.read_library(bytes(data), "mutated.so")
    except ParseError as err:
        assert "\n" not in str(err)
