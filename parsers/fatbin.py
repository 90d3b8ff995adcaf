"""NVIDIA fatbin containers (what `nvcc -fatbin` writes and the `.nv_fatbin` section holds).

Layout (little-endian), checked against nvcc 13.5 output and cuobjdump -xelf/-xptx:
- container header, 16 bytes: u32 magic 0xBA55ED50, u16 version (1), u16 header size (16),
  u64 size of the entries that follow. Several containers may be concatenated (a shared
  library linked from several objects holds one per object), padded with zeros to 8 bytes.
- entry header: u16 kind (1 PTX, 2 ELF cubin, 0x100 several cubins compressed together by
  `nvcc --concat`), u16 (0x0101), u32 header size (64, 80 for PTX, 120 for sm_100 ELF),
  u64 payload size (padded to 8), u32 compressed size @16, u16 minor @24, u16 major @26
  (PTX ISA version for PTX), u32 SM @28, u64 flags @40, u64 uncompressed size @56.
  The payload follows the header; the next entry follows the payload.
- flags: 0x2000 payload is an LZ4 block, 0x8000 a zstd frame (nvcc --compress-mode=speed
  gives LZ4; size, balance and -Xfatbin=-compress-all give zstd); 0x100000 the 'a'
  (architecture-specific) target, e.g. sm_90a.
- a concatenated entry (kind 0x100) carries after its first 64 header bytes: u32 count,
  u32 table size, then count 64-byte sub-headers laid out like an entry header but with the
  offset of the member in the decompressed payload at @4.
"""
from __future__ import annotations

import struct
from collections import namedtuple

from parsers.base import ParseError

MAGIC = 0xBA55ED50
HEADER = struct.Struct("<IHHQ")
KIND_PTX, KIND_ELF, KIND_CONCAT = 1, 2, 0x100
FLAG_LZ4, FLAG_ZSTD, FLAG_ARCH_SPECIFIC = 0x2000, 0x8000, 0x100000
ENTRY_MIN = 64
# A decompressed entry larger than this is refused rather than allocated (a damaged size field).
MAX_ENTRY_BYTES = 1 << 28
# All compressed entries of one file together: a small file may not declare gigabytes of
# entries (each under MAX_ENTRY_BYTES), since every decoded entry is held at once.
MAX_TOTAL_BYTES = 1 << 30


FatbinEntry = namedtuple("FatbinEntry", "kind arch data compressed offset container flags ptx_version",
                         defaults=(0, 0, None))
FatbinEntry.__doc__ = """One code object: kind 'cubin'|'ptx', arch like 'sm_90', data decompressed.

offset is the entry header's offset in the input; container counts from 0; flags and
ptx_version (for PTX, 'major.minor') are as the header says; compressed is 'lz4', 'zstd' or
None. data is None for a PTX entry left undecoded (entries(..., redundant_ptx=False)).
A namedtuple, not a dataclass: importing dataclasses costs `rootcause inspect` a fifth of its start-up."""


def matches(data: bytes) -> bool:
    return len(data) >= 4 and struct.unpack_from("<I", data)[0] == MAGIC


def containers(data: bytes, file: str = "<bytes>") -> list[tuple[int, int]]:
    """(start, end) byte ranges of the concatenated containers in data."""
    out = []
    pos = 0
    while pos < len(data):
        if not any(data[pos:pos + 8]):  # alignment padding between or after containers
            pos += 8
            continue
        if len(data) - pos < HEADER.size:
            raise ParseError(file, f"offset {pos:#x}", f"truncated fatbin header ({len(data) - pos} of 16 bytes)")
        magic, version, hsize, fsize = HEADER.unpack_from(data, pos)
        where = f"container {len(out)} at {pos:#x}"
        if magic != MAGIC:
            raise ParseError(file, where, f"bad magic {magic:#010x}, expected {MAGIC:#010x}")
        if hsize < HEADER.size:
            raise ParseError(file, where, f"header size {hsize} < 16")
        end = pos + hsize + fsize
        if end > len(data):
            raise ParseError(file, where, f"container of {hsize + fsize} bytes runs past the end of the data ({len(data) - pos} left)")
        out.append((pos, end))
        pos = end
    if not out:
        raise ParseError(file, "offset 0", "no fatbin container (empty or all zero)")
    return out


def _arch(sm: int, flags: int) -> str:
    return f"sm_{sm}" + ("a" if flags & FLAG_ARCH_SPECIFIC else "")


def _decompress(payload: bytes, flags: int, size: int, file: str, where: str) -> tuple[bytes, str | None]:
    if not flags & (FLAG_LZ4 | FLAG_ZSTD):
        return payload, None
    if size <= 0 or size > MAX_ENTRY_BYTES:
        raise ParseError(file, where, f"compressed entry with uncompressed size {size}")
    # Imported here: an uncompressed fatbin (nvcc's default for cubins) pays for neither.
    import lz4.block
    import zstandard

    # Check the size before decompressing: both decompressors allocate it up front.
    if flags & FLAG_ZSTD:
        try:
            frame_size = zstandard.frame_content_size(payload)
        except zstandard.ZstdError as exc:
            raise ParseError(file, where, f"not a zstd frame ({exc})") from None
        if frame_size not in (size, -1):
            raise ParseError(file, where, f"zstd frame holds {frame_size} bytes, entry header says {size}")
    elif size > 255 * len(payload) + 16:  # LZ4 cannot expand a block more than ~255 times
        raise ParseError(file, where, f"LZ4 block of {len(payload)} bytes cannot hold {size} bytes")
    try:
        if flags & FLAG_ZSTD:
            out = zstandard.ZstdDecompressor().decompress(payload, max_output_size=size)
            codec = "zstd"
        else:
            out = lz4.block.decompress(payload, uncompressed_size=size)
            codec = "lz4"
    except (zstandard.ZstdError, lz4.block.LZ4BlockError, ValueError, MemoryError) as exc:
        raise ParseError(file, where, f"cannot decompress entry ({exc})") from None
    if len(out) != size:
        raise ParseError(file, where, f"decompressed {len(out)} bytes, header says {size}")
    return out, codec


def _entry(data: bytes, pos: int, end: int, index: int, file: str, undecoded: frozenset[str] = frozenset(),
           left: int = MAX_TOTAL_BYTES) -> tuple[list[FatbinEntry], int]:
    """Entries at pos (several for a concatenated one) and the offset of the next header.
    A PTX entry whose arch is in undecoded comes back with data None, neither sliced nor
    decompressed."""
    where = f"container {index}, entry at {pos:#x}"
    if end - pos < ENTRY_MIN:
        raise ParseError(file, where, f"truncated entry header ({end - pos} of {ENTRY_MIN} bytes)")
    kind, _, hsize, psize = struct.unpack_from("<HHIQ", data, pos)
    csize, = struct.unpack_from("<I", data, pos + 16)
    minor, major, sm = struct.unpack_from("<HHI", data, pos + 24)
    flags, = struct.unpack_from("<Q", data, pos + 40)
    usize, = struct.unpack_from("<Q", data, pos + 56)
    if hsize < ENTRY_MIN or pos + hsize > end:
        raise ParseError(file, where, f"entry header size {hsize} outside 64..{end - pos}")
    start = pos + hsize
    if start + psize > end:
        raise ParseError(file, where, f"payload of {psize} bytes runs past the container end ({end - start} left)")
    compressed = flags & (FLAG_LZ4 | FLAG_ZSTD)
    if compressed and csize > psize:
        raise ParseError(file, where, f"compressed size {csize} > payload size {psize}")
    nxt = start + psize
    if kind == KIND_PTX and _arch(sm, flags) in undecoded:
        codec = None if not compressed else "zstd" if flags & FLAG_ZSTD else "lz4"
        return [FatbinEntry("ptx", _arch(sm, flags), None, codec, pos, index, flags, f"{major}.{minor}")], nxt
    payload = data[start:start + (csize if compressed else psize)]
    if compressed and usize > left:
        raise ParseError(file, where, f"compressed entries declare more than {MAX_TOTAL_BYTES >> 20} MiB together "
                         f"({usize} more bytes here); refused rather than held in memory")
    body, codec = _decompress(payload, flags, usize, file, where)
    common = dict(compressed=codec, offset=pos, container=index, flags=flags)
    if kind == KIND_PTX:
        return [FatbinEntry("ptx", _arch(sm, flags), bytes(body).rstrip(b"\0"), ptx_version=f"{major}.{minor}",
                            **common)], nxt
    if kind == KIND_ELF:
        return [FatbinEntry("cubin", _arch(sm, flags), body, **common)], nxt
    if kind == KIND_CONCAT:
        return _members(data, pos, hsize, body, common, file, where), nxt
    raise ParseError(file, where, f"unknown entry kind {kind:#x}")


def _members(data: bytes, pos: int, hsize: int, body: bytes, common: dict, file: str, where: str) -> list[FatbinEntry]:
    """Split a concatenated entry's payload by the sub-header table after its first 64 bytes."""
    if hsize < ENTRY_MIN + 8:
        raise ParseError(file, where, "concatenated entry without a member table")
    count, table = struct.unpack_from("<II", data, pos + ENTRY_MIN)
    if table < 8 + 64 * count or ENTRY_MIN + table > hsize:
        raise ParseError(file, where, f"member table of {count} entries does not fit in {table} bytes / header {hsize}")
    out = []
    for i in range(count):
        sub = pos + ENTRY_MIN + 8 + 64 * i
        kind, _, moff, msize = struct.unpack_from("<HHIQ", data, sub)
        sm, = struct.unpack_from("<I", data, sub + 28)
        mflags, = struct.unpack_from("<Q", data, sub + 40)
        if moff + msize > len(body):
            raise ParseError(file, f"{where}, member {i}", f"member at {moff}+{msize} outside the {len(body)}-byte payload")
        member = body[moff:moff + msize]
        kind_name = {KIND_PTX: "ptx", KIND_ELF: "cubin"}.get(kind)
        if kind_name is None:
            raise ParseError(file, f"{where}, member {i}", f"unknown member kind {kind:#x}")
        out.append(FatbinEntry(kind_name, _arch(sm, mflags), bytes(member).rstrip(b"\0") if kind == KIND_PTX else member,
                               **{**common, "flags": mflags}))
    return out


def entries(data: bytes, file: str = "<bytes>", redundant_ptx: bool = True) -> list[FatbinEntry]:
    """Every code object in the (possibly concatenated) fatbin containers of data.

    From a memoryview, an uncompressed cubin's data is a memoryview into it (not a copy: the
    cubins are most of a fatbin's bytes, and a reader needs only their tables); PTX is bytes.

    redundant_ptx=False: a PTX entry whose container holds a cubin of the same arch comes back
    with data None, undecoded (`rootcause inspect` reads the cubin; a compressed PTX is often
    the largest entry). Its framing is checked all the same.
    """
    data = data if isinstance(data, (bytes, memoryview)) else bytes(data)
    out: list[FatbinEntry] = []
    left = MAX_TOTAL_BYTES
    for index, (start, end) in enumerate(containers(data, file)):
        _, _, hsize, _ = HEADER.unpack_from(data, start)
        pos = start + hsize
        undecoded = frozenset() if redundant_ptx else _cubin_archs(data, pos, end)
        while pos < end:
            found, pos = _entry(data, pos, end, index, file, undecoded, left)
            left -= sum(len(e.data) for e in found if e.compressed and e.data is not None)
            out.extend(found)
    return out


def _cubin_archs(data: bytes, pos: int, end: int) -> frozenset[str]:
    """Arch labels of the cubin entries of one container: a first look that stops at anything
    odd (_entry checks the framing), and none when the container has a concatenated entry,
    whose members are decoded together anyway."""
    archs = set()
    while end - pos >= ENTRY_MIN:
        kind, _, hsize, psize = struct.unpack_from("<HHIQ", data, pos)
        if kind == KIND_CONCAT or hsize < ENTRY_MIN:
            return frozenset()
        if kind == KIND_ELF:
            sm, = struct.unpack_from("<I", data, pos + 28)
            flags, = struct.unpack_from("<Q", data, pos + 40)
            archs.add(_arch(sm, flags))
        pos += hsize + psize
    return frozenset(archs)
