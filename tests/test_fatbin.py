"""parsers.fatbin on fatbins nvcc 13.5 writes (several -gencode, every compression mode, a
host object's .nv_fatbin, a shared library linking several objects), checked against
cuobjdump -lelf/-lptx listings and the bytes cuobjdump -xelf/-xptx extracts."""
from __future__ import annotations

import struct
from io import BytesIO
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile
from hypothesis import HealthCheck, given, settings, strategies as st

from parsers import ParseError, cubin, fatbin, ptx
from test_cubin_helpers import FIXTURES, KERNELS_CU, _WORK, extracted, listing, need, nvcc
from mutation import COMMON, mutate

GENCODE = ("-gencode", "arch=compute_80,code=sm_80", "-gencode", "arch=compute_90,code=sm_90",
           "-gencode", "arch=compute_90,code=compute_90")
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"

# nvcc option -> codecs seen per kind (measured with nvcc 13.5; see PROVENANCE.md).
MODES = {
    "default": ((), {"cubin": {None}, "ptx": {"zstd"}}),
    "none": (("--compress-mode=none",), {"cubin": {None}, "ptx": {None}}),
    "no-compress": (("--no-compress",), {"cubin": {None}, "ptx": {None}}),
    "size": (("--compress-mode=size",), {"cubin": {"zstd"}, "ptx": {"zstd"}}),
    "speed": (("--compress-mode=speed",), {"cubin": {None}, "ptx": {"lz4"}}),
    "balance": (("--compress-mode=balance",), {"cubin": {None}, "ptx": {"zstd"}}),
    "compress-all": (("-Xfatbin=-compress-all",), {"cubin": {"zstd"}, "ptx": {"zstd"}}),
    "concat": (("--concat",), {"cubin": {"zstd"}, "ptx": {"zstd"}}),
}


# A one-kernel source keeps the eight mode builds quick; kernels.cu is built in full elsewhere.
MINI = _WORK / "mini.cu"
MINI.write_text(KERNELS_CU.read_text().split("// Recursion")[0])


def _same_as_cuobjdump(path: Path, found: list[fatbin.FatbinEntry]) -> None:
    assert [(e.kind, e.arch) for e in found] == listing(path) or \
        sorted((e.kind, e.arch) for e in found) == sorted(listing(path))
    groups: dict[str, list[bytes]] = {}
    for e in found:
        groups.setdefault(f"{e.kind}:{e.arch}", []).append(e.data)
    truth = extracted(path)
    assert groups.keys() == truth.keys()
    for key, blobs in truth.items():
        # cuobjdump writes PTX text with its trailing NUL removed or kept: compare the text.
        assert [b.rstrip(b"\0") for b in groups[key]] == [b.rstrip(b"\0") for b in blobs], key


@pytest.mark.parametrize("mode", list(MODES))
def test_modes_match_cuobjdump(mode):
    flags, codecs = MODES[mode]
    path, _ = nvcc("fatbin", *GENCODE, *flags, src=MINI)
    data = path.read_bytes()
    assert fatbin.matches(data)
    found = fatbin.entries(data, str(path))
    _same_as_cuobjdump(path, found)
    seen: dict[str, set] = {}
    for e in found:
        seen.setdefault(e.kind, set()).add(e.compressed)
        if e.compressed == "zstd":  # the raw payload after the entry header is a zstd frame
            hsize, = struct.unpack_from("<I", data, e.offset + 4)
            assert data[e.offset + hsize:e.offset + hsize + 4] == ZSTD_MAGIC
    assert seen == codecs, f"{mode}: {seen}"


def test_entries_parse_as_cubin_and_ptx():
    path, _ = nvcc("fatbin", *GENCODE, "--compress-mode=size")
    found = fatbin.entries(path.read_bytes(), str(path))
    for e in found:
        if e.kind == "cubin":
            rows = cubin.kernels(e.data, f"{path}#{e.arch}")
            assert {r.arch for r in rows} == {e.arch} and rows
        else:
            rows = ptx.kernels(e.data)
            assert {r.arch for r in rows} == {e.arch} and e.ptx_version == rows[0].extra["ptx_version"]


@pytest.mark.parametrize("mode", ["default", "none", "speed", "concat"])
def test_redundant_ptx_left_undecoded(mode):
    """redundant_ptx=False: the same entries as cuobjdump lists, the same bytes as it extracts,
    except that PTX beside a cubin of its arch (sm_90 here, not sm_80's absent PTX) has no data;
    a concatenated entry decodes all its members together, so nothing is left out there."""
    path, _ = nvcc("fatbin", *GENCODE, *MODES[mode][0], src=MINI)
    data = path.read_bytes()
    full, lean = fatbin.entries(data, str(path)), fatbin.entries(data, str(path), redundant_ptx=False)
    _same_as_cuobjdump(path, full)
    skipped = [e for e in lean if e.data is None]
    assert [(e.kind, e.arch) for e in skipped] == ([] if mode == "concat" else [("ptx", "sm_90")])
    assert [e._replace(data=None) for e in full] == [e._replace(data=None) for e in lean]
    assert all(e.data == kept.data for e, kept in zip(full, lean) if kept.data is not None)


def test_arch_specific_and_blackwell_entries():
    path, _ = nvcc("fatbin", "-gencode", "arch=compute_90a,code=sm_90a", "-gencode",
                   "arch=compute_100,code=sm_100", "-gencode", "arch=compute_100a,code=compute_100a")
    found = fatbin.entries(path.read_bytes(), str(path))
    _same_as_cuobjdump(path, found)
    assert [e.arch for e in found] == ["sm_90a", "sm_100", "sm_100a"]
    # the cubin's own ELF header and .nv.compat agree with the container's flag
    assert cubin.kernels(found[0].data)[0].arch == "sm_90a"


def _nv_fatbin(obj: Path) -> bytes:
    sec = ELFFile(BytesIO(obj.read_bytes())).get_section_by_name(".nv_fatbin")
    assert sec is not None, f"{obj} has no .nv_fatbin"
    return sec.data()


def test_host_object_section():
    obj, _ = nvcc("c", *GENCODE)
    found = fatbin.entries(_nv_fatbin(obj), f"{obj}:.nv_fatbin")
    _same_as_cuobjdump(obj, found)
    assert {e.container for e in found} == {0}


def test_relocatable_object_section():
    obj, _ = nvcc("c", "-rdc=true", *GENCODE)
    sec = ELFFile(BytesIO(obj.read_bytes())).get_section_by_name("__nv_relfatbin")
    found = fatbin.entries(sec.data(), f"{obj}:__nv_relfatbin")
    _same_as_cuobjdump(obj, found)


def test_shared_library_holds_several_containers():
    need("nvcc")
    other = _WORK / "other.cu"
    other.write_text('extern "C" __global__ void other_kernel(float* o) { o[threadIdx.x] *= 2.f; }\n')
    a, _ = nvcc("c", *GENCODE, "-Xcompiler", "-fPIC")
    b, _ = nvcc("c", "-arch=sm_90", "-Xcompiler", "-fPIC", src=other)
    lib = _WORK / "libtwo.so"
    import subprocess
    subprocess.run([str(need("nvcc")), "-shared", "-o", str(lib), str(a), str(b)], check=True, capture_output=True)
    section = _nv_fatbin(lib)
    found = fatbin.entries(section, f"{lib}:.nv_fatbin")
    _same_as_cuobjdump(lib, found)
    starts = fatbin.containers(section)
    assert len(starts) >= 2 and sorted({e.container for e in found}) == list(range(len(starts)))
    names = {r.name for e in found if e.kind == "cubin" for r in cubin.kernels(e.data)}
    assert {"other_kernel", "smem_tile"} <= names


def test_committed_fixtures():
    for name, codec in [("multiarch.fatbin", {None, "zstd"}), ("multiarch_lz4.fatbin", {None, "lz4"}),
                        ("multiarch_zstd.fatbin", {"zstd"})]:
        path = FIXTURES / name
        found = fatbin.entries(path.read_bytes(), str(path))
        _same_as_cuobjdump(path, found)
        assert {e.compressed for e in found} == codec


# --- bad input -------------------------------------------------------------------------------

_SEED = (FIXTURES / "multiarch_zstd.fatbin").read_bytes()


def test_entry_running_past_container():
    data = bytearray((FIXTURES / "multiarch.fatbin").read_bytes())
    struct.pack_into("<Q", data, 16 + 8, len(data))  # first entry's payload size
    with pytest.raises(ParseError, match=r"f\.fatbin: container 0, entry at 0x10: payload of \d+ bytes runs past"):
        fatbin.entries(bytes(data), "f.fatbin")


def test_container_running_past_buffer():
    data = (FIXTURES / "multiarch.fatbin").read_bytes()
    with pytest.raises(ParseError, match=r"container 1 at 0x[0-9a-f]+: container of \d+ bytes runs past"):
        fatbin.entries(data + data[:100], "two.fatbin")


def test_bad_magic_and_empty():
    with pytest.raises(ParseError, match="bad magic"):
        fatbin.entries(b"\x7fELF" + bytes(60), "x")
    with pytest.raises(ParseError, match="no fatbin container"):
        fatbin.entries(b"", "x")
    assert not fatbin.matches(b"\x7fELF")


def test_corrupt_compressed_payload():
    data = bytearray(_SEED)
    e = fatbin.entries(bytes(data))[0]
    hsize, = struct.unpack_from("<I", data, e.offset + 4)
    data[e.offset + hsize + 8:e.offset + hsize + 40] = bytes(32)
    with pytest.raises(ParseError, match=r"container 0, entry at 0x10: (cannot decompress|decompressed)"):
        fatbin.entries(bytes(data), "z.fatbin")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_mutated_fatbins_raise_only_parse_error(data):
    seed = data.draw(st.sampled_from([_SEED, (FIXTURES / "multiarch_lz4.fatbin").read_bytes()]))
    blob = bytearray(seed)
    how = data.draw(st.sampled_from(COMMON + ("header",)))
    if how == "header":  # aim at the container and first entry headers
        i = data.draw(st.integers(0, 16 + 64 - 1))
        blob[i] = data.draw(st.integers(0, 255))
    else:
        blob = mutate(data, blob, how, max_flips=8)
    try:
        found = fatbin.entries(bytes(blob), "m.fatbin")
    except ParseError as exc:
        assert str(exc).startswith("m.fatbin: ") and "\n" not in str(exc)
    else:
        assert all(e.kind in ("cubin", "ptx") for e in found)
