"""parsers.host_elf against binutils readelf on real host binaries.

Inputs: a shared library gcc builds now from a tiny C file, the TVM llvm export and the IREE
llvm-cpu embedded ELF from fixtures/binaries. Truth: `readelf -sW` (defined FUNC, size > 0).
"""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from parsers import ParseError, host_elf
from mutation import byte_writes, written

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "fixtures" / "binaries"
C_SOURCE = """
static int helper(int x) { return x * 3 + 1; }
int scale(int x) { return helper(x) * 2; }
__attribute__((weak)) int weak_fn(int x) { return x - 1; }
int table[16];
"""


@pytest.fixture(scope="session")
def gcc_lib(tmp_path_factory) -> Path:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    out = tmp_path_factory.mktemp("host")
    (out / "k.c").write_text(C_SOURCE)
    subprocess.run([cc, "-O1", "-fno-inline", "-shared", "-fPIC", "-o", str(out / "k.so"), str(out / "k.c")],
                   check=True, capture_output=True)
    return out / "k.so"


def readelf_functions(path: Path, table: str) -> dict[str, tuple[int, int]]:
    out = subprocess.run(["readelf", "-sW", str(path)], capture_output=True, text=True, check=True).stdout
    section = out.split(f"Symbol table '{table}'", 1)[1].split("Symbol table '", 1)[0]
    found = {}
    for line in section.splitlines():
        m = re.match(r"\s*\d+:\s+([0-9a-f]+)\s+(\d+)\s+FUNC\s+\w+\s+\w+\s+(\w+)\s+(\S+)", line)
        if m and m.group(3) not in ("UND", "ABS") and int(m.group(2)) > 0:
            found.setdefault(m.group(4).split("@")[0], (int(m.group(1), 16), int(m.group(2))))
    return found


@pytest.mark.parametrize("which", ["gcc", "tvm", "iree"])
def test_functions_match_readelf(gcc_lib, which):
    path = {"gcc": gcc_lib, "tvm": FIX / "tvm" / "mm_llvm.so",
            "iree": FIX / "host" / "mm_embedded_elf_x86_64.so"}[which]
    data = path.read_bytes()
    assert host_elf.matches(data)
    rows = host_elf.kernels(data, str(path))
    truth = readelf_functions(path, ".symtab")
    if which == "iree":  # its symbols name only the query function: the dispatches come from DWARF
        assert len(truth) == 1
        truth |= readelf_subprograms(path)
        assert len(truth) > 1
    assert {r.name: (r.extra["address"], r.extra["size"]) for r in rows} == truth
    assert all(r.format == "host-elf" and r.arch == "x86_64" for r in rows)
    if which == "gcc":
        by = {r.name: r.extra["binding"] for r in rows}
        assert by["scale"] == "global" and by["weak_fn"] == "weak" and "table" not in by
    if which == "tvm":
        assert {"__tvm_ffi_matmul", "__tvm_ffi_add"} <= set(truth)


def readelf_subprograms(path: Path) -> dict[str, tuple[int, int]]:
    """{name: (low_pc, high_pc as a length)} of each DW_TAG_subprogram, from readelf's DWARF dump."""
    out = subprocess.run(["readelf", "--debug-dump=info", str(path)], capture_output=True, text=True,
                         check=True).stdout
    found = {}
    for block in out.split("(DW_TAG_subprogram)")[1:]:
        block = block.split("Abbrev Number")[0]
        low = re.search(r"DW_AT_low_pc\s*:\s*0x([0-9a-f]+)", block)
        high = re.search(r"DW_AT_high_pc\s*:\s*0x([0-9a-f]+)", block)
        name = re.search(r"DW_AT_name\s*:\s*(?:\(indirect string, offset: 0x[0-9a-f]+\):\s*)?(\S+)", block)
        if low and high and name:
            found[name.group(1)] = (int(low.group(1), 16), int(high.group(1), 16))
    return found


def objdump_stack(path: Path, address: int) -> int | None:
    """The bytes a function's prologue reserves, read from objdump's disassembly of its first
    instructions: 8 a push, then the immediate of `sub $N,%rsp`; None at `and $N,%rsp`."""
    out = subprocess.run(["objdump", "-d", f"--start-address={address}", f"--stop-address={address + 64}",
                          str(path)], capture_output=True, text=True, check=True).stdout
    pushed = 0
    for line in out.splitlines():
        parts = line.split("\t")
        if len(parts) < 3 or not parts[0].strip().endswith(":"):
            continue
        text = parts[2].strip()
        if text.startswith("push "):
            pushed += 8
        elif text == "mov    %rsp,%rbp":
            continue
        elif re.match(r"sub\s+\$0x([0-9a-f]+),%rsp$", text):
            return pushed + int(re.match(r"sub\s+\$0x([0-9a-f]+)", text).group(1), 16)
        elif re.match(r"and\s+\$.*,%rsp$", text):
            return None
        else:
            return pushed
    return pushed


@pytest.mark.parametrize("which", ["gcc", "tvm", "iree"])
def test_stack_frames_match_objdump(gcc_lib, which):
    """Each x86-64 function's stack frame as its prologue reserves it, against objdump."""
    if shutil.which("objdump") is None:
        pytest.skip("no objdump (binutils)")
    path = {"gcc": gcc_lib, "tvm": FIX / "tvm" / "mm_llvm.so",
            "iree": FIX / "host" / "mm_embedded_elf_x86_64.so"}[which]
    rows = host_elf.kernels(path.read_bytes(), str(path))
    assert rows
    assert {r.name: r.stack_bytes for r in rows} == {r.name: objdump_stack(path, r.extra["address"]) for r in rows}


def test_stripped_library_falls_back_to_dynsym(gcc_lib, tmp_path):
    strip = shutil.which("strip")
    if strip is None:
        pytest.skip("no strip")
    stripped = tmp_path / "k_stripped.so"
    subprocess.run([strip, "-o", str(stripped), str(gcc_lib)], check=True)
    rows = host_elf.kernels(stripped.read_bytes(), str(stripped))
    truth = readelf_functions(stripped, ".dynsym")
    assert {r.name for r in rows} == set(truth) and "scale" in truth and "helper" not in truth


def test_bad_input():
    with pytest.raises(ParseError, match="not an ELF"):
        host_elf.kernels(b"MZ\x90\x00", "a.exe")
    data = (FIX / "tvm" / "mm_llvm.so").read_bytes()
    with pytest.raises(ParseError) as err:
        host_elf.kernels(data[:40], "short.so")
    assert "short.so" in str(err.value) and "\n" not in str(err.value)
    assert not host_elf.matches((FIX / "amdgpu" / "mm_gfx942.hsaco").read_bytes())


REAL = (FIX / "tvm" / "mm_llvm.so").read_bytes()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(byte_writes(len(REAL)), st.integers(0, len(REAL)))
def test_mutated_input_raises_only_parse_error(writes, cut):
    data = written(REAL, writes, cut, keep=64)
    try:
        host_elf.kernels(data, "mutated.so")
    except ParseError as err:
        assert "\n" not in str(err)
