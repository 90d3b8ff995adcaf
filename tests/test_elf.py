"""parsers.elf on real ELF64 files (cubins, an hsaco, host shared libraries, an object with
more than 65,280 sections from `as`), checked field by field against pyelftools and against
readelf -S/-s; damaged copies must only ever raise ParseError."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from elftools.elf import enums
from elftools.elf.elffile import ELFFile
from hypothesis import HealthCheck, given, settings, strategies as st

from parsers import ParseError, elf
from mutation import COMMON, mutate

ROOT = Path(__file__).resolve().parent.parent
SITE = next((ROOT / ".venv" / "lib").glob("python3*/site-packages"), None)
FILES = [ROOT / "fixtures/binaries/cuda/kernels_sm90.cubin",
         ROOT / "fixtures/binaries/cuda/bounds_sm90a_ptxas12.cubin",
         ROOT / "fixtures/binaries/cuda/tvm_pool_fusion_on_sm90.cubin",
         ROOT / "fixtures/binaries/amdgpu/mm_gfx942.hsaco",
         ROOT / "fixtures/binaries/host/mm_embedded_elf_x86_64.so"]
if SITE is not None:  # host shared libraries as pip installed them: .dynsym with versions, .symtab
    FILES += sorted(SITE.glob("msgpack/_cmsgpack*.so"))[:1] + sorted(SITE.glob("lz4/_version*.so"))[:1]
READELF, AS = shutil.which("readelf"), shutil.which("as")


def _enum(*tables: dict) -> dict:
    merged: dict = {}
    for t in tables:
        merged.update({k: v for k, v in t.items() if k != "_default_"})
    return merged


SH_TYPES = _enum(*(getattr(enums, n) for n in dir(enums) if n.startswith("ENUM_SH_TYPE")))
ST_TYPES, ST_BINDS = _enum(enums.ENUM_ST_INFO_TYPE), _enum(enums.ENUM_ST_INFO_BIND)
ST_SHNDX, ST_VIS = _enum(enums.ENUM_ST_SHNDX), _enum(enums.ENUM_ST_VISIBILITY)
E_TYPES, E_MACHINES = _enum(enums.ENUM_E_TYPE), _enum(enums.ENUM_E_MACHINE)


def _num(value, table: dict) -> int:
    return value if isinstance(value, int) else table[value]


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_same_as_pyelftools(path):
    data = path.read_bytes()
    ours = elf.parse(data, str(path))
    with path.open("rb") as f:
        ref = ELFFile(f)
        h = ref.header
        assert (ours.header.type, ours.header.machine, ours.header.flags, ours.header.abi_version) == (
            _num(h["e_type"], E_TYPES), _num(h["e_machine"], E_MACHINES), h["e_flags"], h["e_ident"]["EI_ABIVERSION"])
        assert len(ours.sections) == ref.num_sections()
        tables = 0
        for sec, theirs in zip(ours.sections, ref.iter_sections()):
            s = theirs.header
            assert sec == (sec.index, theirs.name, _num(s["sh_type"], SH_TYPES), s["sh_flags"], s["sh_addr"],
                           s["sh_offset"], s["sh_size"], s["sh_link"], s["sh_info"], s["sh_addralign"],
                           s["sh_entsize"]), sec.name
            assert ours.section(sec.name).name == sec.name
            if sec.type != elf.SHT_NOBITS:
                assert ours.section_data(sec) == theirs.data(), sec.name
            if sec.type in (elf.SHT_SYMTAB, elf.SHT_DYNSYM):
                tables += 1
                syms = ours.symbols(sec)
                assert len(syms) == theirs.num_symbols()
                for sym, t in zip(syms, theirs.iter_symbols()):
                    assert (sym.name, sym.value, sym.size, sym.type, sym.bind, sym.shndx, sym.other & 3) == (
                        t.name, t["st_value"], t["st_size"], _num(t["st_info"]["type"], ST_TYPES),
                        _num(t["st_info"]["bind"], ST_BINDS), _num(t["st_shndx"], ST_SHNDX),
                        _num(t["st_other"]["visibility"], ST_VIS)), (sec.name, sym.index)
    assert tables, f"{path.name} has no symbol table: the symbol check proves nothing"


# ---- readelf ----------------------------------------------------------------------------------

def _readelf(*args: str) -> str:
    if READELF is None:
        pytest.skip("readelf (binutils) not installed")
    return subprocess.run([READELF, "-W", *args], capture_output=True, text=True, check=True).stdout


SECTION_LINE = re.compile(r"^\s*\[\s*(\d+)\]\s(.*?)\s+(\S+)\s+([0-9a-f]{16})\s+([0-9a-f]+)\s+([0-9a-f]+)\s+([0-9a-f]+)\s")
SYMBOL_LINE = re.compile(r"^\s*(\d+):\s+([0-9a-f]+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)(?:\s+\[<other>: ([0-9a-f]+)\])?"
                         r"\s+(\S+)(?: (.*))?$")
VIS = {"DEFAULT": 0, "INTERNAL": 1, "HIDDEN": 2, "PROTECTED": 3}


def readelf_sections(path: Path) -> dict[int, tuple[str, int, int, int]]:
    """index -> (name, address, offset, size) from readelf -S -W."""
    out = {}
    for line in _readelf("-S", str(path)).splitlines():
        line = line.replace("SYMTAB SECTION INDICES", "SYMTAB_SHNDX")  # the one type name with spaces
        if m := SECTION_LINE.match(line):
            out[int(m.group(1))] = (m.group(2).strip(), int(m.group(4), 16), int(m.group(5), 16), int(m.group(6), 16))
    return out


def readelf_symbols(path: Path) -> dict[str, list[tuple]]:
    """table name -> [(name, value, size, visibility, other bits, ndx)] from readelf -s -W."""
    out: dict[str, list[tuple]] = {}
    table, versioned = None, False
    for line in _readelf("-s", str(path)).splitlines():
        if m := re.match(r"Symbol table '([^']+)' contains (\d+) entr", line):
            table, versioned = out.setdefault(m.group(1), []), m.group(1) == ".dynsym"
        elif table is not None and (m := SYMBOL_LINE.match(line)):
            size = int(m.group(3), 16) if m.group(3).startswith("0x") else int(m.group(3))
            name = m.group(9) or ""
            if versioned:  # readelf appends .dynsym's version (@GLIBC_2.2.5); .symtab names are as stored
                name = re.sub(r"@.*$", "", name)
            table.append((name, int(m.group(2), 16), size, VIS[m.group(6)], int(m.group(7) or "0", 16), m.group(8)))
    return out


def _ndx(shndx: int) -> str:
    return {0: "UND", 0xFFF1: "ABS", 0xFFF2: "COM"}.get(shndx, str(shndx))


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_same_as_readelf(path):
    ours = elf.parse(path.read_bytes(), str(path))
    sections = readelf_sections(path)
    assert sections == {s.index: (s.name, s.addr, s.offset, s.size) for s in ours.sections}
    symbols = readelf_symbols(path)
    assert symbols, "readelf printed no symbols"
    for table, rows in symbols.items():
        syms = ours.symbols(table)
        assert [(s.name, s.value, s.size, s.other & 3, s.other & ~3, _ndx(s.shndx)) for s in syms] == rows, table


@pytest.fixture(scope="session")
def many_sections(tmp_path_factory) -> Path:
    """An object with 66,000 sections: e_shnum 0, e_shstrndx SHN_XINDEX, a .symtab_shndx table."""
    if AS is None:
        pytest.skip("as (binutils) not installed")
    d = tmp_path_factory.mktemp("many")
    (d / "many.s").write_text("".join(f'.section .s{i},"a"\n.globl sym{i}\nsym{i}: .byte {i % 256}\n'
                                      for i in range(66000)))
    subprocess.run([AS, str(d / "many.s"), "-o", str(d / "many.o")], check=True, capture_output=True)
    return d / "many.o"


def test_extended_section_numbering(many_sections):
    data = many_sections.read_bytes()
    ours = elf.parse(data, str(many_sections))
    assert ours.header.shnum == 0 and ours.header.shstrndx == elf.SHN_XINDEX, "as did not use extended numbering"
    sections = readelf_sections(many_sections)
    assert len(ours.sections) == len(sections) > 0xFF00
    assert {s.index: (s.name, s.addr, s.offset, s.size) for s in ours.sections} == sections
    syms = {s.name: s for s in ours.symbols(".symtab")}
    assert any(s.type == elf.SHT_SYMTAB_SHNDX for s in ours.sections)
    for i in (0, 65000, 65999):  # symbols past SHN_LORESERVE resolve through .symtab_shndx
        sym = syms[f"sym{i}"]
        assert ours.sections[sym.shndx].name == f".s{i}"
        assert ours.section_data(ours.sections[sym.shndx]) == bytes([i % 256])
    with many_sections.open("rb") as f:  # pyelftools on a sample (all 66,000 sections are slow there)
        ref = ELFFile(f)
        for i in (1, 0xFF00, len(sections) - 1):
            assert ours.sections[i].name == ref.get_section(i).name


# ---- bad input ----------------------------------------------------------------------------------

_CUBIN = (ROOT / "fixtures/binaries/cuda/kernels_sm90.cubin").read_bytes()


def _shdr(data: bytes | bytearray, index: int) -> int:
    shoff = int.from_bytes(data[0x28:0x30], "little")
    return shoff + 64 * index


def test_errors_name_file_place_and_offset():
    with pytest.raises(ParseError, match=r"^f: offset 0: truncated ELF header \(10 bytes"):
        elf.parse(_CUBIN[:10], "f")
    with pytest.raises(ParseError, match=r"^f: offset 0: not an ELF file"):
        elf.parse(b"MZ" + bytes(100), "f")
    elf32 = bytearray(_CUBIN)
    elf32[4] = 1
    with pytest.raises(ParseError, match=r"^f: e_ident: ELF class 1: only 64-bit"):
        elf.parse(bytes(elf32), "f")
    with pytest.raises(ParseError, match=r"^f: e_shoff 0x[0-9a-f]+: \d+ section headers run past the end"):
        elf.parse(_CUBIN[:_shdr(_CUBIN, 2)], "f")

    image = elf.parse(_CUBIN)
    text = next(s for s in image.sections if s.name.startswith(".text."))
    bad = bytearray(_CUBIN)
    bad[_shdr(bad, text.index) + 0x20:_shdr(bad, text.index) + 0x28] = (len(bad)).to_bytes(8, "little")  # sh_size
    with pytest.raises(ParseError, match=rf"^f: section {text.index}: data at 0x[0-9a-f]+\+0x[0-9a-f]+ runs past the end"):
        elf.parse(bytes(bad), "f")

    bad = bytearray(_CUBIN)
    bad[_shdr(bad, text.index):_shdr(bad, text.index) + 4] = (0xFFFFFF).to_bytes(4, "little")  # sh_name
    with pytest.raises(ParseError, match=rf"^f: section {text.index}: name offset 0xffffff is outside the section name table"):
        elf.parse(bytes(bad), "f")

    symtab = image.section(".symtab")
    bad = bytearray(_CUBIN)
    bad[_shdr(bad, symtab.index) + 0x28:_shdr(bad, symtab.index) + 0x2C] = (999).to_bytes(4, "little")  # sh_link
    with pytest.raises(ParseError, match=rf"^f: section {symtab.index} \(\.symtab\): sh_link 999 names no section"):
        elf.parse(bytes(bad), "f").symbols()

    bad = bytearray(_CUBIN)
    name_at = symtab.offset + 24 * 8  # symbol 8's st_name
    bad[name_at:name_at + 4] = (0x7FFFFFFF).to_bytes(4, "little")
    with pytest.raises(ParseError, match=rf"^f: section {symtab.index} \(\.symtab\) symbol 8: name offset 0x7fffffff"):
        elf.parse(bytes(bad), "f").symbols()
    with pytest.raises(ParseError, match=r"is not a symbol table"):
        image.symbols(".nv.info")


_SEEDS = [p.read_bytes() for p in FILES[:5]]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_mutations_raise_only_parse_error(data):
    blob = bytearray(data.draw(st.sampled_from(_SEEDS)))
    how = data.draw(st.sampled_from(COMMON + ("header",)))
    # "header": overwrite inside the section table, where the reader looks first
    lo = _shdr(blob, 0) if how == "header" and _shdr(blob, 0) < len(blob) else 0
    blob = mutate(data, blob, "overwrite" if how == "header" else how, lo=lo)
    try:
        image = elf.parse(bytes(blob), "m.elf")
        for sec in image.sections:
            image.section_data(sec)
            if sec.type in (elf.SHT_SYMTAB, elf.SHT_DYNSYM):
                image.symbols(sec)
    except ParseError as exc:
        assert str(exc).startswith("m.elf: ") and "\n" not in str(exc)
