"""Host ELF objects and shared libraries (x86-64, aarch64): one row per defined function.

These are the CPU-target kernels: TVM llvm PrimFuncs (`__tvm_ffi_<name>`), IREE llvm-cpu
dispatches. A function is a defined STT_FUNC symbol with a size; .symtab is preferred and
.dynsym is read when the file is stripped. A library whose symbols name one function at most
(an embedded executable that exports only its query function, IREE's llvm-cpu dispatches) has
its functions read from its DWARF instead, where it has some (DW_TAG_subprogram: name and code
range). On x86-64 each function's stack frame is read from its prologue (prologue_stack). The small ELF helpers here (`open_elf`,
`symbol_bytes`) are shared by the other ELF-based readers (hsaco, tvm_library, vmfb).
"""
from __future__ import annotations

import io
from typing import Any, Callable, TypeVar

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile

from parsers.base import KernelRecord, ParseError

ELF_MAGIC = b"\x7fELF"
HOST_MACHINES = {"EM_X86_64": "x86_64", "EM_AARCH64": "aarch64", "EM_386": "x86", "EM_ARM": "arm",
                 "EM_RISCV": "riscv"}

T = TypeVar("T")


def matches(data: bytes) -> bool:
    """An ELF file for a host CPU (not an AMDGPU or CUDA device binary)."""
    if data[:4] != ELF_MAGIC or len(data) < 20:
        return False
    little = data[5:6] == b"\x01"
    machine = int.from_bytes(data[18:20], "little" if little else "big")
    return machine in (0x3E, 0xB7, 0x03, 0x28, 0xF3)


def guarded(file: str, where: str, fn: Callable[[], T]) -> T:
    """Run fn, turning any failure of pyelftools on corrupt bytes into one ParseError."""
    try:
        return fn()
    except ParseError:
        raise
    except (ELFError, ValueError, KeyError, IndexError, TypeError, AttributeError, OverflowError,
            AssertionError, UnicodeDecodeError, MemoryError, RecursionError, EOFError) as err:
        raise ParseError(file, where, f"corrupt ELF: {type(err).__name__}: {err}") from None
    except Exception as err:  # construct.StreamError and friends
        raise ParseError(file, where, f"corrupt ELF: {type(err).__name__}: {err}") from None


def open_elf(data: bytes, file: str) -> ELFFile:
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise ParseError(file, "", f"expected bytes, got {type(data).__name__}")
    data = bytes(data)
    if data[:4] != ELF_MAGIC:
        raise ParseError(file, "offset 0", f"not an ELF file (magic {data[:4].hex() or 'empty'})")
    return guarded(file, "ELF header", lambda: ELFFile(io.BytesIO(data)))


def section_bytes_at(elf: ELFFile, data: bytes, address: int, size: int, file: str, what: str) -> bytes:
    """The file bytes behind [address, address+size) of a loaded section."""
    for section in elf.iter_sections():
        start, length = section["sh_addr"], section["sh_size"]
        if section["sh_type"] != "SHT_NOBITS" and start <= address and address + size <= start + length:
            offset = section["sh_offset"] + (address - start)
            if offset + size > len(data):
                raise ParseError(file, f"offset {offset:#x}", f"{what} runs past the end of the file")
            return data[offset:offset + size]
    raise ParseError(file, f"address {address:#x}", f"{what} lies in no section with file contents")


def symbol_contents(elf: ELFFile, data: bytes, sym: Any, size: int, file: str) -> bytes:
    """size bytes at a defined symbol; in a relocatable object st_value is section-relative."""
    what = f"symbol {sym.name}"
    if elf["e_type"] != "ET_REL":
        return section_bytes_at(elf, data, sym["st_value"], size, file, what)
    index = sym["st_shndx"]
    if not isinstance(index, int) or index >= elf.num_sections():
        raise ParseError(file, what, f"section index {index} is not a section")
    section = elf.get_section(index)
    offset = section["sh_offset"] + sym["st_value"]
    if sym["st_value"] + size > section["sh_size"] or offset + size > len(data):
        raise ParseError(file, f"offset {offset:#x}", f"{what} runs past its section")
    return data[offset:offset + size]


def symbols(elf: ELFFile, file: str) -> list[Any]:
    """Symbols of .symtab, else .dynsym (a stripped library keeps only the dynamic ones)."""
    def read() -> list[Any]:
        for name in (".symtab", ".dynsym"):
            table = elf.get_section_by_name(name)
            if table is not None and hasattr(table, "iter_symbols"):
                found = list(table.iter_symbols())
                if found:
                    return found
        return []
    return guarded(file, "symbol table", read)


def symbol_bytes(data: bytes, name: str, file: str) -> bytes | None:
    """Contents of the defined data symbol `name`, or None when there is no such symbol."""
    elf = open_elf(data, file)
    for sym in symbols(elf, file):
        if sym.name == name and sym["st_shndx"] != "SHN_UNDEF":
            return guarded(file, f"symbol {name}", lambda: symbol_contents(elf, data, sym, sym["st_size"], file))
    return None


def _arch(elf: ELFFile) -> str:
    machine = elf["e_machine"]
    return HOST_MACHINES.get(machine, str(machine).removeprefix("EM_").lower())


def kernels(data: bytes, file: str = "<bytes>") -> list[KernelRecord]:
    """One record per defined function symbol (STT_FUNC, size > 0), or per DWARF subprogram where
    the symbols name one function at most; extra: size (code bytes), address, binding."""
    elf = open_elf(data, file)
    arch = guarded(file, "ELF header", lambda: _arch(elf))
    rows = _symbol_rows(elf, file, arch)
    if len(rows) <= 1:
        rows += [r for r in _dwarf_rows(elf, file, arch) if r.name not in {x.name for x in rows}]
    if arch == "x86_64":
        for r in rows:
            code = guarded(file, f"function {r.name!r}", lambda: section_bytes_at(
                elf, data, r.extra["address"], min(r.extra["size"], PROLOGUE_BYTES), file, f"function {r.name}"))
            r.stack_bytes = prologue_stack(code)
    return rows


PROLOGUE_BYTES = 64


def prologue_stack(code: bytes) -> int | None:
    """Bytes an x86-64 function's prologue takes from the stack: 8 a register pushed, plus the
    `sub rsp, N` that follows the pushes (the frame of its locals and spills). None where the
    prologue aligns the stack (`and rsp, -N`: the size depends on the caller's stack) or ends in an
    instruction this reader does not know before the sub. A function with no sub reserves only its
    pushes."""
    i, pushed = 0, 0
    while i < len(code):
        b = code[i]
        if 0x50 <= b <= 0x57:  # push r64
            pushed, i = pushed + 8, i + 1
        elif b == 0x41 and i + 1 < len(code) and 0x50 <= code[i + 1] <= 0x57:  # push r8-r15
            pushed, i = pushed + 8, i + 2
        elif code[i:i + 3] == b"\x48\x89\xe5":  # mov rbp, rsp
            i += 3
        elif code[i:i + 3] == b"\x48\x83\xec" and i + 3 < len(code):  # sub rsp, imm8
            return pushed + code[i + 3]
        elif code[i:i + 3] == b"\x48\x81\xec" and i + 7 <= len(code):  # sub rsp, imm32
            return pushed + int.from_bytes(code[i + 3:i + 7], "little")
        elif code[i:i + 3] == b"\x48\x83\xe4":  # and rsp, imm8: realigned
            return None
        else:
            return pushed
    return pushed


def _dwarf_rows(elf: ELFFile, file: str, arch: str) -> list[KernelRecord]:
    """A record per DWARF subprogram with a code range (low_pc and high_pc), in address order."""
    def read() -> list[KernelRecord]:
        if not elf.has_dwarf_info():
            return []
        rows = []
        for cu in elf.get_dwarf_info().iter_CUs():
            for die in cu.iter_DIEs():
                attrs = die.attributes
                if die.tag != "DW_TAG_subprogram" or "DW_AT_low_pc" not in attrs or "DW_AT_high_pc" not in attrs:
                    continue
                name = attrs.get("DW_AT_linkage_name") or attrs.get("DW_AT_name")
                if name is None:
                    continue
                low, high = attrs["DW_AT_low_pc"].value, attrs["DW_AT_high_pc"]
                size = high.value if high.form != "DW_FORM_addr" else high.value - low  # DWARF 4: an offset
                if size > 0:
                    text = name.value.decode("utf-8", "replace") if isinstance(name.value, bytes) else str(name.value)
                    rows.append(KernelRecord(name=text, file=file, format="host-elf", arch=arch,
                                             extra={"size": int(size), "address": int(low), "binding": "dwarf"}))
        return sorted(rows, key=lambda r: r.extra["address"])
    return guarded(file, "DWARF .debug_info", read)


def _symbol_rows(elf: ELFFile, file: str, arch: str) -> list[KernelRecord]:
    rows: dict[str, KernelRecord] = {}
    for sym in symbols(elf, file):
        def row() -> KernelRecord | None:
            if sym["st_info"]["type"] != "STT_FUNC" or sym["st_size"] <= 0:
                return None
            if sym["st_shndx"] in ("SHN_UNDEF", "SHN_ABS"):
                return None
            return KernelRecord(name=sym.name, file=file, format="host-elf", arch=arch,
                                extra={"size": int(sym["st_size"]), "address": int(sym["st_value"]),
                                       "binding": sym["st_info"]["bind"].removeprefix("STB_").lower()})
        record = guarded(file, f"symbol {sym.name!r}", row)
        if record is not None and record.name not in rows:  # aliases: keep the first
            rows[record.name] = record
    return list(rows.values())
