"""IREE VM FlatBuffer modules (.vmfb) and the device executables embedded in them.

Layout (IREE runtime/src/iree/vm/bytecode/archive.c, schemas/bytecode_module_def.fbs):
- optionally a "polyglot" zip: a stored zip whose first entry is module.fb and whose other
  entries are the large rodata segments, so `unzip` can list them; the runtime ignores the zip
  and only skips the first local file header;
- a u32 size prefix, then the BytecodeModuleDef FlatBuffer (file identifier 'IREE');
- external rodata after the FlatBuffer, at align(end of FlatBuffer, 64) + external_data_offset.
Each hal.executable is one rodata segment. GPU executables start with a 64-byte
iree_flatbuffer_file_header_t (magic = the FlatBuffer identifier, u32 version, u64 size) and
then an ExecutableDef FlatBuffer: 'HIP1' (hip_executable_def.fbs: exports[kernel_name,
block_dims, block_shared_memory_size], modules[hsaco_image]) and 'CDA1' (the CUDA one, same
shape, modules[ptx_image]). llvm-cpu executables are embedded ELF shared objects.
"""
from __future__ import annotations

import io
import struct
import zipfile
from dataclasses import dataclass, field
from typing import Any

from parsers.base import ParseError
from parsers.host_elf import ELF_MAGIC, guarded, open_elf, symbols

ZIP_LOCAL = b"PK\x03\x04"
SEGMENT_ALIGNMENT = 64
HEADER_SIZE = 64  # iree_flatbuffer_file_header_t
# ExecutableDef identifier -> (HAL executable format, blob kind).
GPU_FORMATS = {b"HIP1": ("rocm-hsaco-fb", "hsaco"), b"CDA1": ("cuda-nvptx-fb", "ptx")}
ELF_FORMATS = {0x3E: "embedded-elf-x86_64", 0xB7: "embedded-elf-arm_64", 0xF3: "embedded-elf-riscv_64",
               0x03: "embedded-elf-x86_32", 0x28: "embedded-elf-arm_32"}


@dataclass
class VmfbExecutable:
    """One device module of a hal.executable: its binary and the dispatch symbols it exports.

    launch: per export, what the ExecutableDef records for the launch:
    {"block": [x, y, z], "shared_bytes": n} (GPU formats only).
    """

    name: str
    format: str
    blob_kind: str | None
    blob: bytes
    exports: list[str]
    offset: int = 0
    launch: dict[str, dict[str, Any]] = field(default_factory=dict)


class _Buffer:
    """Bounds-checked reads of one FlatBuffer (offsets relative to its start)."""

    def __init__(self, data: bytes, base: int, file: str, what: str):
        self.data, self.base, self.file, self.what = data, base, file, what

    def fail(self, pos: int, why: str) -> ParseError:
        return ParseError(self.file, f"{self.what} at offset {self.base + pos:#x}", why)

    def unpack(self, fmt: str, pos: int) -> Any:
        size = struct.calcsize(fmt)
        if pos < 0 or pos + size > len(self.data):
            raise self.fail(pos, f"read of {size} bytes runs past the end ({len(self.data)} bytes)")
        return struct.unpack_from("<" + fmt, self.data, pos)[0]

    def root(self) -> int:
        return self.unpack("I", 0)

    def field(self, table: int, index: int) -> int | None:
        """Absolute position of field `index` of the table at `table`, None when absent."""
        vtable = table - self.unpack("i", table)
        vsize = self.unpack("H", vtable)
        if vsize < 4 or vsize % 2:
            raise self.fail(vtable, f"bad vtable size {vsize}")
        if 4 + 2 * index >= vsize:
            return None
        rel = self.unpack("H", vtable + 4 + 2 * index)
        return table + rel if rel else None

    def scalar(self, table: int, index: int, fmt: str, default: int = 0) -> int:
        pos = self.field(table, index)
        return default if pos is None else self.unpack(fmt, pos)

    def ref(self, table: int, index: int) -> int | None:
        pos = self.field(table, index)
        return None if pos is None else pos + self.unpack("I", pos)

    def vector(self, table: int, index: int) -> tuple[int, int]:
        """(position of the first element, count); (0, 0) when absent."""
        pos = self.ref(table, index)
        if pos is None:
            return 0, 0
        count = self.unpack("I", pos)
        if count > len(self.data):
            raise self.fail(pos, f"vector of {count} elements is longer than the buffer")
        return pos + 4, count

    def bytes_(self, table: int, index: int) -> bytes | None:
        pos = self.ref(table, index)
        if pos is None:
            return None
        size = self.unpack("I", pos)
        if pos + 4 + size > len(self.data):
            raise self.fail(pos, f"byte vector of {size} bytes runs past the end")
        return self.data[pos + 4:pos + 4 + size]

    def string(self, table: int, index: int) -> str | None:
        raw = self.bytes_(table, index)
        return None if raw is None else raw.decode("utf-8", "replace")

    def tables(self, table: int, index: int) -> list[int]:
        start, count = self.vector(table, index)
        return [start + 4 * i + self.unpack("I", start + 4 * i) for i in range(count)]


def matches(data: bytes) -> bool:
    """A vmfb: a bare size-prefixed 'IREE' FlatBuffer, or one behind a zip local header."""
    start = 0
    if data[:4] == ZIP_LOCAL and len(data) >= 30:
        start = 30 + int.from_bytes(data[26:28], "little") + int.from_bytes(data[28:30], "little")
    return data[start + 8:start + 12] == b"IREE"


def _module(data: bytes, file: str) -> tuple[_Buffer, int, int]:
    """The BytecodeModuleDef buffer, its root table and the base of the external rodata."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise ParseError(file, "", f"expected bytes, got {type(data).__name__}")
    data = bytes(data)
    start = 0
    if data[:4] == ZIP_LOCAL:
        if len(data) < 30:
            raise ParseError(file, "offset 0", "zip local header is truncated")
        start = 30 + int.from_bytes(data[26:28], "little") + int.from_bytes(data[28:30], "little")
    if start + 12 > len(data):
        raise ParseError(file, f"offset {start:#x}", "file too short for a vmfb FlatBuffer header")
    size = int.from_bytes(data[start:start + 4], "little")
    if data[start + 8:start + 12] != b"IREE":
        raise ParseError(file, f"offset {start + 8:#x}",
                         f"not an IREE vmfb (file identifier {data[start + 8:start + 12]!r}, expected b'IREE')")
    if start + 4 + size > len(data):
        raise ParseError(file, f"offset {start:#x}", f"FlatBuffer size prefix {size} runs past the end of the file")
    fb = _Buffer(data[start + 4:start + 4 + size], start + 4, file, "BytecodeModuleDef")
    rodata_base = -(-(start + 4 + size) // SEGMENT_ALIGNMENT) * SEGMENT_ALIGNMENT
    return fb, fb.root(), rodata_base


def segments(data: bytes, file: str = "<bytes>") -> list[tuple[int, bytes]]:
    """Every rodata segment as (file offset, bytes): embedded ones and external ones."""
    fb, root, rodata_base = _module(data, file)
    found = []
    for i, seg in enumerate(fb.tables(root, 9)):  # BytecodeModuleDef.rodata_segments
        if fb.scalar(seg, 0, "B"):  # CompressionTypeDef union type
            raise fb.fail(seg, f"rodata segment {i} is compressed; not supported")
        embedded = fb.bytes_(seg, 2)
        if embedded is not None:
            found.append((fb.base + seg, embedded))
            continue
        offset, length = fb.scalar(seg, 3, "Q"), fb.scalar(seg, 4, "Q")
        at = rodata_base + offset
        if at + length > len(data):
            raise ParseError(file, f"rodata segment {i}",
                             f"external data [{at:#x}, {at + length:#x}) runs past the end of the file ({len(data):#x})")
        found.append((at, bytes(data[at:at + length])))
    return found


def _zip_names(data: bytes) -> dict[int, str]:
    """Zip entry name by the file offset of its data (polyglot vmfbs name their segments)."""
    if data[:4] != ZIP_LOCAL:
        return {}
    try:
        names = {}
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            for info in archive.infolist():
                head = data[info.header_offset:info.header_offset + 30]
                if len(head) == 30 and head[:4] == ZIP_LOCAL:
                    start = info.header_offset + 30 + int.from_bytes(head[26:28], "little") \
                        + int.from_bytes(head[28:30], "little")
                    names[start] = info.filename
        return names
    except Exception:  # a damaged directory only costs us the names
        return {}


def _gpu(blob: bytes, at: int, name: str, file: str) -> list[VmfbExecutable]:
    magic = blob[:4]
    fmt, kind = GPU_FORMATS[magic]
    if len(blob) < HEADER_SIZE:
        raise ParseError(file, f"executable {name} at {at:#x}", "executable header is truncated")
    size = int.from_bytes(blob[8:16], "little")
    if HEADER_SIZE + size > len(blob):
        raise ParseError(file, f"executable {name} at {at:#x}", f"ExecutableDef of {size} bytes runs past its segment")
    fb = _Buffer(blob[HEADER_SIZE:HEADER_SIZE + size], at + HEADER_SIZE, file, f"{magic.decode()} ExecutableDef")
    if fb.data[4:8] != magic:
        raise fb.fail(4, f"FlatBuffer identifier {fb.data[4:8]!r} does not match header magic {magic!r}")
    root = fb.root()
    modules = [fb.bytes_(m, 0) or b"" for m in fb.tables(root, 1)]
    exports: dict[int, list[str]] = {}
    launch: dict[int, dict[str, dict[str, Any]]] = {}
    for e in fb.tables(root, 0):
        ordinal = fb.scalar(e, 0, "I")
        kernel = fb.string(e, 1) or ""
        if ordinal >= len(modules):
            raise fb.fail(e, f"export {kernel!r} names module {ordinal} of {len(modules)}")
        exports.setdefault(ordinal, []).append(kernel)
        dims = fb.field(e, 2)
        block = [fb.unpack("I", dims + 4 * i) for i in range(3)] if dims is not None else None
        launch.setdefault(ordinal, {})[kernel] = {"block": block, "shared_bytes": fb.scalar(e, 3, "I")}
    return [VmfbExecutable(name=name if len(modules) == 1 else f"{name}#{i}", format=fmt, blob_kind=kind,
                           blob=image, exports=exports.get(i, []), offset=at, launch=launch.get(i, {}))
            for i, image in enumerate(modules)]


def _elf_exports(blob: bytes, file: str) -> list[str]:
    """Dispatch names of an llvm-cpu ELF: DWARF .debug_pubnames, else its function symbols.

    The export table itself (iree_hal_executable_library_v0_t) is reachable only through
    relocations and changes layout between library versions; pubnames is a stable format.
    """
    elf = open_elf(blob, file)

    def pubnames() -> list[str]:
        if not elf.has_dwarf_info():
            return []
        table = elf.get_dwarf_info().get_pubnames()
        return list(table) if table else []
    names = guarded(file, "embedded ELF DWARF", pubnames)
    if names:
        return names
    return [s.name for s in symbols(elf, file) if s["st_info"]["type"] == "STT_FUNC" and s["st_size"] > 0
            and s.name != "iree_hal_executable_library_query"]


def executables(data: bytes, file: str = "<bytes>") -> list[VmfbExecutable]:
    """The device executables embedded in a vmfb, in rodata order."""
    names = _zip_names(bytes(data)) if isinstance(data, (bytes, bytearray)) else {}
    found = []
    for i, (at, blob) in enumerate(segments(data, file)):
        name = names.get(at, f"rodata{i}").removesuffix(".fb").removesuffix(".so")
        if blob[:4] in GPU_FORMATS:
            found.extend(_gpu(blob, at, name, file))
        elif blob[:4] == ELF_MAGIC and len(blob) >= 20:
            machine = int.from_bytes(blob[18:20], "little")
            where = f"{file}#{name}"
            found.append(VmfbExecutable(name=name, format=ELF_FORMATS.get(machine, f"embedded-elf-{machine}"),
                                        blob_kind="elf", blob=blob, exports=_elf_exports(blob, where), offset=at))
    return found
