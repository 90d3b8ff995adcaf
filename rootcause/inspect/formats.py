"""Kernel formats told apart by their bytes, and one reader per format (rootcause.inspect).

cubin, fatbin, PTX (assembled with ptxas -v), hsaco, host ELF (.o/.so, with or without an
embedded .nv_fatbin), TVM exported libraries and IREE .vmfb. Formats are told apart by magic
bytes, never by file name. Containers recurse into their inner blobs; a record's `format` names
the path taken ('tvm-so/fatbin/cubin').

A PTX entry is not assembled when a cubin of the same arch sits in the same fatbin container
(nvcc -gencode arch=compute_90,code=[sm_90,compute_90] builds that cubin from this PTX): its
rows would repeat the cubin's, the driver loads the cubin, and cuobjdump reports only the cubin.
Without --arch such PTX is not even decompressed (with --arch it may be what the driver loads).

A reader (parsers.<format>) is imported when a file of its format turns up, so a run pays only
for the formats it meets.
"""
from __future__ import annotations

import importlib

from parsers import KernelRecord, ParseError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable

FATBIN_MAGIC = (0xBA55ED50).to_bytes(4, "little")
EM_CUDA, EM_AMDGPU = 190, 224
TVM_LIBRARY_SYMBOLS = (b"__tvm_ffi__library_bin", b"__tvm_dev_mblob")
_ELF_MACHINES = {3: "x86", 8: "mips", 20: "ppc", 21: "ppc64", 40: "arm", 62: "x86-64",
                 183: "aarch64", 243: "riscv", 190: "cuda", 224: "amdgpu"}
_HOST_MACHINES = (62, 183)
# Enough of a file's head for detect() to say "no kernel format": magics, the 4 KiB PTX
# prologue, and a vmfb zip local header (30 bytes + name and extra fields of up to 64 KiB each).
HEAD_BYTES = 1 << 18


def _reader(module: str):
    """parsers.<module>, imported when a file of its format turns up (inspect pays only for those)."""
    return importlib.import_module(f"parsers.{module}")


# ---- format detection ----------------------------------------------------------------------

def detect(data: bytes) -> str | None:
    """'cubin' | 'hsaco' | 'host-elf' | 'host-fatbin' | 'tvm-so' | 'fatbin' | 'ptx' | 'vmfb' |
    'elf-other' | None (no kernel format)."""
    if data[:4] == b"\x7fELF":
        machine = _elf_machine(data)
        if machine == EM_CUDA:
            return "cubin"
        if machine == EM_AMDGPU:
            return "hsaco"
        if machine in _HOST_MACHINES:
            if any(sym in data for sym in TVM_LIBRARY_SYMBOLS):
                return "tvm-so"
            if b".nv_fatbin" in data:
                return "host-fatbin"
            return "host-elf"
        return "elf-other"
    if data[:4] == FATBIN_MAGIC:
        return "fatbin"
    if _is_vmfb(data):
        return "vmfb"
    if _is_ptx(data):
        return "ptx"
    return None


def _elf_machine(data: bytes) -> int | None:
    if len(data) < 20:
        return None
    return int.from_bytes(data[18:20], "little" if data[5:6] == b"\x01" else "big")


def _is_vmfb(data: bytes) -> bool:
    return bool(_reader("vmfb").matches(data))


def _is_ptx(data: bytes) -> bool:
    """PTX text: optional comments and blank lines, then a .version directive."""
    head = data[:4096]
    try:
        text = head.decode("ascii")
    except UnicodeDecodeError:
        return False
    in_block = False
    for line in text.splitlines():
        s = line.strip()
        if in_block:
            if "*/" in s:
                in_block, s = False, s.split("*/", 1)[1].strip()
            else:
                continue
        if not s or s.startswith("//"):
            continue
        if s.startswith("/*"):
            in_block = "*/" not in s
            continue
        return s.startswith(".version")
    return False


# ---- readers per format --------------------------------------------------------------------

def inspect_bytes(data: bytes, file: str, arch: str | None = None,
                  notes: list[str] | None = None, fmt: str | None = None) -> list[KernelRecord]:
    """Kernel records of one file's bytes (fmt: detect(data), when the caller has it). Raises ParseError."""
    notes = notes if notes is not None else []
    fmt = fmt or detect(data)
    if fmt is None:
        raise ParseError(file, "offset 0", f"no kernel format recognized (first bytes {data[:8].hex() or 'empty'})")
    if fmt == "elf-other":
        m = _elf_machine(data)
        raise ParseError(file, "ELF header", f"e_machine {m} ({_ELF_MACHINES.get(m, 'unknown')}) "
                         "is neither a GPU binary nor an x86-64/aarch64 host object")
    return _BY_FORMAT[fmt](data, file, arch, notes, "")


def _cubin(data: bytes, file: str, arch, notes, prefix: str) -> list[KernelRecord]:
    return _prefixed(_reader("cubin").kernels(data, file), prefix)


def _hsaco(data: bytes, file: str, arch, notes, prefix: str) -> list[KernelRecord]:
    return _prefixed(_reader("hsaco").kernels(data, file), prefix)


def _host_elf(data: bytes, file: str, arch, notes, prefix: str) -> list[KernelRecord]:
    return _prefixed(_reader("host_elf").kernels(data, file), prefix)


def _prefixed(records: list[KernelRecord], prefix: str) -> list[KernelRecord]:
    if prefix:
        for r in records:
            r.format = f"{prefix}/{r.format}" if r.format else prefix.rstrip("/")
    return records


def _fatbin(data: bytes, file: str, arch, notes, prefix: str) -> list[KernelRecord]:
    return _fatbin_rows(_fatbin_entries(data, file, arch), file, arch, notes, prefix)


def _fatbin_entries(data: bytes, file: str, arch: str | None) -> list:
    # Without --arch, _fatbin_rows skips PTX that a cubin of the same arch makes redundant, so
    # it is not decoded. With --arch it may be the entry the driver would load (_driver_pick).
    # A memoryview: the cubins come back as views into data, not copies of most of it.
    return _reader("fatbin").entries(memoryview(data), file, redundant_ptx=arch is not None)


# The end of the note for a PTX entry that a cubin makes redundant (the CLI counts them).
PTX_SKIPPED = "PTX not assembled: the cubin of the same arch in this container holds its kernels"


def _fatbin_rows(entries: list, file: str, arch, notes, prefix: str, within: str = "") -> list[KernelRecord]:
    """The KernelRecords of a fatbin's entries."""
    here = f"{prefix}/fatbin" if prefix else "fatbin"
    rows: list[KernelRecord] = []
    for e, where, ptx in _fatbin_plan(entries, file, arch, notes, within):
        if e.kind == "cubin":
            inner = _with_file(_cubin(e.data, where, arch, notes, here), file)
            if ptx is not None:
                for r in inner:
                    r.extra["ptx_skipped"] = ptx
            rows += inner
        else:
            rows += _with_file(_ptx(e.data, where, arch or _cubin_arch(e.arch), notes, here), file)
    return rows


def _fatbin_plan(entries: list, file: str, arch, notes: list[str], within: str):
    """(entry, where, PTX left out beside it or None) of each entry to read, in order; a note for
    each PTX entry that a cubin of its arch makes redundant, added when the walk reaches it."""
    entries = _select_entries(entries, arch, file, notes)
    cubins = {(e.container, e.arch) for e in entries if e.kind == "cubin"}
    skipped = {(e.container, e.arch): e.offset for e in entries
               if e.kind == "ptx" and (e.container, e.arch) in cubins}
    for e in entries:
        where = f"{file} [{within}fatbin entry {e.kind} {e.arch} @ offset {e.offset}]"
        key = (e.container, e.arch)
        if e.kind == "cubin":
            yield e, where, (f"PTX entry {e.arch} @ offset {skipped[key]}" if key in skipped else None)
        elif e.kind == "ptx" and key in skipped:
            notes.append(f"{where}: {PTX_SKIPPED}")
        elif e.kind == "ptx":
            yield e, where, None


def _cubin_arch(arch: str | None) -> str | None:
    # A fatbin's PTX entry is labelled with its virtual arch (compute_90 / sm_90).
    return arch.replace("compute_", "sm_") if arch else None


def _sm(arch: str | None) -> tuple[int, bool] | None:
    """'sm_90a' / 'compute_90' / '90' -> (90, arch-specific); None for a non-NVIDIA arch."""
    if not arch or arch.strip().lower().startswith("gfx"):
        return None
    from rootcause import gpus

    num = gpus.normalize_arch(arch)[3:]
    return (int(num), arch.strip().lower().endswith("a")) if num.isdigit() else None


def _select_entries(entries: list, arch: str | None, file: str, notes: list[str]) -> list:
    """With --arch, keep what the driver would load from each container (one per linked object)."""
    want = _sm(arch)
    if want is None:
        return entries
    out = []
    for container in dict.fromkeys(e.container for e in entries):
        picked = _driver_pick([e for e in entries if e.container == container], want)
        if not picked:
            notes.append(f"{file}: fatbin container {container}: no cubin or PTX loads on {arch}")
        out += picked
    return out


def _driver_pick(group: list, want: tuple[int, bool]) -> list:
    """The CUDA driver's choice: a cubin of the same major arch and a minor at most the
    device's (an arch-specific 'a' cubin only on its own arch), the newest such; else the
    newest PTX it can JIT (arch at most the device's; an 'a' PTX only on its own arch)."""
    n, specific = want

    def newest(found: list[tuple[int, bool, Any]]) -> list:
        if not found:
            return []
        top = max(m for m, _, _ in found)
        best = [(s, e) for m, s, e in found if m == top]
        exact = [e for s, e in best if s == specific]
        return exact or [e for _, e in best]

    cubins, ptx = [], []
    for e in group:
        sm = _sm(e.arch)
        if sm is None:
            continue
        m, s = sm
        if e.kind == "cubin" and (m == n or (not s and m // 10 == n // 10 and m <= n)):
            cubins.append((m, s, e))
        elif e.kind == "ptx" and (m == n or (not s and m <= n)):
            ptx.append((m, s, e))
    return newest(cubins) or newest(ptx)


def _with_file(records: list[KernelRecord], file: str) -> list[KernelRecord]:
    for r in records:
        r.file = file
    return records


def _ptx(data: bytes | str, file: str, arch, notes, prefix: str) -> list[KernelRecord]:
    """PTX: assemble with ptxas -v when present; otherwise names only, registers unknown."""
    text = data.decode("utf-8", errors="replace") if isinstance(data, (bytes, bytearray)) else data
    ptx_rows = _ptx_declared(text, file)
    here = f"{prefix}/ptx->ptxas" if prefix else "ptx->ptxas"
    from rootcause import cuda_tools  # here: only PTX inputs pay for it (and for ptxas)

    if cuda_tools.find_tool("ptxas") is None:
        note = "ptxas not found: install rootcause[cuda-tools] (PyPI nvidia-cuda-nvcc)"
        notes.append(f"{file}: {note}")
        for r in ptx_rows:
            r.format = f"{prefix}/ptx" if prefix else "ptx"
            r.registers = None
            r.extra["note"] = note
        return ptx_rows
    from rootcause import ptxas

    result = ptxas.compile_ptx(text, _ptxas_arch(arch), file)
    rows = _cubin(result.cubin, file, result.arch, notes, "")
    declared = {r.name: r for r in ptx_rows}
    for r in rows:
        r.format = here
        r.extra["ptxas"] = result.version
        facts = result.functions.get(r.name)
        if facts is not None:
            r.spills = facts.spill_bytes
            r.extra["ptxas_v"] = facts.to_dict()
            if r.registers is None:
                r.registers = facts.registers
        src = declared.get(r.name)
        if src is not None and r.block is None and src.block is not None:
            r.block = src.block
    return rows


def _ptxas_arch(arch: str | None) -> str | None:
    if not arch or arch.startswith("gfx"):
        return None
    a = arch.strip().lower()
    if a.startswith("sm_"):
        return a
    from rootcause import gpus

    return f"sm_{gpus.normalize_arch(a)[3:]}"


def _ptx_declared(text: str, file: str) -> list[KernelRecord]:
    """What the PTX itself declares (.reqntid, .maxntid), via parsers/ptx.py."""
    return _reader("ptx").kernels(text, file)


def _host_fatbin(data: bytes, file: str, arch, notes, prefix: str) -> list[KernelRecord]:
    """A host object or executable that embeds CUDA kernels in a .nv_fatbin section."""
    image = _reader("elf").Elf(data, file)
    section = image.section(".nv_fatbin")
    if section is None:  # the name appeared elsewhere in the file: a plain host ELF
        return _host_elf(data, file, arch, notes, prefix)
    # The section holds one fatbin container per linked object, back to back with padding:
    # parsers.fatbin walks them by their size fields (an uncompressed cubin may hold the magic).
    try:
        entries = _fatbin_entries(image.section_data(section), file, arch)
    except ParseError as err:
        raise ParseError(err.file, f"section .nv_fatbin: {err.where}", err.what) from None
    here = f"{prefix}/host-elf" if prefix else "host-elf"
    return _fatbin_rows(entries, file, arch, notes, here, within="section .nv_fatbin, ")


def _tvm_so(data: bytes, file: str, arch, notes, prefix: str) -> list[KernelRecord]:
    lib = _reader("tvm_library").read_library(data, file)
    rows: list[KernelRecord] = []
    for i, mod in enumerate(lib.modules):
        if mod.kind not in ("cuda", "rocm", "hip") or mod.blob_format is None:
            continue
        here = f"{prefix}/tvm-so" if prefix else "tvm-so"
        where = f"{file} [TVM module {i} {mod.kind}]"
        if mod.blob_format == "fatbin":
            inner = _fatbin(mod.blob, where, arch, notes, here)
        elif mod.blob_format == "cubin":
            inner = _cubin(mod.blob, where, arch, notes, here)
        elif mod.blob_format == "ptx":
            inner = _ptx(mod.blob, where, arch, notes, here)
        elif mod.blob_format == "hsaco":
            inner = _hsaco(mod.blob, where, arch, notes, here)
        else:
            notes.append(f"{where}: blob format {mod.blob_format!r} not read")
            continue
        for r in _with_file(inner, file):
            info = mod.functions.get(r.name) or {}
            if "launch_param_tags" in info:
                r.extra["launch_param_tags"] = list(info["launch_param_tags"])
            rows.append(r)
    return rows


def _vmfb(data: bytes, file: str, arch, notes, prefix: str) -> list[KernelRecord]:
    execs = _reader("vmfb").executables(data, file)
    rows: list[KernelRecord] = []
    here = f"{prefix}/vmfb" if prefix else "vmfb"
    for ex in execs:
        where = f"{file} [executable {ex.name} {ex.format}]"
        reader = _VMFB_BLOBS.get(ex.blob_kind)
        if reader is None:
            notes.append(f"{where}: {ex.format} blob not read (kind {ex.blob_kind})")
            continue
        inner = _with_file(reader(ex.blob, where, arch, notes, here), file)
        for r in inner:
            r.extra.setdefault("executable", ex.name)
        if ex.blob_kind == "elf" and ex.exports:  # host code: keep the dispatch functions
            inner = [r for r in inner if r.name in set(ex.exports)] or inner
        rows += inner
    return rows


_VMFB_BLOBS: dict[str | None, Callable] = {"ptx": _ptx, "hsaco": _hsaco, "elf": _host_elf,
                                           "cubin": _cubin}

_BY_FORMAT: dict[str, Callable] = {
    "cubin": _cubin, "hsaco": _hsaco, "host-elf": _host_elf, "host-fatbin": _host_fatbin,
    "tvm-so": _tvm_so, "fatbin": _fatbin, "ptx": _ptx, "vmfb": _vmfb,
}
