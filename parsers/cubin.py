"""NVIDIA cubin (CUDA device ELF, e_machine EM_CUDA = 190): per-kernel static resources.

Where each field comes from, in a cubin written by ptxas:
- kernels: STT_FUNC symbols that live in their own `.text.<name>` section and are entries
  (st_other bit STO_CUDA_ENTRY 0x10; a `.nv.info.<name>` section only when no symbol has it).
- registers: EIATTR_REGCOUNT in the global `.nv.info` (keyed by symbol index); else the
  top byte of `.text.<name>` sh_info (ptxas 13 leaves it 0 on sm_90, pre-Blackwell it is set).
- local_bytes: EIATTR_FRAME_SIZE (ptxas -v "bytes stack frame"; per thread).
- stack_bytes: EIATTR_MIN_STACK_SIZE (cuobjdump STACK); 0xffffffff means ptxas could not
  size it (recursion): stack_bytes None, extra['stack_unknown'] True.
- shared_bytes: static shared memory the program declared, as ptxas -v and the driver
  (CUPTI static_shared_memory) report it. On sm_90+ ptxas sizes `.nv.shared.<name>` with a
  reserved system area at its start (cuobjdump SHARED is the section size): the reserved
  amount is `.nv.reservedSmem.cap` when the cubin defines it, else 1 KiB whenever the
  cubin carries `.nv.reservedSmem.offset0` (ptxas 13.5 sm_90 writes no cap symbol), and
  only in an executable (ET_EXEC) cubin: a relocatable (-rdc) one has no reserve yet.
  extra['shared_section_bytes'] and extra['reserved_shared_bytes'] keep both numbers.
- param_bytes: EIATTR_CBANK_PARAM_SIZE (bytes of kernel parameters), else the size half of
  EIATTR_PARAM_CBANK, else the end of the last EIATTR_KPARAM_INFO; the whole constant bank 0
  (cuobjdump CONSTANT[0]) is extra['constant0_bytes'].
- max_threads_per_block / block: EIATTR_MAX_THREADS (launch bounds), EIATTR_REQNTID.
- arch: e_flags; two layouts, chosen by e_ident[EI_ABIVERSION] (LLVM BinaryFormat/ELF.h):
  ABI 7 (CUDA <= 12.x): SM = e_flags & 0xff, 'a' = EF_CUDA_ACCELERATORS_V1 (0x800);
  ABI 8 (CUDA 12.8+/13): SM = (e_flags >> 8) & 0xff, 'a' = EF_CUDA_ACCELERATORS (0x8).
  ptxas 13.5 leaves both 'a' bits clear for sm_90a and marks it in `.nv.compat` with
  EICOMPAT_ATTR_CUDA_ACCELERATOR_TARGET (attribute 9) = 1, which is what cuobjdump reads.
- spills: not recorded in a cubin (only ptxas -v prints them): None.

.nv.info records: format byte, attribute byte, then a little-endian u16 that is the value
for EIFMT_BVAL/HVAL (BVAL uses its low byte), 0 for EIFMT_NVAL, and the payload size for
EIFMT_SVAL, followed by that many payload bytes.
"""
from __future__ import annotations

import io
import struct
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

from elftools.elf.elffile import ELFFile

from parsers.base import KernelRecord, ParseError

EM_CUDA = 190
ELF_MAGIC = b"\x7fELF"
STO_CUDA_ENTRY = 0x10
SHT_NOBITS = 8

EIFMT_NVAL, EIFMT_BVAL, EIFMT_HVAL, EIFMT_SVAL = 1, 2, 3, 4

# The EIATTR codes this reader uses (names as cuobjdump -elf prints them).
EIATTR_MAX_THREADS = 0x05
EIATTR_PARAM_CBANK = 0x0A
EIATTR_REQNTID = 0x10
EIATTR_FRAME_SIZE = 0x11
EIATTR_MIN_STACK_SIZE = 0x12
EIATTR_KPARAM_INFO = 0x17
EIATTR_CBANK_PARAM_SIZE = 0x19
EIATTR_MAXREG_COUNT = 0x1B
EIATTR_MAX_STACK_SIZE = 0x23
EIATTR_REGCOUNT = 0x2F
EIATTR_NUM_BARRIERS = 0x4C
EICOMPAT_ATTR_CUDA_ACCELERATOR_TARGET = 0x09

STACK_UNKNOWN = 0xFFFFFFFF
RESERVED_SMEM_DEFAULT = 1024


@dataclass
class NvInfoRecord:
    """One .nv.info / .nv.compat attribute: value is an int (BVAL/HVAL), bytes (SVAL) or None."""

    fmt: int
    attr: int
    value: int | bytes | None
    offset: int


def matches(data: bytes) -> bool:
    """True for an ELF whose e_machine is EM_CUDA (either byte order of the field)."""
    if len(data) < 20 or data[:4] != ELF_MAGIC:
        return False
    order = "<" if data[5] != 2 else ">"
    return struct.unpack_from(order + "H", data, 18)[0] == EM_CUDA


def nvinfo_records(data: bytes, section: str = ".nv.info", file: str = "<bytes>") -> list[NvInfoRecord]:
    """Decode the attribute records of one .nv.info-style section's bytes."""
    out = []
    pos = 0
    while pos < len(data):
        if len(data) - pos < 4:
            raise ParseError(file, f"{section}+{pos:#x}", f"truncated attribute header ({len(data) - pos} of 4 bytes)")
        fmt, attr, half = struct.unpack_from("<BBH", data, pos)
        if fmt == EIFMT_SVAL:
            end = pos + 4 + half
            if end > len(data):
                raise ParseError(file, f"{section}+{pos:#x}",
                                 f"attribute {attr:#x} payload of {half} bytes runs past the section end ({len(data)} bytes)")
            value: int | bytes | None = data[pos + 4:end]
        elif fmt in (EIFMT_BVAL, EIFMT_HVAL, EIFMT_NVAL):
            end = pos + 4
            value = None if fmt == EIFMT_NVAL else (half & 0xFF if fmt == EIFMT_BVAL else half)
        else:
            raise ParseError(file, f"{section}+{pos:#x}", f"unknown attribute format {fmt:#x} (attribute {attr:#x})")
        out.append(NvInfoRecord(fmt, attr, value, pos))
        pos = end
    return out


def cubin_arch(e_flags: int, abi_version: int, accelerator: bool = False) -> str:
    """'sm_90' / 'sm_90a' from e_flags, e_ident[EI_ABIVERSION] and the .nv.compat marker."""
    if abi_version >= 8:
        sm, accel = (e_flags >> 8) & 0xFF, bool(e_flags & 0x8)
    else:
        sm, accel = e_flags & 0xFF, bool(e_flags & 0x800)
    return f"sm_{sm}" + ("a" if accel or accelerator else "")


@contextmanager
def _elf_errors(file: str, where: str) -> Iterator[None]:
    # pyelftools raises many exception types on damaged input; every one becomes a ParseError.
    try:
        yield
    except ParseError:
        raise
    except Exception as exc:  # noqa: BLE001 - the reader's contract is ParseError only
        raise ParseError(file, where, f"malformed ELF ({type(exc).__name__}: {exc})") from None


def _check_layout(data: bytes, file: str) -> None:
    """Bounds-check the ELF header and section table before pyelftools reads them."""
    if len(data) < 64:
        raise ParseError(file, "offset 0", f"truncated ELF header ({len(data)} bytes, 64 needed)")
    if data[:4] != ELF_MAGIC:
        raise ParseError(file, "offset 0", f"not an ELF file (magic {data[:4].hex()})")
    if data[4] != 2 or data[5] != 1:
        raise ParseError(file, "e_ident", f"not a 64-bit little-endian ELF (class {data[4]}, data {data[5]})")
    machine = struct.unpack_from("<H", data, 18)[0]
    if machine != EM_CUDA:
        raise ParseError(file, "e_machine", f"not a CUDA ELF: e_machine {machine}, expected {EM_CUDA} (EM_CUDA)")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    if shnum == 0:
        raise ParseError(file, "e_shnum", "no section headers")
    if shentsize != 64:
        raise ParseError(file, "e_shentsize", f"section header size {shentsize}, expected 64")
    if shoff + shnum * 64 > len(data):
        raise ParseError(file, f"e_shoff {shoff:#x}",
                         f"{shnum} section headers run past the end of the file ({len(data)} bytes)")
    if shstrndx >= shnum:
        raise ParseError(file, "e_shstrndx", f"section name table index {shstrndx} >= {shnum} sections")
    for i in range(shnum):
        sh_type, = struct.unpack_from("<I", data, shoff + i * 64 + 4)
        off, size = struct.unpack_from("<QQ", data, shoff + i * 64 + 0x18)
        if sh_type != SHT_NOBITS and off + size > len(data):
            raise ParseError(file, f"section {i}", f"data at {off:#x}+{size:#x} runs past the end of the file ({len(data)} bytes)")


def _per_symbol(records: list[NvInfoRecord], file: str) -> dict[int, dict[int, int]]:
    """Global .nv.info SVAL records of (symbol index u32, value u32) -> {symbol: {attr: value}}."""
    out: dict[int, dict[int, int]] = {}
    keyed = (EIATTR_REGCOUNT, EIATTR_FRAME_SIZE, EIATTR_MIN_STACK_SIZE, EIATTR_MAX_STACK_SIZE)
    for rec in records:
        if rec.attr in keyed and isinstance(rec.value, bytes):
            if len(rec.value) < 8:
                raise ParseError(file, f".nv.info+{rec.offset:#x}", f"attribute {rec.attr:#x} has {len(rec.value)} bytes, 8 expected")
            sym, val = struct.unpack_from("<II", rec.value)
            out.setdefault(sym, {})[rec.attr] = val
    return out


def _u32s(rec: NvInfoRecord, n: int, section: str, file: str) -> tuple[int, ...]:
    if not isinstance(rec.value, bytes) or len(rec.value) < 4 * n:
        raise ParseError(file, f"{section}+{rec.offset:#x}", f"attribute {rec.attr:#x}: expected {4 * n} payload bytes")
    return struct.unpack_from(f"<{n}I", rec.value)


def _kernel_attrs(records: list[NvInfoRecord], section: str, file: str) -> dict:
    """The per-kernel facts of a .nv.info.<name> section."""
    out: dict = {"kparams": []}
    for rec in records:
        if rec.attr == EIATTR_MAX_THREADS:
            out["max_threads"] = _u32s(rec, 3, section, file)
        elif rec.attr == EIATTR_REQNTID:
            out["reqntid"] = _u32s(rec, 3, section, file)
        elif rec.attr == EIATTR_CBANK_PARAM_SIZE and isinstance(rec.value, int):
            out["param_size"] = rec.value
        elif rec.attr == EIATTR_PARAM_CBANK:
            _, packed = _u32s(rec, 2, section, file)
            out["param_cbank"] = (packed & 0xFFFF, packed >> 16)  # (offset in bank 0, size)
        elif rec.attr == EIATTR_KPARAM_INFO:
            _, ordinal_offset, flags = _u32s(rec, 3, section, file)
            # (ordinal, offset in the parameter bank, size): u32 index, u16 ordinal, u16 offset, u32 flags|size<<18
            out["kparams"].append((ordinal_offset & 0xFFFF, ordinal_offset >> 16, (flags >> 18) & 0x3FFF))
        elif rec.attr == EIATTR_MAXREG_COUNT and isinstance(rec.value, int):
            out["maxreg"] = rec.value
        elif rec.attr == EIATTR_NUM_BARRIERS and isinstance(rec.value, int):
            out["barriers"] = rec.value
    return out


def _accelerator_target(sections: dict, file: str) -> bool:
    sec = sections.get(".nv.compat")
    if sec is None:
        return False
    recs = nvinfo_records(sec.data(), ".nv.compat", file)
    return any(r.attr == EICOMPAT_ATTR_CUDA_ACCELERATOR_TARGET and r.value == 1 for r in recs)


def _reserved_smem(symbols: dict[str, int]) -> int:
    if ".nv.reservedSmem.cap" in symbols:
        return symbols[".nv.reservedSmem.cap"]
    return RESERVED_SMEM_DEFAULT if ".nv.reservedSmem.offset0" in symbols else 0


def _symbols(sections: dict) -> tuple[list[tuple[int, str, int, int]], dict[str, int]]:
    """(index, name, section index, raw st_other) of FUNC symbols; name -> st_value of all."""
    symtab = sections.get(".symtab")
    if symtab is None:
        return [], {}
    raw = symtab.data()
    funcs, values = [], {}
    for i, sym in enumerate(symtab.iter_symbols()):
        values[sym.name] = sym["st_value"]
        if sym["st_info"]["type"] == "STT_FUNC" and isinstance(sym["st_shndx"], int):
            other = raw[i * 24 + 5] if i * 24 + 6 <= len(raw) else 0
            funcs.append((i, sym.name, sym["st_shndx"], other))
    return funcs, values


def kernels(data: bytes, file: str = "<bytes>") -> list[KernelRecord]:
    """One KernelRecord per kernel entry of a cubin (format 'cubin')."""
    data = bytes(data)
    _check_layout(data, file)
    with _elf_errors(file, "ELF"):
        elf = ELFFile(io.BytesIO(data))
        listed = list(elf.iter_sections())  # pyelftools re-parses headers on every lookup
        sections = {s.name: s for s in listed}
        abi_version = elf.header["e_ident"]["EI_ABIVERSION"]
        arch = cubin_arch(elf.header["e_flags"], abi_version if isinstance(abi_version, int) else 0,
                          _accelerator_target(sections, file))
        funcs, symvalues = _symbols(sections)
        glob = sections.get(".nv.info")
        per_sym = _per_symbol(nvinfo_records(glob.data(), ".nv.info", file), file) if glob else {}
        # nvlink/ptxas add the reserved area when they lay out an executable cubin; a
        # relocatable one (-rdc, ET_REL) holds only the program's own shared bytes.
        reserved = _reserved_smem(symvalues) if elf.header["e_type"] == "ET_EXEC" else 0
        marked = any(other & STO_CUDA_ENTRY for *_, other in funcs)
        rows = []
        for index, name, shndx, other in funcs:
            text = sections.get(f".text.{name}")
            if text is None or shndx >= len(listed) or listed[shndx].name != text.name:
                continue  # a device function inside another kernel's text, or not ours
            info = sections.get(f".nv.info.{name}")
            # Entries carry STO_CUDA_ENTRY; in a relocatable cubin device functions have their
            # own .text and .nv.info too, so .nv.info only decides when no symbol is marked.
            if not (other & STO_CUDA_ENTRY) and (marked or info is None):
                continue
            rows.append(_row(name, file, arch, text, info, sections, per_sym.get(index, {}), reserved))
        for row in rows:
            row.extra.update(e_flags=elf.header["e_flags"], abi_version=abi_version)
    return rows


def _row(name: str, file: str, arch: str, text, info, sections: dict, sym_attrs: dict[int, int],
         reserved: int) -> KernelRecord:
    section = f".nv.info.{name}"
    attrs = _kernel_attrs(nvinfo_records(info.data(), section, file), section, file) if info else {"kparams": []}
    regs = sym_attrs.get(EIATTR_REGCOUNT)
    if regs is None and text["sh_info"] >> 24:
        regs = text["sh_info"] >> 24
    extra: dict = {}

    shared_sec = sections.get(f".nv.shared.{name}")
    shared = None
    if shared_sec is not None:
        size = shared_sec["sh_size"]
        res = reserved if size >= reserved else 0
        shared = size - res
        extra.update(shared_section_bytes=size, reserved_shared_bytes=res)
    else:
        shared = 0

    stack = sym_attrs.get(EIATTR_MIN_STACK_SIZE)
    if stack == STACK_UNKNOWN:
        stack = None
        extra["stack_unknown"] = True
    if EIATTR_MAX_STACK_SIZE in sym_attrs:
        extra["stack_max"] = sym_attrs[EIATTR_MAX_STACK_SIZE]

    kparams = attrs["kparams"]
    param = attrs.get("param_size")
    if param is None and "param_cbank" in attrs:
        param = attrs["param_cbank"][1]
    if param is None and kparams:
        param = max(off + size for _, off, size in kparams)
    extra["params"] = len(kparams)
    const0 = sections.get(f".nv.constant0.{name}")
    if const0 is not None:
        extra["constant0_bytes"] = const0["sh_size"]
    local_sec = sections.get(f".nv.local.{name}")
    extra["local_section_bytes"] = local_sec["sh_size"] if local_sec is not None else 0

    barriers = attrs.get("barriers")
    if barriers is None and (text["sh_flags"] >> 20) & 0x7F:
        barriers = (text["sh_flags"] >> 20) & 0x7F  # older ptxas: bar count in sh_flags
    elif barriers is None and info is not None:
        barriers = 0  # ptxas writes EIATTR_NUM_BARRIERS only when the kernel uses a barrier
    extra["barriers"] = barriers
    if "maxreg" in attrs:
        extra["maxreg"] = attrs["maxreg"]

    block = attrs.get("reqntid")
    bound = block or attrs.get("max_threads")
    max_threads = bound[0] * bound[1] * bound[2] if bound else None
    if block:
        extra["reqntid"] = list(block)
    if attrs.get("max_threads"):
        extra["max_threads"] = list(attrs["max_threads"])
    return KernelRecord(
        name=name, file=file, format="cubin", arch=arch, registers=regs, shared_bytes=shared,
        local_bytes=sym_attrs.get(EIATTR_FRAME_SIZE), stack_bytes=stack, param_bytes=param,
        max_threads_per_block=max_threads, spills=None, block=tuple(block) if block else None, extra=extra,
    )
