"""parsers.cubin on cubins that nvcc/ptxas from PyPI build during the session, every field
checked against cuobjdump --dump-resource-usage / cuobjdump -elf and ptxas -v."""
from __future__ import annotations

import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from parsers import ParseError
from parsers import cubin
from test_cubin_helpers import (FIXTURES, elf_arch, elf_dump, nvcc, nvinfo_values, ptxas,
                                ptxas_info, resource_usage)
from mutation import COMMON, mutate

ARCHS = ["sm_80", "sm_90", "sm_90a", "sm_100", "sm_100a"]


@pytest.fixture(autouse=True, params=["native", "python"])
def decoder(request, monkeypatch):
    """Every test once per decoder: parsers/_cubin.c (when built) and the Python reader."""
    if request.param == "native" and cubin.native is None:
        pytest.skip("parsers._cubin not built (or ROOTCAUSE_PURE_PYTHON set)")
    if request.param == "python":
        monkeypatch.setattr(cubin, "native", None)
    return request.param
KERNELS = {"smem_tile", "local_array", "recursive", "pressure", "dyn_shared",
           "_Z5scaleILi3EEvPddic", "_Z11with_structc4QuadPf"}


def _check_against_tools(path: Path, log: str) -> list:
    rows = cubin.kernels(path.read_bytes(), str(path))
    usage = resource_usage(path)
    info = ptxas_info(log)
    assert {r.name for r in rows} == set(usage), "kernel set differs from cuobjdump's"
    for r in rows:
        u, p = usage[r.name], info[r.name]
        assert r.format == "cubin" and r.file == str(path)
        assert r.registers == u["REG"] == p["registers"], r.name
        assert r.extra.get("shared_section_bytes", 0) == u["SHARED"], r.name
        assert r.shared_bytes == p["smem"], r.name  # program's static shared, without the reserve
        assert r.shared_bytes + r.extra.get("reserved_shared_bytes", 0) == u["SHARED"]
        assert r.stack_bytes == u["STACK"], r.name  # None <-> cuobjdump STACK:UNKNOWN
        assert r.extra.get("stack_unknown", False) == (u["STACK"] is None)
        assert r.local_bytes == p["stack_frame"], r.name
        assert r.extra["local_section_bytes"] == u["LOCAL"]
        assert r.extra["constant0_bytes"] == u["CONSTANT[0]"], r.name
        assert r.extra["barriers"] == p["barriers"], r.name
        assert r.spills is None
    return rows


@pytest.mark.parametrize("arch", ARCHS)
def test_kernels_match_cuobjdump_and_ptxas(arch):
    path, log = nvcc("cubin", f"-arch={arch}")
    rows = _check_against_tools(path, log)
    assert {r.name for r in rows} == KERNELS
    assert {r.arch for r in rows} == {elf_arch(path)} == {arch}


def test_params_and_launch_bounds_match_nv_info_dump():
    path, _ = nvcc("cubin", "-arch=sm_90")
    rows = {r.name: r for r in cubin.kernels(path.read_bytes())}
    sizes = nvinfo_values(path, "EIATTR_CBANK_PARAM_SIZE")
    bounds = nvinfo_values(path, "EIATTR_MAX_THREADS")
    assert set(sizes) == set(rows)
    for name, r in rows.items():
        assert r.param_bytes == int(sizes[name], 16), name
        if name in bounds:
            x, y, z = (int(v, 16) for v in bounds[name].split())
            assert r.max_threads_per_block == x * y * z and r.extra["max_threads"] == [x, y, z]
        else:
            assert r.max_threads_per_block is None
    assert set(bounds) == {"smem_tile", "_Z5scaleILi3EEvPddic"}


def test_spills_under_low_maxrregcount():
    path, log = nvcc("cubin", "-arch=sm_90", "-maxrregcount=24")
    rows = {r.name: r for r in _check_against_tools(path, log)}
    info = ptxas_info(log)
    assert info["pressure"]["spill_stores"] > 0, "the build did not spill: the test proves nothing"
    # spill bytes count store instructions, not slots: the frame only has to be non-empty
    assert rows["pressure"].local_bytes == info["pressure"]["stack_frame"] > 0
    assert rows["pressure"].registers <= 24


def test_reqntid_maxnreg_from_hand_written_ptx():
    path, log = ptxas("sm_90")
    rows = {r.name: r for r in _check_against_tools(path, log)}
    reqntid = nvinfo_values(path, "EIATTR_REQNTID")["reqntid_kernel"].split()
    block = tuple(int(v, 16) for v in reqntid)
    assert rows["reqntid_kernel"].block == block
    assert rows["reqntid_kernel"].max_threads_per_block == block[0] * block[1] * block[2]
    maxreg = nvinfo_values(path, "EIATTR_MAXREG_COUNT")
    assert rows["maxnreg_kernel"].extra["maxreg"] == int(maxreg["maxnreg_kernel"], 16)
    assert "twice" not in rows  # a .func is not a kernel


def test_old_e_flags_layout_fixture():
    # Written by ptxas 12.9 (ELF ABI version 7): SM in the low byte, 'a' in bit 11.
    path = FIXTURES / "bounds_sm90a_ptxas12.cubin"
    data = path.read_bytes()
    assert data[8] == 7, "fixture is not the ABI-7 layout"
    rows = cubin.kernels(data, str(path))
    assert {r.arch for r in rows} == {elf_arch(path)} == {"sm_90a"}
    usage = resource_usage(path)
    for r in rows:
        assert r.registers == usage[r.name]["REG"]
        assert r.shared_bytes + r.extra.get("reserved_shared_bytes", 0) == usage[r.name]["SHARED"]


def test_committed_sm90_fixture():
    path = FIXTURES / "kernels_sm90.cubin"
    rows = cubin.kernels(path.read_bytes(), str(path))
    usage = resource_usage(path)
    assert {r.name for r in rows} == set(usage)
    for r in rows:
        assert r.registers == usage[r.name]["REG"] and r.arch == "sm_90"


def test_arch_layouts():
    assert cubin.cubin_arch(0x5A055A, 7) == "sm_90"
    assert cubin.cubin_arch(0x5A0D5A, 7) == "sm_90a"
    assert cubin.cubin_arch(0x6005A04, 8) == "sm_90"
    assert cubin.cubin_arch(0x6006408, 8) == "sm_100a"


# --- bad input: one ParseError naming the file and the place -------------------------------

def test_host_elf_is_rejected():
    obj, _ = nvcc("c", "-arch=sm_90")  # an x86-64 host object
    with pytest.raises(ParseError, match=r"k\.o: e_machine: not a CUDA ELF: e_machine 62"):
        cubin.kernels(obj.read_bytes(), "k.o")


@pytest.mark.parametrize("data,what", [
    (b"", "truncated ELF header"),
    (b"\x00" * 200, "not an ELF file"),
    (bytes(range(256)) * 4, "not an ELF file"),
])
def test_garbage(data, what):
    with pytest.raises(ParseError, match=what) as err:
        cubin.kernels(data, "x.cubin")
    assert str(err.value).startswith("x.cubin: ")


def test_truncated_cubin():
    data = (FIXTURES / "kernels_sm90.cubin").read_bytes()
    with pytest.raises(ParseError, match="run past the end of the file|runs past the end"):
        cubin.kernels(data[: len(data) // 2], "half.cubin")


def _section(data: bytes, name: str) -> tuple[int, int]:
    from io import BytesIO
    from elftools.elf.elffile import ELFFile
    sec = ELFFile(BytesIO(data)).get_section_by_name(name)
    return sec["sh_offset"], sec["sh_size"]


def test_overrunning_attribute_names_section_and_offset():
    data = bytearray((FIXTURES / "kernels_sm90.cubin").read_bytes())
    off, size = _section(bytes(data), ".nv.info")
    assert data[off] == cubin.EIFMT_SVAL
    struct.pack_into("<H", data, off + 2, size)  # first record's payload now runs past the section
    with pytest.raises(ParseError, match=r"bad\.cubin: \.nv\.info\+0x0: attribute 0x2f payload of \d+ bytes runs past"):
        cubin.kernels(bytes(data), "bad.cubin")


def test_truncated_attribute_header():
    with pytest.raises(ParseError, match=r"\.nv\.info\.k\+0x4: truncated attribute header"):
        cubin.nvinfo_records(b"\x03\x1b\xff\x00\x04", ".nv.info.k", "f")
    with pytest.raises(ParseError, match="unknown attribute format 0x9"):
        cubin.nvinfo_records(b"\x09\x1b\xff\x00", ".nv.info.k", "f")


def test_nvinfo_formats_on_real_section():
    data = (FIXTURES / "kernels_sm90.cubin").read_bytes()
    off, size = _section(data, ".nv.info.smem_tile")
    recs = cubin.nvinfo_records(data[off:off + size], ".nv.info.smem_tile")
    assert sum(4 + (len(r.value) if isinstance(r.value, bytes) else 0) for r in recs) == size
    assert "EIATTR_NUM_BARRIERS" in elf_dump(FIXTURES / "kernels_sm90.cubin")
    barriers = [r for r in recs if r.attr == cubin.EIATTR_NUM_BARRIERS]
    assert barriers and barriers[0].fmt == cubin.EIFMT_BVAL and barriers[0].value == 1


_SEED = (FIXTURES / "kernels_sm90.cubin").read_bytes()


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.data())
def test_mutated_cubins_raise_only_parse_error(data):
    blob = mutate(data, bytearray(_SEED), data.draw(st.sampled_from(COMMON)))
    try:
        rows = cubin.kernels(bytes(blob), "m.cubin")
    except ParseError as exc:
        assert str(exc).startswith("m.cubin: ") and "\n" not in str(exc)
    else:
        assert all(r.format == "cubin" for r in rows)


def test_matches():
    assert cubin.matches(_SEED)
    obj, _ = nvcc("c", "-arch=sm_90")
    assert not cubin.matches(obj.read_bytes()) and not cubin.matches(b"\x7fELF")


def test_static_shared_is_what_the_driver_reports():
    # The H200 run's CUPTI records (fixtures/captures/h200-2026-12-02-run, same recipe: TVM 0.27,
    # sm_90, nvcc 13.5) give the driver's static_shared_memory; cuobjdump's SHARED adds 1 KiB.
    import json
    capture = FIXTURES.parent.parent / "captures" / "h200-2026-12-02-run" / "pool_fusion_on.cupti.json"
    if not capture.is_file():
        pytest.skip(f"{capture} not present")
    driver = {r["name"]: r for r in json.loads(capture.read_text()) if "static_shared_memory" in r}
    path = FIXTURES / "tvm_pool_fusion_on_sm90.cubin"
    rows = {r.name: r for r in cubin.kernels(path.read_bytes(), str(path))}
    usage = resource_usage(path)
    fused = "fused_pool2d_add2_kernel"
    assert rows[fused].shared_bytes == driver[fused]["static_shared_memory"] > 0
    assert usage[fused]["SHARED"] == driver[fused]["static_shared_memory"] + rows[fused].extra["reserved_shared_bytes"]
    assert rows[fused].registers == driver[fused]["registers_per_thread"] == usage[fused]["REG"]
    for name in rows.keys() & driver.keys():
        assert rows[name].shared_bytes == driver[name]["static_shared_memory"], name


def test_relocatable_cubin_from_rdc_object():
    # nvcc -rdc puts ET_REL cubins in __nv_relfatbin: device functions have .text/.nv.info of
    # their own (not kernels) and no shared-memory reserve is laid out yet.
    from io import BytesIO
    from elftools.elf.elffile import ELFFile
    from parsers import fatbin
    obj, _ = nvcc("c", "-rdc=true", "-arch=sm_90")
    section = ELFFile(BytesIO(obj.read_bytes())).get_section_by_name("__nv_relfatbin").data()
    (entry,) = [e for e in fatbin.entries(section, str(obj)) if e.kind == "cubin"]
    rows = {r.name: r for r in cubin.kernels(entry.data, str(obj))}
    usage = {n: u for n, u in resource_usage(obj).items() if "CONSTANT[0]" in u}  # kernels only
    assert set(rows) == set(usage) == KERNELS
    for name, r in rows.items():
        assert r.registers == usage[name]["REG"], name
        assert r.shared_bytes == usage[name]["SHARED"] and r.extra.get("reserved_shared_bytes", 0) == 0


def test_register_fallback_to_text_sh_info():
    # sm_80 cubins also keep the register count in the top byte of .text.<name> sh_info. Rename
    # the REGCOUNT records of a real cubin so only that copy is left; cuobjdump on the original
    # is still the truth.
    path, _ = nvcc("cubin", "-arch=sm_80")
    data = bytearray(path.read_bytes())
    off, size = _section(bytes(data), ".nv.info")
    renamed = 0
    for rec in cubin.nvinfo_records(bytes(data[off:off + size])):
        if rec.attr == cubin.EIATTR_REGCOUNT:
            data[off + rec.offset + 1] = 0x37  # EIATTR_CUDA_API_VERSION, which the reader ignores
            renamed += 1
    assert renamed == len(KERNELS)
    usage = resource_usage(path)
    for r in cubin.kernels(bytes(data)):
        assert r.registers == usage[r.name]["REG"], r.name
