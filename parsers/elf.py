"""A small ELF64 reader on struct alone: header, section table, section names, symbols, bytes.

Written for speed on cubins (pyelftools spends 10-30 ms per cubin building its construct
objects); it reads only what the kernel readers need, either byte order, and checks every
offset against the buffer so damaged input raises one ParseError that names the file, the
section or symbol and the offset. Layouts: System V gABI, "ELF Header", "Sections",
"Symbol Table", including extended numbering (e_shnum 0, e_shstrndx / st_shndx SHN_XINDEX).
"""
from __future__ import annotations

import struct
from collections import namedtuple
from itertools import repeat
from operator import add, and_, rshift

from parsers.base import ParseError

ELF_MAGIC = b"\x7fELF"
ELFCLASS64 = 2
ELFDATA2LSB, ELFDATA2MSB = 1, 2
ET_REL, ET_EXEC, ET_DYN = 1, 2, 3
SHT_NULL, SHT_SYMTAB, SHT_STRTAB, SHT_NOBITS, SHT_DYNSYM, SHT_SYMTAB_SHNDX = 0, 2, 3, 8, 11, 18
SHN_UNDEF, SHN_LORESERVE, SHN_XINDEX = 0, 0xFF00, 0xFFFF
STT_OBJECT, STT_FUNC, STT_SECTION = 1, 2, 3

EHDR_SIZE, SHDR_SIZE, SYM_SIZE = 64, 64, 24
# e_type .. e_shstrndx, after the 16 bytes of e_ident.
_EHDR = "HHIQQQIHHHHHH"
_SHDR = "IIQQQQIIQQ"
_SYM = "IBBHQQ"
_new = tuple.__new__


# collections.namedtuple, not typing.NamedTuple: importing typing would cost inspect's start-up.
Header = namedtuple("Header", "byteorder osabi abi_version type machine version entry phoff shoff "
                              "flags ehsize phentsize phnum shentsize shnum shstrndx")
Header.__doc__ = "The ELF header; byteorder is '<' or '>', the struct prefix of every other field (ints)."
Section = namedtuple("Section", "index name type flags addr offset size link info addralign entsize")
Section.__doc__ = "One section header (name a str, the rest ints), with its index in the table."
Symbol = namedtuple("Symbol", "index name value size bind type other shndx")
Symbol.__doc__ = "One symbol; shndx is resolved through SHT_SYMTAB_SHNDX when st_shndx is SHN_XINDEX."


def matches(data: bytes) -> bool:
    return len(data) >= 5 and data[:4] == ELF_MAGIC and data[4] == ELFCLASS64


def read_header(data: bytes, file: str = "<bytes>") -> Header:
    """The ELF64 header of data, or ParseError naming what is wrong with it."""
    if len(data) >= 4 and data[:4] != ELF_MAGIC:
        raise ParseError(file, "offset 0", f"not an ELF file (magic {bytes(data[:4]).hex()})")
    if len(data) < EHDR_SIZE:
        raise ParseError(file, "offset 0", f"truncated ELF header ({len(data)} bytes, {EHDR_SIZE} needed)")
    if data[4] != ELFCLASS64:
        raise ParseError(file, "e_ident", f"ELF class {data[4]}: only 64-bit (class 2) ELF is read")
    if data[5] not in (ELFDATA2LSB, ELFDATA2MSB):
        raise ParseError(file, "e_ident", f"unknown ELF data encoding {data[5]}")
    order = "<" if data[5] == ELFDATA2LSB else ">"
    return Header(order, data[7], data[8], *struct.unpack_from(order + _EHDR, data, 16))


class Elf:
    """Sections and symbols of one ELF64 file; section bytes are sliced on demand.

    data may be a memoryview (a cubin inside a fatbin's bytes): then only the tables and the
    sections asked for are copied, not the code."""

    def __init__(self, data: bytes, file: str = "<bytes>"):
        self.data = data
        self.file = file
        self.header = read_header(data, file)
        self.sections = self._read_sections()
        # A repeated name maps to its last section, as pyelftools' get_section_by_name does.
        self._by_name = {sec.name: sec for sec in self.sections}

    def section(self, name: str) -> Section | None:
        return self._by_name.get(name)

    def section_data(self, sec: Section) -> bytes:
        """The section's bytes (empty for SHT_NOBITS); bounds were checked when the table was read."""
        if sec.type == SHT_NOBITS:
            return b""
        return bytes(self.data[sec.offset:sec.offset + sec.size])  # bytes, also from a memoryview

    def symbols(self, sec: Section | str = ".symtab") -> list[Symbol]:
        """Every entry of a symbol table section (by name or Section); [] when there is none."""
        if isinstance(sec, str):
            found = self.section(sec)
            if found is None:
                return []
            sec = found
        where = f"section {sec.index} ({sec.name})"
        if sec.type not in (SHT_SYMTAB, SHT_DYNSYM):
            raise ParseError(self.file, where, f"section type {sec.type} is not a symbol table")
        if sec.entsize not in (0, SYM_SIZE) or sec.size % SYM_SIZE:
            raise ParseError(self.file, where, f"symbol table of {sec.size} bytes with entry size "
                             f"{sec.entsize}, expected a multiple of {SYM_SIZE}")
        strtab = self._linked(sec, where)
        strings = self.section_data(strtab)
        xindex = self._xindex(sec)
        order = self.header.byteorder
        raw = list(struct.iter_unpack(order + _SYM, self.data[sec.offset:sec.offset + sec.size]))
        if not raw:
            return []
        # Columns (name, info, other, shndx, value, size) and map, as for the section table.
        names_at, info, other, shndx, value, size = zip(*raw)
        names = _names(strings, names_at, self.file, where + " symbol {i}", strtab.name)
        if xindex is not None and SHN_XINDEX in shndx:
            shndx = self._resolved(shndx, xindex, where)
        return list(map(_new, repeat(Symbol), zip(range(len(raw)), names, value, size, map(rshift, info, repeat(4)),
                                                   map(and_, info, repeat(0xF)), other, shndx)))

    def _resolved(self, shndx: tuple[int, ...], xindex: bytes, where: str) -> list[int]:
        """st_shndx with each SHN_XINDEX replaced by its SHT_SYMTAB_SHNDX entry."""
        out = list(shndx)
        for i in [i for i, x in enumerate(out) if x == SHN_XINDEX]:
            if 4 * i + 4 > len(xindex):
                raise ParseError(self.file, f"{where} symbol {i}", "no SHT_SYMTAB_SHNDX entry for SHN_XINDEX")
            out[i], = struct.unpack_from(self.header.byteorder + "I", xindex, 4 * i)
        return out

    def _read_sections(self) -> list[Section]:
        h, data, file = self.header, self.data, self.file
        if h.shoff == 0:
            return []
        if h.shentsize != SHDR_SIZE:
            raise ParseError(file, "e_shentsize", f"section header size {h.shentsize}, expected {SHDR_SIZE}")
        if h.shoff + SHDR_SIZE > len(data):
            raise ParseError(file, f"e_shoff {h.shoff:#x}", f"section headers run past the end of the file ({len(data)} bytes)")
        order = h.byteorder
        # Extended numbering: the real count and name-table index live in section 0.
        zero = struct.unpack_from(order + _SHDR, data, h.shoff)
        count = h.shnum or zero[5]
        shstrndx = zero[6] if h.shstrndx == SHN_XINDEX else h.shstrndx
        end = h.shoff + count * SHDR_SIZE
        if end > len(data):
            raise ParseError(file, f"e_shoff {h.shoff:#x}",
                             f"{count} section headers run past the end of the file ({len(data)} bytes)")
        raw = list(struct.iter_unpack(order + _SHDR, data[h.shoff:end]))
        if not raw:
            return []
        # Column by column with map and zip, so that no Python code runs per section (a cubin
        # has 4 sections a kernel): name, type, flags, addr, offset, size, link, info, align, entsize.
        cols = list(zip(*raw))
        n = len(data)
        if max(map(add, cols[4], cols[5])) > n:
            for i in [i for i, r in enumerate(raw) if r[4] + r[5] > n and r[1] != SHT_NOBITS][:1]:
                raise ParseError(file, f"section {i}",
                                 f"data at {raw[i][4]:#x}+{raw[i][5]:#x} runs past the end of the file ({n} bytes)")
        if shstrndx == SHN_UNDEF:
            names = [""] * count
        else:
            if shstrndx >= count:
                raise ParseError(file, "e_shstrndx", f"section name table index {shstrndx} >= {count} sections")
            _, _, _, _, off, size, *_rest = raw[shstrndx]
            strings = bytes(data[off:off + size])
            names = _names(strings, cols[0], file, "section {i}", "section name table")
        # tuple.__new__ skips the namedtuple's Python-level __new__.
        return list(map(_new, repeat(Section), zip(range(count), names, *cols[1:])))

    def _linked(self, sec: Section, where: str) -> Section:
        if not 0 < sec.link < len(self.sections):
            raise ParseError(self.file, where, f"sh_link {sec.link} names no section ({len(self.sections)} sections)")
        return self.sections[sec.link]

    def _xindex(self, symtab: Section) -> bytes | None:
        for sec in self.sections:
            if sec.type == SHT_SYMTAB_SHNDX and sec.link == symtab.index:
                return self.section_data(sec)
        return None


def _names(strings: bytes, offsets: list[int], file: str, where: str, table: str) -> list[str]:
    """The NUL-terminated strings at offsets of a string table's bytes; where names entry {i}."""
    if not strings.isascii():
        return [_string(strings, off, file, where.format(i=i), table) for i, off in enumerate(offsets)]
    # Fast path (cubin and most host tables): one decode, then str slicing per name; a
    # table that ends in NUL terminates every name that starts inside it.
    text = strings.decode("ascii")
    find, n = text.find, len(text)
    if text.endswith("\0") and max(offsets, default=0) < n:
        return [text[off:find("\0", off)] for off in offsets]
    out = []
    for i, off in enumerate(offsets):
        end = find("\0", off) if off < n else -1
        if end < 0:
            out.append(_string(strings, off, file, where.format(i=i), table))  # "" or the error
        else:
            out.append(text[off:end])
    return out


def _string(strings: bytes, offset: int, file: str, where: str, table: str) -> str:
    """The NUL-terminated string at offset of a string table's bytes."""
    if offset == 0 and not strings:
        return ""  # an empty table: every name is empty
    if offset >= len(strings):
        raise ParseError(file, where, f"name offset {offset:#x} is outside the {table} ({len(strings)} bytes)")
    end = strings.find(b"\0", offset)
    if end < 0:
        raise ParseError(file, where, f"name at {offset:#x} of the {table} has no terminating NUL")
    return strings[offset:end].decode("utf-8", errors="replace")


def parse(data: bytes, file: str = "<bytes>") -> Elf:
    """Read data's header and section table; ParseError on anything out of bounds."""
    return Elf(data if isinstance(data, (bytes, memoryview)) else bytes(data), file)
