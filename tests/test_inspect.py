"""`rootcause inspect` end to end, on binaries built here by the real nvcc/ptxas (PyPI), TVM
and IREE, checked against cuobjdump --dump-resource-usage and ptxas -v parsed in this file,
and against the metadata IREE dumps beside its hsaco.
"""
from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from rootcause import gpus, cuda_tools
from rootcause.inspect import ROW_KEYS

NVCC = cuda_tools.find_tool("nvcc")
CUOBJDUMP = cuda_tools.find_tool("cuobjdump")
PTXAS = cuda_tools.find_tool("ptxas")
needs_cuda = pytest.mark.skipif(not (NVCC and CUOBJDUMP and PTXAS), reason="PyPI nvcc/cuobjdump missing")

KERNELS_CU = r"""
__global__ void add(float* a, const float* b, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) a[i] += b[i];
}
__global__ void __launch_bounds__(128) reverse(float* a) {
  __shared__ float s[256];
  s[threadIdx.x] = a[threadIdx.x]; __syncthreads(); a[threadIdx.x] = s[255 - threadIdx.x];
}
__global__ void local_array(float* a) {
  float v[200];
  for (int i = 0; i < 200; i++) v[i] = a[i * threadIdx.x];
  float s = 0; for (int i = 0; i < 200; i++) s += v[(i * 7) % 200] * v[i];
  a[threadIdx.x] = s;
}
// 1024 threads, 2 blocks per SM: ptxas must fit 32 registers and spills the rest.
__global__ void __launch_bounds__(1024, 2) spiller(const float* a, float* b) {
  float r[48];
  #pragma unroll
  for (int i = 0; i < 48; i++) r[i] = a[threadIdx.x * 48 + i];
  float acc = 0;
  #pragma unroll
  for (int i = 0; i < 48; i++) for (int j = 0; j < 48; j++) acc += r[i] * r[(i * j) % 48];
  b[threadIdx.x] = acc;
}
"""

MANGLED = {"_Z3addPfPKfi", "_Z7reversePf", "_Z11local_arrayPf", "_Z7spillerPKfPf"}


def run_inspect(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rootcause", "inspect", *map(str, args)],
                          capture_output=True, text=True, timeout=300)


def rows_of(*args: str) -> list[dict]:
    proc = run_inspect(*args, "--format", "json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


# ---- independent sources of truth ------------------------------------------------------------

def cuobjdump_resources(path: Path, arch: str | None = None) -> dict[tuple[str, str], dict[str, int]]:
    """(arch, function) -> {'REG':..,'STACK':..,'SHARED':..,'LOCAL':..,'CONSTANT[0]':..}.

    cuobjdump prints 'arch = sm_XY' per fatbin entry; a bare cubin has none: pass arch."""
    out = subprocess.run([str(CUOBJDUMP), "--dump-resource-usage", str(path)], capture_output=True,
                         text=True, check=True).stdout
    res, func = {}, None
    for line in out.splitlines():
        if m := re.match(r"arch = (sm_\d+a?)", line.strip()):
            arch = m.group(1)
        elif m := re.match(r"\s*Function (\S+):", line):
            func = m.group(1)
        elif func and "REG:" in line:
            res[(arch, func)] = {k: int(v) for k, v in re.findall(r"([A-Z]+(?:\[\d\])?):(\d+)", line)}
            func = None
    return res


def cuobjdump_listing(path: Path) -> list[tuple[str, str]]:
    """The code objects cuobjdump lists in a fatbin or host object: ('ELF'|'PTX', arch), in order."""
    out = subprocess.run([str(CUOBJDUMP), "--list-elf", "--list-ptx", str(path)], capture_output=True,
                         text=True, check=True).stdout
    return [(m.group(1), m.group(2)) for m in re.finditer(r"^(ELF|PTX) file\s+\d+: \S*?\.(sm_\d+a?)\.(?:cubin|ptx)$",
                                                            out, re.M)]


def ptxas_v(ptx: Path, arch: str) -> dict[str, dict[str, int]]:
    out = subprocess.run([str(PTXAS), "-v", f"-arch={arch}", str(ptx), "-o", os.devnull],
                         capture_output=True, text=True, check=True)
    facts, cur = {}, None
    for line in (out.stdout + out.stderr).splitlines():
        if m := re.search(r"Compiling entry function '(\S+)'", line):
            cur = facts.setdefault(m.group(1), {})
        elif cur is not None and (m := re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", line)):
            cur["spills"] = int(m.group(1)) + int(m.group(2))
        elif cur is not None and (m := re.search(r"Used (\d+) registers", line)):
            cur["registers"] = int(m.group(1))
            s = re.search(r"(\d+) bytes smem", line)
            cur["smem"] = int(s.group(1)) if s else 0
    return facts


# ---- artifacts built once per session --------------------------------------------------------

@pytest.fixture(scope="session")
def cuda(tmp_path_factory) -> dict[str, Path]:
    if not (NVCC and CUOBJDUMP and PTXAS):
        pytest.skip("PyPI nvcc/cuobjdump missing")
    d = tmp_path_factory.mktemp("cuda")
    (d / "k.cu").write_text(KERNELS_CU)

    def nvcc(*args):
        subprocess.run([str(NVCC), *args, str(d / "k.cu")], check=True, capture_output=True, cwd=d)

    nvcc("-cubin", "-arch=sm_90", "-o", "k.cubin")
    nvcc("-ptx", "-arch=sm_80", "-o", "k.ptx")
    nvcc("-fatbin", "-gencode", "arch=compute_80,code=sm_80", "-gencode", "arch=compute_90,code=[sm_90,compute_90]",
         "-o", "k.fatbin")
    nvcc("-c", "-gencode", "arch=compute_86,code=sm_86", "-o", "k.o")
    # PTX that pins its block size: .reqntid on the add kernel.
    ptx = (d / "k.ptx").read_text()
    (d / "reqntid.ptx").write_text(re.sub(r"(\.entry _Z3addPfPKfi\([^)]*\))", r"\1\n.reqntid 256, 1, 1", ptx, count=1))
    return {p.name: p for p in d.iterdir()}


def test_cubin_rows_match_cuobjdump(cuda):
    rows = rows_of(cuda["k.cubin"])
    truth = cuobjdump_resources(cuda["k.cubin"], "sm_90")
    assert {r["name"] for r in rows} == MANGLED
    for r in rows:
        t = truth[("sm_90", r["name"])]
        assert (r["format"], r["arch"], r["file"]) == ("cubin", "sm_90", str(cuda["k.cubin"]))
        assert r["registers"] == t["REG"]
        assert r["stack_bytes"] == t["STACK"]
        assert list(r) == list(ROW_KEYS)
    by = {r["name"]: r for r in rows}
    assert by["_Z7reversePf"]["max_threads_per_block"] == 128
    assert by["_Z11local_arrayPf"]["stack_bytes"] >= 800  # float v[200] lives on the stack


def test_ptx_rows_match_ptxas_v(cuda):
    rows = rows_of(cuda["k.ptx"])
    truth = ptxas_v(cuda["k.ptx"], "sm_80")  # the PTX .target
    assert {r["name"] for r in rows} == MANGLED
    for r in rows:
        t = truth[r["name"]]
        assert (r["format"], r["arch"]) == ("ptx->ptxas", "sm_80")
        assert (r["registers"], r["spills"], r["shared_bytes"]) == (t["registers"], t["spills"], t["smem"])
    spiller = next(r for r in rows if r["name"] == "_Z7spillerPKfPf")
    assert spiller["registers"] <= 32 and spiller["spills"] > 0


def test_ptx_with_arch_and_reqntid_gets_occupancy(cuda):
    rows = rows_of(cuda["reqntid.ptx"], "--arch", "sm_90")
    truth = ptxas_v(cuda["reqntid.ptx"], "sm_90")
    add = next(r for r in rows if r["name"] == "_Z3addPfPKfi")
    assert add["arch"] == "sm_90" and add["block"] == [256, 1, 1]
    assert add["registers"] == truth["_Z3addPfPKfi"]["registers"]
    occ = gpus.occupancy("sm_90", 256, truth["_Z3addPfPKfi"]["registers"], 0)
    assert (add["occupancy"], add["occupancy_limiter"]) == (round(occ.occupancy, 4), occ.limiter)
    others = [r for r in rows if r["name"] != "_Z3addPfPKfi"]
    assert all(r["block"] is None and r["occupancy"] is None for r in others)


def test_fatbin_has_every_entry_and_arch_filter(cuda):
    rows = rows_of(cuda["k.fatbin"])
    truth = cuobjdump_resources(cuda["k.fatbin"])
    cubin_rows = [r for r in rows if r["format"] == "fatbin/cubin"]
    assert {(r["arch"], r["name"]) for r in cubin_rows} == {(a, n) for a in ("sm_80", "sm_90") for n in MANGLED}
    for r in cubin_rows:
        assert r["registers"] == truth[(r["arch"], r["name"])]["REG"]
        assert r["file"] == str(cuda["k.fatbin"])
    only90 = rows_of(cuda["k.fatbin"], "--arch", "sm_90", "--block", "128")
    assert {(r["format"], r["arch"]) for r in only90} == {("fatbin/cubin", "sm_90")}
    rev = next(r for r in only90 if r["name"] == "_Z7reversePf")
    occ = gpus.occupancy("sm_90", 128, truth[("sm_90", "_Z7reversePf")]["REG"], rev["shared_bytes"])
    assert rev["block"] == [128, 1, 1] and rev["occupancy"] == round(occ.occupancy, 4)


def test_ptx_beside_a_cubin_of_its_arch_is_not_assembled(cuda, tmp_path):
    # k.fatbin: code=sm_80, code=[sm_90,compute_90]. cuobjdump lists an sm_90 ELF and an sm_90
    # PTX: the PTX is what the sm_90 cubin was built from, so rows come from the cubins only,
    # the very set cuobjdump --dump-resource-usage reports.
    listing = cuobjdump_listing(cuda["k.fatbin"])
    assert sorted(listing) == [("ELF", "sm_80"), ("ELF", "sm_90"), ("PTX", "sm_90")]
    proc = run_inspect(cuda["k.fatbin"], "--format", "json")
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    assert {(r["arch"], r["name"]) for r in rows} == set(cuobjdump_resources(cuda["k.fatbin"]))
    assert all(r["format"] == "fatbin/cubin" for r in rows)
    (note,) = [line for line in proc.stderr.splitlines() if "PTX not assembled" in line]
    assert "fatbin entry ptx sm_90 @ offset" in note
    from rootcause.inspect import inspect_paths
    skipped = {(r.arch, r.name) for r in inspect_paths([cuda["k.fatbin"]]).records if "ptx_skipped" in r.extra}
    assert skipped == {("sm_90", n) for n in MANGLED}

    # PTX for an arch no cubin covers (compute_90 beside an sm_80 cubin) is still assembled.
    subprocess.run([str(NVCC), "-fatbin", "-gencode", "arch=compute_80,code=sm_80", "-gencode",
                    "arch=compute_90,code=compute_90", str(cuda["k.cu"]), "-o", "p.fatbin"],
                   check=True, capture_output=True, cwd=tmp_path)
    assert sorted(cuobjdump_listing(tmp_path / "p.fatbin")) == [("ELF", "sm_80"), ("PTX", "sm_90")]
    rows = rows_of(tmp_path / "p.fatbin")
    assert {(r["format"], r["arch"], r["name"]) for r in rows} == (
        {("fatbin/cubin", "sm_80", n) for n in MANGLED} | {("fatbin/ptx->ptxas", "sm_90", n) for n in MANGLED})


def test_host_object_with_nv_fatbin(cuda):
    rows = rows_of(cuda["k.o"])
    truth = cuobjdump_resources(cuda["k.o"])
    assert {r["name"] for r in rows} == MANGLED
    for r in rows:
        assert r["format"] == "host-elf/fatbin/cubin" and r["arch"] == "sm_86"
        assert r["registers"] == truth[("sm_86", r["name"])]["REG"]


# Two objects linked into one: `ld -r` concatenates their .nv_fatbin sections, one container
# each. magic.cu's initialized device data is the fatbin magic, so its uncompressed sm_90 cubin
# holds those bytes; other.cu has only sm_80 code, a cubin and PTX the driver JITs elsewhere.
MAGIC_CU = r"""
__device__ unsigned int magic_word[4] = {0xBA55ED50u, 0x00100001u, 0xBA55ED50u, 0u};
extern "C" __global__ void magic_kernel(unsigned int* out) { out[threadIdx.x] = magic_word[threadIdx.x & 3]; }
"""
OTHER_CU = r"""
extern "C" __global__ void other_kernel(float* o) {
  __shared__ float t[64];
  t[threadIdx.x & 63] = o[threadIdx.x]; __syncthreads(); o[threadIdx.x] = t[(threadIdx.x + 1) & 63] * 2.f;
}
"""


@pytest.fixture(scope="session")
def linked(tmp_path_factory) -> Path:
    ld = shutil.which("ld")
    if not (NVCC and CUOBJDUMP and PTXAS and ld):
        pytest.skip("PyPI nvcc/cuobjdump or ld missing")
    d = tmp_path_factory.mktemp("linked")
    (d / "magic.cu").write_text(MAGIC_CU)
    (d / "other.cu").write_text(OTHER_CU)
    for src, arch in (("magic", ["-arch=sm_90"]), ("other", ["-gencode", "arch=compute_80,code=[sm_80,compute_80]"])):
        subprocess.run([str(NVCC), "-c", *arch, f"{src}.cu", "-o", f"{src}.o"], check=True, capture_output=True, cwd=d)
    subprocess.run([ld, "-r", "magic.o", "other.o", "-o", "both.o"], check=True, capture_output=True, cwd=d)
    return d / "both.o"


def test_nv_fatbin_section_with_several_containers(linked, tmp_path):
    from elftools.elf.elffile import ELFFile
    with linked.open("rb") as f:
        section = ELFFile(f).get_section_by_name(".nv_fatbin").data()
    magic = (0xBA55ED50).to_bytes(4, "little")
    # Two objects, two containers; more magics than that means one sits inside a cubin.
    assert section.count(magic) > 2, "the cubin does not hold the magic: the test proves nothing"
    truth = cuobjdump_resources(linked)
    assert set(truth) == {("sm_90", "magic_kernel"), ("sm_80", "other_kernel")}
    rows = rows_of(linked)
    cubins = {(r["arch"], r["name"]): r for r in rows if r["format"] == "host-elf/fatbin/cubin"}
    assert cubins.keys() == truth.keys()
    for key, r in cubins.items():
        assert (r["registers"], r["stack_bytes"]) == (truth[key]["REG"], truth[key]["STACK"]), key
    # Each container's PTX has a cubin of its arch beside it (cuobjdump lists both): not assembled.
    assert sorted(cuobjdump_listing(linked)) == [("ELF", "sm_80"), ("ELF", "sm_90"), ("PTX", "sm_80"), ("PTX", "sm_90")]
    assert len(rows) == len(cubins)
    proc = run_inspect(linked)
    assert "2 PTX entries not assembled" in proc.stderr

    # --arch sm_90: per container, what the driver loads: magic's cubin, other's PTX JIT-compiled.
    subprocess.run([str(CUOBJDUMP), "-xptx", "all", str(linked)], check=True, capture_output=True, cwd=tmp_path)
    (other_ptx,) = tmp_path.glob("*.sm_80.ptx")
    on90 = {r["name"]: r for r in rows_of(linked, "--arch", "sm_90")}
    assert {n: (r["format"], r["arch"]) for n, r in on90.items()} == {
        "magic_kernel": ("host-elf/fatbin/cubin", "sm_90"), "other_kernel": ("host-elf/fatbin/ptx->ptxas", "sm_90")}
    facts = ptxas_v(other_ptx, "sm_90")["other_kernel"]
    assert (on90["other_kernel"]["registers"], on90["other_kernel"]["shared_bytes"]) == (facts["registers"], facts["smem"])
    # sm_86 runs other's sm_80 cubin (same major); magic's sm_90 code loads nowhere below sm_90.
    proc = run_inspect(linked, "--arch", "sm_86", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    assert [(r["name"], r["arch"]) for r in json.loads(proc.stdout)] == [("other_kernel", "sm_80")]
    assert "fatbin container 0: no cubin or PTX loads on sm_86" in proc.stderr


def test_directory_recursion_and_output_formats(cuda, tmp_path):
    d = tmp_path / "tree" / "sub"
    d.mkdir(parents=True)
    (d / "a.bin").write_bytes(cuda["k.cubin"].read_bytes())  # names mean nothing: magic decides
    (d.parent / "notes.txt").write_text("not a binary\n")
    rows = rows_of(tmp_path / "tree")
    assert sorted(r["name"] for r in rows) == sorted(MANGLED)
    table = run_inspect(tmp_path / "tree").stdout.splitlines()
    assert table[0].split()[:3] == ["name", "file", "format"] and len(table) == 1 + len(MANGLED)
    md = run_inspect(tmp_path / "tree", "--format", "markdown").stdout.splitlines()
    assert md[0].startswith("| name | file | format |") and md[1].startswith("|---|")
    assert all(line.count("|") == len(ROW_KEYS) for line in md)  # code_bytes (a CPU function's) left out of a GPU table
    out = tmp_path / "rows.csv"
    proc = run_inspect(tmp_path / "tree", "--format", "csv", "--out", out)
    assert proc.returncode == 0 and proc.stdout == ""
    parsed = list(csv.DictReader(io.StringIO(out.read_text())))
    assert tuple(parsed[0]) == ROW_KEYS and len(parsed) == len(MANGLED)
    assert not list(out.parent.glob(".rows.csv.*"))  # the temporary file was renamed away


def test_directory_reads_whole_kernel_files_and_skips_large_others(cuda, tmp_path):
    # A directory scan detects formats from a file's head: a large non-kernel file is skipped
    # unread, a large kernel file is still read to its end. Two containers 300 KiB apart (zero
    # padding between containers is allowed) put the second one past the head.
    from rootcause.inspect import HEAD_BYTES
    single = cuda["k.fatbin"].read_bytes()
    (tmp_path / "two.fatbin").write_bytes(single + bytes(300 * 1024) + single)
    (tmp_path / "inputs.npy").write_bytes(b"\x93NUMPY\x01\x00" + os.urandom(HEAD_BYTES * 2))
    assert len(single) < HEAD_BYTES < (tmp_path / "two.fatbin").stat().st_size - len(single)
    one = rows_of(cuda["k.fatbin"])
    proc = run_inspect(tmp_path, "--format", "json")
    assert proc.returncode == 0, proc.stderr
    assert sorted(r["name"] for r in json.loads(proc.stdout)) == sorted(r["name"] for r in one * 2)
    assert "skipped 1 file(s) with no kernel format" in proc.stderr


def _bad_inputs(cuda, tmp_path: Path) -> dict[str, Path]:
    cubin = cuda["k.cubin"].read_bytes()
    bad = {
        "truncated": cubin[: len(cubin) // 3],
        "random": os.urandom(4096),
        "wrong_magic": b"\x7fELG" + cubin[4:],
        "arm_elf": _with_machine(cuda["k.o"].read_bytes(), 40),  # an ARM (32-bit) object
        "fatbin_garbage": (0xBA55ED50).to_bytes(4, "little") + os.urandom(200),
        "bad_ptx": b".version 8.0\n.target sm_80\n.address_size 64\n.visible .entry f() { bogus; }\n",
    }
    paths = {}
    for name, data in bad.items():
        paths[name] = tmp_path / name
        paths[name].write_bytes(data)
    return paths


def _with_machine(elf: bytes, machine: int) -> bytes:
    return elf[:18] + machine.to_bytes(2, "little") + elf[20:]


def test_bad_files_one_line_each_others_still_reported(cuda, tmp_path):
    bad = _bad_inputs(cuda, tmp_path)
    proc = run_inspect(cuda["k.cubin"], *bad.values(), "--format", "json")
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if not line.startswith("rootcause inspect: note:")]
    assert len(lines) == len(bad), proc.stderr
    for line, path in zip(lines, bad.values()):
        assert line.startswith(f"rootcause inspect: {path}: "), line
        assert len(line.split(": ")) >= 3  # FILE: PLACE: WHAT
    assert "line 4" in lines[-1]  # ptxas names the PTX line
    assert "e_machine 40" in lines[3]
    assert {r["name"] for r in json.loads(proc.stdout)} == MANGLED


def test_usage_errors_are_one_line():
    proc = run_inspect("/nonexistent/x.cubin", "--block", "0x2")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "--block" in proc.stderr


# ---- AMD, IREE, TVM: built with the real compilers -------------------------------------------

MATMUL_MLIR = """
func.func @mm(%a: tensor<64x128xf32>, %b: tensor<128x64xf32>) -> tensor<64x64xf32> {
  %c0 = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<64x64xf32>
  %f = linalg.fill ins(%c0 : f32) outs(%e : tensor<64x64xf32>) -> tensor<64x64xf32>
  %r = linalg.matmul ins(%a, %b : tensor<64x128xf32>, tensor<128x64xf32>) outs(%f : tensor<64x64xf32>) -> tensor<64x64xf32>
  return %r : tensor<64x64xf32>
}
"""


@pytest.fixture(scope="session")
def iree(tmp_path_factory) -> Path:
    compiler = Path(sys.executable).parent / "iree-compile"
    if not compiler.is_file():
        pytest.skip("iree-compile not installed")
    d = tmp_path_factory.mktemp("iree")
    (d / "mm.mlir").write_text(MATMUL_MLIR)
    subprocess.run([str(compiler), "mm.mlir", "--iree-hal-target-device=hip", "--iree-rocm-target=gfx942",
                    "--iree-hal-dump-executable-binaries-to=bin", "--iree-hal-dump-executable-intermediates-to=ir",
                    "-o", "mm_hip.vmfb"], check=True, capture_output=True, cwd=d)
    subprocess.run([str(compiler), "mm.mlir", "--iree-hal-target-device=cuda", "--iree-cuda-target=sm_80",
                    "-o", "mm_cuda.vmfb"], check=True, capture_output=True, cwd=d)
    return d


def _rocmasm_metadata(asm: str) -> dict[str, int]:
    """The YAML metadata LLVM prints at the end of the .rocmasm it assembled the hsaco from."""
    keys = ("vgpr_count", "sgpr_count", "agpr_count", "group_segment_fixed_size", "wavefront_size")
    return {k: int(m.group(1)) for k in keys if (m := re.search(rf"^\s+\.{k}:\s+(\d+)", asm, re.M))}


def test_hsaco_and_vmfb_match_llvm_metadata(iree):
    hsaco = next((iree / "bin").glob("*.hsaco"))
    meta = _rocmasm_metadata(next((iree / "ir").glob("*.rocmasm")).read_text())
    for path, fmt in ((hsaco, "hsaco"), (iree / "mm_hip.vmfb", "vmfb/hsaco")):
        (r,) = rows_of(path)
        assert (r["format"], r["arch"], r["wavefront_size"]) == (fmt, "gfx942", meta["wavefront_size"])
        assert (r["registers"], r["sgpr"]) == (meta["vgpr_count"], meta["sgpr_count"])
        assert r["agpr"] == meta.get("agpr_count", 0)
        assert r["shared_bytes"] == meta["group_segment_fixed_size"]
        occ = gpus.occupancy("gfx942", r["block"][0] * r["block"][1] * r["block"][2], r["registers"],
                             r["shared_bytes"], sgprs=r["sgpr"], agprs=r["agpr"])
        assert r["occupancy"] == round(occ.occupancy, 4)


def test_cuda_vmfb_ptx_goes_through_ptxas(iree):
    rows = rows_of(iree / "mm_cuda.vmfb")
    assert rows and all(r["format"] == "vmfb/ptx->ptxas" and r["arch"] == "sm_80" for r in rows)
    assert all(isinstance(r["registers"], int) and r["registers"] > 0 for r in rows)


TVM_BUILD = r"""
import sys
import tvm
import tvm.support.nvcc
from tvm.script import tirx as T

@T.prim_func
def scale(A: T.Buffer((4096,), "float32"), B: T.Buffer((4096,), "float32")):
    T.func_attr({"global_symbol": "scale", "tir.noalias": True})
    for bx in T.thread_binding(32, thread="blockIdx.x"):
        for tx in T.thread_binding(128, thread="threadIdx.x"):
            B[bx * 128 + tx] = A[bx * 128 + tx] * T.float32(2)

target = tvm.target.Target({"kind": "cuda", "arch": "sm_90"}, host={"kind": "llvm", "mcpu": "generic"})
with target:
    lib = tvm.compile(tvm.IRModule({"scale": scale}), target=target)
lib.export_library(sys.argv[1])
"""


@pytest.fixture(scope="session")
def tvm_so(tmp_path_factory) -> Path:
    pytest.importorskip("tvm")
    if NVCC is None:
        pytest.skip("nvcc missing")
    d = tmp_path_factory.mktemp("tvm")
    (d / "build.py").write_text(TVM_BUILD)
    env = dict(os.environ, TVM_CUDA_COMPILE_MODE="nvcc",
               PATH=f"{NVCC.parent}{os.pathsep}{os.environ.get('PATH', '')}")
    if not cuda_tools.real_driver_present():
        env["LD_LIBRARY_PATH"] = f"{cuda_tools.libcuda_stub_dir()}{os.pathsep}{env.get('LD_LIBRARY_PATH', '')}"
    subprocess.run([sys.executable, str(d / "build.py"), str(d / "scale.so")], check=True,
                   capture_output=True, env=env, timeout=300)
    return d / "scale.so"


def test_tvm_library_rows_and_launch_tags(tvm_so, tmp_path):
    (r,) = rows_of(tvm_so)
    assert (r["name"], r["format"], r["arch"]) == ("scale_kernel", "tvm-so/fatbin/cubin", "sm_90")
    # Independent check: pull the fatbin out of the .so by its magic and ask cuobjdump.
    data = tvm_so.read_bytes()
    start = data.find((0xBA55ED50).to_bytes(4, "little"))
    size = int.from_bytes(data[start + 8:start + 16], "little") + 16  # fatbin header: u64 size
    (tmp_path / "x.fatbin").write_bytes(data[start:start + size])
    truth = cuobjdump_resources(tmp_path / "x.fatbin")
    assert r["registers"] == truth[("sm_90", "scale_kernel")]["REG"]
    from rootcause.inspect import inspect_paths

    (rec,) = inspect_paths([tvm_so]).records
    assert rec.extra["launch_param_tags"] == ["blockIdx.x", "threadIdx.x"]


def test_bundle_directory_uses_catalog_block(tvm_so, tmp_path):
    bundle = tmp_path / "bundle"
    (bundle / "binaries").mkdir(parents=True)
    (bundle / "module.so").write_bytes(tvm_so.read_bytes())
    manifest = {"name": "scale", "frontend": "tvm", "target": "cuda:sm_90", "module": "module.so",
                "binaries": [], "kernels": [{"name": "scale_kernel", "function": "scale",
                                             "launch": {"grid": [32, 1, 1], "block": [128, 1, 1]}}]}
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    (r,) = rows_of(bundle)
    assert r["block"] == [128, 1, 1] and r["file"] == str(bundle / "module.so")
    occ = gpus.occupancy("sm_90", 128, r["registers"], r["shared_bytes"])
    assert (r["occupancy"], r["occupancy_limiter"]) == (round(occ.occupancy, 4), occ.limiter)


def test_truncations_never_escape_as_tracebacks(cuda, iree):
    # Any prefix of a real binary: rows or one ParseError, never another exception.
    from parsers import ParseError
    from rootcause.inspect import inspect_bytes

    blobs = [cuda["k.cubin"], cuda["k.o"], next((iree / "bin").glob("*.hsaco")), iree / "mm_hip.vmfb"]
    for path in blobs:
        data = path.read_bytes()
        for cut in sorted({7, 19, 64, 200, len(data) // 5, len(data) // 2, len(data) - 9, len(data) - 1}):
            try:
                inspect_bytes(data[:cut], f"{path.name}[:{cut}]")
            except ParseError as err:
                assert str(err).startswith(f"{path.name}[:{cut}]") and "\n" not in str(err)


def test_ptx_without_ptxas_says_so(cuda):
    # A machine without ptxas: the same PTX gives names with registers unknown and a note.
    code = ("import sys, rootcause.cuda_tools as t\n"
            "orig = t.find_tool\n"
            "t.find_tool = lambda n: None if n == 'ptxas' else orig(n)\n"
            "from rootcause import cli\n"
            f"sys.exit(cli.main(['inspect', {str(cuda['k.ptx'])!r}, '--format', 'json']))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    assert {r["name"] for r in rows} == MANGLED
    assert all(r["format"] == "ptx" and r["registers"] is None and r["occupancy"] is None for r in rows)
    assert "ptxas not found" in proc.stderr


@given(st.lists(st.sampled_from(["", ".", "..", "a", "b.c", " "]), max_size=6), st.integers(0, 4))
def test_file_names_are_those_pathlib_gives(parts, slashes):
    """inspect names a plain file without importing pathlib: the same string str(Path(p)) is."""
    from rootcause.inspect import _path_name

    for sep in ("/", "//"):
        p = "/" * slashes + sep.join(parts)
        assert _path_name(p) == str(Path(p)), p
    assert _path_name(Path("a//b/")) == "a/b"


def test_an_iree_cpu_bundle_lists_each_dispatch_once_with_code_size_and_stack(tmp_path):
    """The main job's split variant built for llvm: inspect on its bundle lists every dispatch of
    the bundle's catalog (from the compiler's IR, not the ELF) once, the module's and the extracted
    .so's rows merged, each with its code size from readelf's DWARF dump of the extracted ELF."""
    from tests.test_host_elf import readelf_subprograms

    case = Path(__file__).resolve().parent.parent / "fixtures" / "cases" / "einsum_fusion" / "variants.toml"
    env = {**os.environ, "ROOTCAUSE_CACHE": str(tmp_path / "cache")}
    bundle = tmp_path / "bundle"
    subprocess.run([sys.executable, "-m", "rootcause", "build", f"{case}#split_small", "--out", str(bundle)],
                   env=env, check=True, capture_output=True)
    manifest = json.loads((bundle / "manifest.json").read_text())
    dispatches = {k["name"] for k in manifest["kernels"]}
    assert len(dispatches) >= 2
    proc = subprocess.run([sys.executable, "-m", "rootcause", "inspect", str(bundle), "--format", "json"],
                          env=env, capture_output=True, text=True, check=True)
    rows = [r for r in json.loads(proc.stdout) if r["name"] in dispatches]
    assert sorted(r["name"] for r in rows) == sorted(dispatches)
    truth = {}
    for so in bundle.glob("binaries/*.so"):
        truth |= readelf_subprograms(so)
    assert {r["name"]: r["code_bytes"] for r in rows} == {n: truth[n][1] for n in dispatches}
    assert all(isinstance(r["stack_bytes"], int) for r in rows)
