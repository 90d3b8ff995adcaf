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

Two implementations give the same records: parsers/_cubin.c (built by `pip install`; the
path taken when it imports) and the Python below, which is the reference and the fallback
where no compiler built the extension. ROOTCAUSE_PURE_PYTHON=1 in the environment picks the
Python path (tests and benchmarks compare the two). The compiled decoder hands anything it
does not mirror exactly (non-ASCII string tables, SHN_XINDEX symbols) back to the Python one.
"""
from __future__ import annotations

import struct
from collections import namedtuple
from operator import itemgetter

from parsers.base import KernelRecord, ParseError, load_native

TYPE_CHECKING = False
if TYPE_CHECKING:
    from parsers import elf

EM_CUDA = 190
ELF_MAGIC = b"\x7fELF"
STO_CUDA_ENTRY = 0x10

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


native = load_native("_cubin")  # the compiled decoder, or None: the Python reader below


NvInfoRecord = namedtuple("NvInfoRecord", "fmt attr value offset")
NvInfoRecord.__doc__ = ("One .nv.info / .nv.compat attribute: value is an int (BVAL/HVAL), bytes (SVAL) "
                        "or None. (collections.namedtuple: typing is not imported on inspect's path.)")


def matches(data: bytes) -> bool:
    """True for an ELF whose e_machine is EM_CUDA (either byte order of the field)."""
    if len(data) < 20 or data[:4] != ELF_MAGIC:
        return False
    order = "<" if data[5] != 2 else ">"
    return struct.unpack_from(order + "H", data, 18)[0] == EM_CUDA


_RECORD = struct.Struct("<BBH")
_U32X2 = struct.Struct("<II")
_U32X3 = struct.Struct("<3I")


def _walk(data: bytes, section: str, file: str, keep: frozenset[int] | None) -> list[tuple[int, int, int, int]]:
    """(attr, fmt, offset, half) of the records whose attribute is in keep (all when None).

    Every record's framing is checked, kept or not. half is the value of a BVAL/HVAL record
    (BVAL uses its low byte) and the payload size of an SVAL one, whose payload starts at offset+4.
    """
    # The hot loop of inspect (a few records per kernel parameter): locals, plain tuples.
    out = []
    append, unpack, n, pos = out.append, _RECORD.unpack_from, len(data), 0
    while pos < n:
        if n - pos < 4:
            raise ParseError(file, f"{section}+{pos:#x}", f"truncated attribute header ({n - pos} of 4 bytes)")
        fmt, attr, half = unpack(data, pos)
        if fmt == EIFMT_SVAL:
            end = pos + 4 + half
            if end > n:
                raise ParseError(file, f"{section}+{pos:#x}",
                                 f"attribute {attr:#x} payload of {half} bytes runs past the section end ({n} bytes)")
        elif fmt == EIFMT_HVAL or fmt == EIFMT_NVAL or fmt == EIFMT_BVAL:
            end = pos + 4
        else:
            raise ParseError(file, f"{section}+{pos:#x}", f"unknown attribute format {fmt:#x} (attribute {attr:#x})")
        if keep is None or attr in keep:
            append((attr, fmt, pos, half))
        pos = end
    return out


def nvinfo_records(data: bytes, section: str = ".nv.info", file: str = "<bytes>") -> list[NvInfoRecord]:
    """Decode the attribute records of one .nv.info-style section's bytes."""
    out = []
    for attr, fmt, pos, half in _walk(data, section, file, None):
        if fmt == EIFMT_SVAL:
            value: int | bytes | None = data[pos + 4:pos + 4 + half]
        else:
            value = None if fmt == EIFMT_NVAL else (half & 0xFF if fmt == EIFMT_BVAL else half)
        out.append(NvInfoRecord(fmt, attr, value, pos))
    return out


def cubin_arch(e_flags: int, abi_version: int, accelerator: bool = False) -> str:
    """'sm_90' / 'sm_90a' from e_flags, e_ident[EI_ABIVERSION] and the .nv.compat marker."""
    if abi_version >= 8:
        sm, accel = (e_flags >> 8) & 0xFF, bool(e_flags & 0x8)
    else:
        sm, accel = e_flags & 0xFF, bool(e_flags & 0x800)
    return f"sm_{sm}" + ("a" if accel or accelerator else "")


def _open(data: bytes, file: str) -> elf.Elf:
    """The cubin's ELF, after the checks that say why a file is not a cubin at all."""
    from parsers import elf  # here: the compiled decoder's runs need no Python ELF reader
    header = elf.read_header(data, file)
    if header.byteorder != "<":
        raise ParseError(file, "e_ident", "not a little-endian ELF (CUDA ELF is little-endian)")
    if header.machine != EM_CUDA:
        raise ParseError(file, "e_machine", f"not a CUDA ELF: e_machine {header.machine}, expected {EM_CUDA} (EM_CUDA)")
    image = elf.Elf(data, file)
    if not image.sections:
        raise ParseError(file, "e_shnum", "no section headers")
    return image


_KEYED = frozenset((EIATTR_REGCOUNT, EIATTR_FRAME_SIZE, EIATTR_MIN_STACK_SIZE, EIATTR_MAX_STACK_SIZE))
_PER_KERNEL = frozenset((EIATTR_MAX_THREADS, EIATTR_REQNTID, EIATTR_CBANK_PARAM_SIZE, EIATTR_PARAM_CBANK,
                         EIATTR_KPARAM_INFO, EIATTR_MAXREG_COUNT, EIATTR_NUM_BARRIERS))


def _per_symbol(data: bytes, file: str) -> dict[int, dict[int, int]]:
    """Global .nv.info SVAL records of (symbol index u32, value u32) -> {symbol: {attr: value}}."""
    out: dict[int, dict[int, int]] = {}
    for attr, fmt, pos, half in _walk(data, ".nv.info", file, _KEYED):
        if fmt == EIFMT_SVAL:
            if half < 8:
                raise ParseError(file, f".nv.info+{pos:#x}", f"attribute {attr:#x} has {half} bytes, 8 expected")
            sym, val = _U32X2.unpack_from(data, pos + 4)
            out.setdefault(sym, {})[attr] = val
    return out


def _payload(data: bytes, rec: tuple[int, int, int, int], size: int, section: str, file: str) -> int:
    """Offset of an SVAL record's payload of at least size bytes."""
    attr, fmt, pos, half = rec
    if fmt != EIFMT_SVAL or half < size:
        raise ParseError(file, f"{section}+{pos:#x}", f"attribute {attr:#x}: expected {size} payload bytes")
    return pos + 4


def _kernel_attrs(data: bytes, section: str, file: str) -> dict:
    """The per-kernel facts of a .nv.info.<name> section's bytes."""
    kparams: list[int] = []
    out: dict = {"kparams": kparams}
    for rec in _walk(data, section, file, _PER_KERNEL):
        attr, fmt, pos, half = rec
        value = half & 0xFF if fmt == EIFMT_BVAL else half if fmt == EIFMT_HVAL else None
        if attr == EIATTR_KPARAM_INFO:  # the most common record: one per parameter
            if fmt != EIFMT_SVAL or half < 12:
                _payload(data, rec, 12, section, file)  # raises
            kparams.append(pos + 4)  # decoded only when needed
        elif attr == EIATTR_MAX_THREADS:
            out["max_threads"] = _U32X3.unpack_from(data, _payload(data, rec, 12, section, file))
        elif attr == EIATTR_REQNTID:
            out["reqntid"] = _U32X3.unpack_from(data, _payload(data, rec, 12, section, file))
        elif attr == EIATTR_CBANK_PARAM_SIZE and value is not None:
            out["param_size"] = value
        elif attr == EIATTR_PARAM_CBANK:
            _, packed = _U32X2.unpack_from(data, _payload(data, rec, 8, section, file))
            out["param_cbank"] = (packed & 0xFFFF, packed >> 16)  # (offset in bank 0, size)
        elif attr == EIATTR_MAXREG_COUNT and value is not None:
            out["maxreg"] = value
        elif attr == EIATTR_NUM_BARRIERS and value is not None:
            out["barriers"] = value
    return out


def _kparams_end(data: bytes, offsets: list[int]) -> int:
    """End of the last parameter: KPARAM_INFO payload is u32 index, u16 ordinal, u16 offset,
    u32 flags with the size in bits 18..31."""
    ends = []
    for at in offsets:
        _, ordinal_offset, flags = _U32X3.unpack_from(data, at)
        ends.append((ordinal_offset >> 16) + ((flags >> 18) & 0x3FFF))
    return max(ends)


def _accelerator_target(image: elf.Elf) -> bool:
    sec = image.section(".nv.compat")
    if sec is None:
        return False
    # nvinfo_records' value == 1, without building every record (each one's framing is checked).
    recs = _walk(image.section_data(sec), ".nv.compat", image.file, _ACCELERATOR)
    return any((fmt == EIFMT_BVAL and half & 0xFF == 1) or (fmt == EIFMT_HVAL and half == 1)
               for _, fmt, _, half in recs)


_ACCELERATOR = frozenset((EICOMPAT_ATTR_CUDA_ACCELERATOR_TARGET,))


def _reserved_smem(symbols: dict[str, int]) -> int:
    if ".nv.reservedSmem.cap" in symbols:
        return symbols[".nv.reservedSmem.cap"]
    return RESERVED_SMEM_DEFAULT if ".nv.reservedSmem.offset0" in symbols else 0


def _symbols(image: elf.Elf) -> tuple[list[elf.Symbol], dict[str, int]]:
    """FUNC symbols defined in a section; name -> st_value of every symbol."""
    from parsers import elf
    syms = image.symbols(".symtab")
    funcs = [s for s in syms if s.type == elf.STT_FUNC and elf.SHN_UNDEF < s.shndx < elf.SHN_LORESERVE]
    return funcs, dict(map(_NAME_VALUE, syms))


_NAME_VALUE = itemgetter(1, 2)  # elf.Symbol's name and value


def kernels(data: bytes, file: str = "<bytes>") -> list[KernelRecord]:
    """One KernelRecord per kernel entry of a cubin (format 'cubin'); data may be a memoryview."""
    data = data if isinstance(data, (bytes, memoryview)) else bytes(data)
    found = native.kernels(data, file) if native is not None else None
    if found is None:
        return python_kernels(data, file)
    arch, rows = found
    return [KernelRecord(name, file, "cubin", arch, regs, None, None, shared, local, stack, param, max_threads,
                         None, None, block, extra)
            for name, regs, shared, local, stack, param, max_threads, block, extra in rows]


def python_kernels(data: bytes, file: str = "<bytes>") -> list[KernelRecord]:
    """kernels() in Python: the reference the compiled decoder is tested against."""
    from parsers import elf

    image = _open(data, file)
    header = image.header
    arch = cubin_arch(header.flags, header.abi_version, _accelerator_target(image))
    funcs, symvalues = _symbols(image)
    glob = image.section(".nv.info")
    per_sym = _per_symbol(image.section_data(glob), file) if glob else {}
    # nvlink/ptxas add the reserved area when they lay out an executable cubin; a
    # relocatable one (-rdc, ET_REL) holds only the program's own shared bytes.
    reserved = _reserved_smem(symvalues) if header.type == elf.ET_EXEC else 0
    marked = any(s.other & STO_CUDA_ENTRY for s in funcs)
    rows = []
    section = image.section
    for sym in funcs:
        text = section(f".text.{sym.name}")
        if text is None or sym.shndx != text.index:
            continue  # a device function inside another kernel's text, or not ours
        info = section(f".nv.info.{sym.name}")
        # Entries carry STO_CUDA_ENTRY; in a relocatable cubin device functions have their
        # own .text and .nv.info too, so .nv.info only decides when no symbol is marked.
        if not (sym.other & STO_CUDA_ENTRY) and (marked or info is None):
            continue
        row = _row(sym.name, image, arch, text, info, per_sym.get(sym.index, {}), reserved)
        row.extra.update(e_flags=header.flags, abi_version=header.abi_version)
        rows.append(row)
    return rows


def _row(name: str, image: elf.Elf, arch: str, text: elf.Section, info: elf.Section | None,
         sym_attrs: dict[int, int], reserved: int) -> KernelRecord:
    file = image.file
    section = f".nv.info.{name}"
    info_data = image.section_data(info) if info else b""
    attrs = _kernel_attrs(info_data, section, file)
    regs = sym_attrs.get(EIATTR_REGCOUNT)
    if regs is None and text.info >> 24:
        regs = text.info >> 24
    extra: dict = {}

    shared_sec = image.section(f".nv.shared.{name}")
    if shared_sec is not None:
        size = shared_sec.size
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
        param = _kparams_end(info_data, kparams)
    extra["params"] = len(kparams)
    const0 = image.section(f".nv.constant0.{name}")
    if const0 is not None:
        extra["constant0_bytes"] = const0.size
    local_sec = image.section(f".nv.local.{name}")
    extra["local_section_bytes"] = local_sec.size if local_sec is not None else 0

    barriers = attrs.get("barriers")
    if barriers is None and (text.flags >> 20) & 0x7F:
        barriers = (text.flags >> 20) & 0x7F  # older ptxas: bar count in sh_flags
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
