"""TVM (>= 0.20, tvm-ffi) exported libraries: the module tree in `__tvm_ffi__library_bin`.

Layout (tvm-ffi src/ffi/extra/library_module.cc, ProcessLibraryBin; little endian):
  <nbytes: u64> <indptr: vec<u64>> <child_indices: vec<u64>>
  then per module: <kind: str> [<bytes: str>]   ('_lib' = the host library itself, no bytes)
where vec<T> = <count: u64> count*T and str = <size: u64> bytes. indptr/child_indices are the
import tree in CSR form (module 0 is the root, usually relax.VMExecutable).
A 'cuda' module's bytes (CUDAModuleNode::SaveToBytes) are
  <fmt: str> <count: u64> count*(<name: str> <FunctionInfo>) <data: str>
with FunctionInfo = <name: str> <arg_types: vec<DLDataType>> <launch_param_tags: vec<str>>
<arg_extra_tags: vec<i32>> (tvm src/runtime/metadata.h), DLDataType = u8 code, u8 bits, u16 lanes.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

from parsers.base import ParseError
from parsers.host_elf import ELF_MAGIC, guarded, open_elf, symbol_contents, symbols

LIBRARY_BIN = "__tvm_ffi__library_bin"
OLD_BLOB = "__tvm_dev_mblob"  # TVM < 0.20
FATBIN_MAGIC = b"\x50\xed\x55\xba"  # 0xBA55ED50 little endian
DL_CODES = {0: "int", 1: "uint", 2: "float", 3: "handle", 4: "bfloat", 5: "complex", 6: "bool"}
DEVICE_KINDS = {"cuda", "rocm", "vulkan", "metal", "opencl", "webgpu"}


@dataclass
class TvmModule:
    """One module of the tree. kind: 'vm' (relax.VMExecutable), 'llvm' (the host library, '_lib'),
    'cuda', or the serialized type key as is. type_key keeps the original key.
    functions: name -> {'launch_param_tags': [...], 'arg_types': [...], ...}."""

    kind: str
    blob_format: str | None
    blob: bytes
    functions: dict[str, dict[str, Any]] = field(default_factory=dict)
    type_key: str = ""
    fmt: str | None = None
    imports: list[int] = field(default_factory=list)


@dataclass
class TvmLibrary:
    modules: list[TvmModule]


class _Stream:
    def __init__(self, data: bytes, base: int, file: str, what: str):
        self.data, self.pos, self.base, self.file, self.what = data, 0, base, file, what

    def fail(self, why: str) -> ParseError:
        return ParseError(self.file, f"{self.what} at offset {self.base + self.pos:#x}", why)

    def take(self, size: int) -> bytes:
        if size < 0 or self.pos + size > len(self.data):
            raise self.fail(f"read of {size} bytes runs past the end ({len(self.data) - self.pos} left)")
        out = self.data[self.pos:self.pos + size]
        self.pos += size
        return out

    def u64(self) -> int:
        return struct.unpack("<Q", self.take(8))[0]

    def count(self, item_size: int) -> int:
        n = self.u64()
        if n * item_size > len(self.data) - self.pos:
            raise self.fail(f"count {n} does not fit in the {len(self.data) - self.pos} bytes left")
        return n

    def bytes_(self) -> bytes:
        return self.take(self.count(1))

    def string(self) -> str:
        raw = self.bytes_()
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            self.pos -= len(raw)
            raise self.fail("string is not UTF-8") from None

    def u64s(self) -> list[int]:
        return [self.u64() for _ in range(self.count(8))]


def matches(data: bytes) -> bool:
    return data[:4] == ELF_MAGIC and LIBRARY_BIN.encode() in data


def library_bin(data: bytes, file: str = "<bytes>") -> tuple[bytes, int]:
    """The bytes of the `__tvm_ffi__library_bin` symbol and their file offset."""
    elf = open_elf(data, file)
    names = {}
    for sym in symbols(elf, file):
        if sym["st_shndx"] != "SHN_UNDEF":
            names.setdefault(sym.name, sym)
    sym = names.get(LIBRARY_BIN)
    if sym is None:
        if OLD_BLOB in names:
            raise ParseError(file, f"symbol {OLD_BLOB}", "TVM < 0.20 library (__tvm_dev_mblob) is not supported")
        raise ParseError(file, "symbol table", f"no {LIBRARY_BIN} symbol: not a TVM exported library")
    raw = guarded(file, f"symbol {LIBRARY_BIN}",
                  lambda: symbol_contents(elf, bytes(data), sym, max(sym["st_size"], 8), file))
    offset = bytes(data).find(raw[:64]) if raw else -1
    return raw, offset


def _dtype(raw: bytes) -> str:
    code, bits, lanes = struct.unpack("<BBH", raw)
    if code == 3:
        return "handle"
    if code == 6 and bits == 8:
        return "bool"
    name = f"{DL_CODES.get(code, f'code{code}')}{bits}"
    return name if lanes == 1 else f"{name}x{lanes}"


def _function_info(s: _Stream) -> dict[str, Any]:
    name = s.string()
    arg_types = [_dtype(s.take(4)) for _ in range(s.count(4))]
    tags = [s.string() for _ in range(s.count(8))]
    extra = [struct.unpack("<i", s.take(4))[0] for _ in range(s.count(4))]
    return {"name": name, "arg_types": arg_types, "launch_param_tags": tags, "arg_extra_tags": extra}


def blob_format(blob: bytes) -> str | None:
    """What a device blob is, by its bytes: 'fatbin', 'cubin', 'ptx' or None."""
    if blob[:4] == FATBIN_MAGIC:
        return "fatbin"
    if blob[:4] == ELF_MAGIC:
        return "cubin"
    if b".version" in blob[:4096] and b".target" in blob[:4096]:
        return "ptx"
    return None


def _device_module(kind: str, raw: bytes, base: int, file: str) -> TvmModule:
    s = _Stream(raw, base, file, f"{kind} module")
    fmt = s.string()
    functions = {}
    for _ in range(s.count(8)):
        key = s.string()
        functions[key] = _function_info(s)
    blob = s.bytes_()
    if s.pos != len(raw):
        raise s.fail(f"{len(raw) - s.pos} bytes left after the {kind} module's binary")
    return TvmModule(kind=kind, blob_format=blob_format(blob) or fmt, blob=blob, functions=functions,
                     type_key=kind, fmt=fmt)


def _host_functions(data: bytes, file: str) -> dict[str, dict[str, Any]]:
    """PrimFuncs compiled into the host library: its `__tvm_ffi_<name>` entry symbols."""
    elf = open_elf(data, file)
    found = {}
    for sym in symbols(elf, file):
        if sym.name.startswith("__tvm_ffi_") and sym.name != LIBRARY_BIN and \
                sym["st_info"]["type"] == "STT_FUNC" and sym["st_shndx"] != "SHN_UNDEF":
            found[sym.name.removeprefix("__tvm_ffi_")] = {
                "launch_param_tags": [], "arg_types": [], "symbol": sym.name,
                "size": int(sym["st_size"]), "address": int(sym["st_value"])}
    return found


def read_library(data: bytes, file: str = "<bytes>") -> TvmLibrary:
    """The module tree of a TVM exported library, device binaries extracted."""
    raw, offset = library_bin(data, file)
    if len(raw) < 8:
        raise ParseError(file, f"symbol {LIBRARY_BIN}", "library_bin is shorter than its 8-byte size")
    nbytes = struct.unpack_from("<Q", raw)[0]
    if 8 + nbytes > len(raw):
        raise ParseError(file, f"symbol {LIBRARY_BIN}", f"size {nbytes} runs past the symbol ({len(raw) - 8} bytes)")
    s = _Stream(raw[8:8 + nbytes], offset + 8, file, LIBRARY_BIN)
    indptr, children = s.u64s(), s.u64s()
    if not indptr or indptr[0] != 0 or any(b < a for a, b in zip(indptr, indptr[1:])) or indptr[-1] != len(children):
        raise s.fail(f"bad import tree indptr {indptr[:8]}")
    modules = []
    for i in range(len(indptr) - 1):
        key = s.string()
        if key == "_lib":
            module = TvmModule(kind="llvm", blob_format=None, blob=b"", type_key=key,
                               functions=_host_functions(data, file))
        else:
            start = s.base + s.pos + 8
            body = s.bytes_()
            if key in DEVICE_KINDS:
                module = _device_module(key, body, start, file)
            else:
                module = TvmModule(kind="vm" if key == "relax.VMExecutable" else key,
                                   blob_format=None, blob=body, type_key=key)
        module.imports = [int(c) for c in children[indptr[i]:indptr[i + 1]]]
        if any(c >= len(indptr) - 1 for c in module.imports):
            raise s.fail(f"module {i} imports a module index out of range: {module.imports}")
        modules.append(module)
    return TvmLibrary(modules=modules)
