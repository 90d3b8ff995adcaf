"""Static resources per kernel, whatever the container (`rootcause inspect`).

Reads cubin, fatbin, PTX (assembled with ptxas -v), hsaco, host ELF (.o/.so, with or without
an embedded .nv_fatbin), TVM exported libraries, IREE .vmfb, directories and rootcause bundles.
Formats are told apart by magic bytes, never by file name. Containers recurse into their inner
blobs; a row's `format` names the path taken ('tvm-so/fatbin/cubin') and its `file` the outer
file. Rows that know their block size get a theoretical occupancy (rootcause.gpus).

A PTX entry is not assembled when a cubin of the same arch sits in the same fatbin container
(nvcc -gencode arch=compute_90,code=[sm_90,compute_90] builds that cubin from this PTX): its
rows would repeat the cubin's, the driver loads the cubin, and cuobjdump reports only the cubin.
Without --arch such PTX is not even decompressed (with --arch it may be what the driver loads).

Imports that only some formats or options need (the readers, rootcause.gpus, the toolchain,
pathlib for directories, csv and json for their formats) happen where they are used, so a run
pays only for the formats it meets; typing and dataclasses are not imported at all.
"""
from __future__ import annotations

import functools
import gc
import importlib
import operator
import os
import stat

from parsers import KernelRecord, ParseError
from rootcause.terminal import printable

# typing, dataclasses and pathlib are not imported at run time: on 100 small files they would
# be a fifth of the process (pathlib is imported for directories and bundles only).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any, Callable

    from rootcause import gpus

# The keys of one output row, in order (JSON, CSV, table and Markdown columns).
ROW_KEYS = ("name", "file", "format", "arch", "registers", "sgpr", "agpr", "shared_bytes",
            "local_bytes", "stack_bytes", "param_bytes", "max_threads_per_block", "spills",
            "wavefront_size", "block", "code_bytes", "occupancy", "occupancy_limiter")

FATBIN_MAGIC = (0xBA55ED50).to_bytes(4, "little")
EM_CUDA, EM_AMDGPU = 190, 224
TVM_LIBRARY_SYMBOLS = (b"__tvm_ffi__library_bin", b"__tvm_dev_mblob")
_ELF_MACHINES = {3: "x86", 8: "mips", 20: "ppc", 21: "ppc64", 40: "arm", 62: "x86-64",
                 183: "aarch64", 243: "riscv", 190: "cuda", 224: "amdgpu"}
_HOST_MACHINES = (62, 183)
# Enough of a file's head for detect() to say "no kernel format": magics, the 4 KiB PTX
# prologue, and a vmfb zip local header (30 bytes + name and extra fields of up to 64 KiB each).
HEAD_BYTES = 1 << 18


class Inspection:
    """What one inspect call found: kernel records, bad files (one line each), notes."""

    __slots__ = ("records", "errors", "notes")

    def __init__(self, records: list[KernelRecord] | None = None, errors: list[str] | None = None,
                 notes: list[str] | None = None):
        self.records = [] if records is None else records
        self.errors = [] if errors is None else errors
        self.notes = [] if notes is None else notes


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


# ---- paths, directories, bundles -----------------------------------------------------------

def inspect_paths(paths: list[str | Path], arch: str | None = None,
                  block: tuple[int, int, int] | None = None) -> Inspection:
    """Inspect files, directories and bundles. Bad files become one-line errors, not raises."""
    out = Inspection()
    # The cycle collector is off while files are read: every record lives until the rows are
    # written, so its passes free nothing (a fifth of a run over 100 small files).
    collecting = gc.isenabled()
    gc.disable()
    try:
        for p in paths:
            _inspect_path(p, arch, out)
    finally:
        if collecting:
            gc.enable()
    _check_blocks(out, block)
    return out


def _inspect_path(p: str | Path, arch: str | None, out: Inspection) -> None:
    name = _path_name(p)
    try:
        st = os.stat(name)
        mode, size = st.st_mode, st.st_size
    except (OSError, ValueError):
        mode, size = 0, 0
    if stat.S_ISDIR(mode):
        from pathlib import Path

        from rootcause.artifacts.bundle import is_bundle

        path = Path(name)
        if is_bundle(path):
            _inspect_bundle(path, arch, out)
        else:
            _inspect_dir(path, arch, out)
    elif stat.S_ISREG(mode):
        _inspect_file(name, arch, out, explicit=True, size=size)
    else:
        out.errors.append(f"{name}: no such file or directory")


def _check_blocks(out: Inspection, block: tuple[int, int, int] | None) -> None:
    """--block where a record has none; a note where the block exceeds the kernel's bound."""
    for r in out.records:
        if r.block is None and block is not None:
            r.block = block
        threads = r.block[0] * r.block[1] * r.block[2] if r.block else 0
        if r.max_threads_per_block and threads > r.max_threads_per_block:
            out.notes.append(f"{r.file}: {r.name}: block {threads} exceeds the kernel's "
                             f"max_threads_per_block {r.max_threads_per_block}: no occupancy")


def _path_name(p: str | Path) -> str:
    """str(pathlib.Path(p)) on POSIX, without importing pathlib for plain files: no empty or
    '.' parts, a root of '/' (or exactly two slashes, as POSIX allows), '.' for nothing."""
    if not isinstance(p, str) or os.sep != "/":
        from pathlib import Path

        return str(Path(p))
    root = "//" if p[:2] == "//" and p[2:3] != "/" else "/" if p[:1] == "/" else ""
    return root + "/".join(part for part in p.split("/") if part and part != ".") or "."


def _inspect_file(path: str, arch: str | None, out: Inspection, explicit: bool,
                  launches: dict[str, Any] | None = None, size: int = 0) -> None:
    """One file's records into out; size: what stat said, so that one read() usually does."""
    try:
        fd = os.open(path, os.O_RDONLY)
        try:
            # In a directory, look at the head first: a large input array or log is skipped unread.
            data = _read(fd, HEAD_BYTES) if not explicit else _read(fd, -1, size)
            fmt = detect(data)
            if not explicit and fmt is None:
                out.notes.append(f"{path}: skipped (no kernel format)")
                return
            if len(data) == HEAD_BYTES and not explicit:
                data += _read(fd, -1)
                fmt = detect(data)
        finally:
            os.close(fd)
    except OSError as err:
        out.errors.append(f"{path}: read: {err.strerror or err}")
        return
    try:
        records = inspect_bytes(data, path, arch, out.notes, fmt=fmt)
    except ParseError as err:
        out.errors.append(str(err))
        return
    except Exception as err:  # a reader broke its contract (ParseError only): still one line
        out.errors.append(f"{path}: internal error while reading: {type(err).__name__}: {err}")
        return
    if launches:
        _apply_launches(records, launches)
    out.records += records


def _read(fd: int, limit: int = -1, expected: int = 0) -> bytes:
    """The bytes of fd from where it stands: the first limit, or (limit < 0) to the end, asking
    for expected + 1 at first. os.read, not open(): io's buffered file makes five more system
    calls a file (fstat twice, ioctl, lseek, a last read), and on a sandboxed host (gVisor)
    system calls are the larger part of a run over 100 small files. A read that returns less
    than it asked for is the end of a regular file."""
    parts: list[bytes] = []
    total = 0
    while limit < 0 or total < limit:
        ask = limit - total if limit >= 0 else expected - total + 1 if expected > total else 1 << 20
        chunk = os.read(fd, ask)
        if chunk:
            parts.append(chunk)
            total += len(chunk)
        if len(chunk) < ask:
            break
    return parts[0] if len(parts) == 1 else b"".join(parts)


def _inspect_dir(path: Path, arch: str | None, out: Inspection) -> None:
    for f in sorted(p for p in path.rglob("*") if p.is_file() and not p.name.startswith(".")):
        _inspect_file(str(f), arch, out, explicit=False)


def _inspect_bundle(path: Path, arch: str | None, out: Inspection) -> None:
    from rootcause.artifacts.bundle import MANIFEST, read_manifest
    from rootcause.errors import UsageError

    manifest_path = path / MANIFEST
    try:
        manifest = read_manifest(path)
    except UsageError as err:
        out.errors.append(str(err))
        return
    arch = arch or _bundle_arch(manifest.get("target"))
    launches = {k.get("name"): k.get("launch") or {} for k in manifest.get("kernels") or []
                if isinstance(k, dict)}
    files: list[Path] = []
    if manifest.get("module"):
        files.append(path / manifest["module"])
    files += [path / b for b in manifest.get("binaries") or []]
    if not files:
        out.errors.append(f"{manifest_path}: module: bundle names no module or binaries")
    found = Inspection(errors=out.errors, notes=out.notes)
    for f in dict.fromkeys(files):
        if not f.is_file():
            out.errors.append(f"{manifest_path}: {f.relative_to(path)}: listed but missing")
        else:
            _inspect_file(str(f), arch, found, explicit=True, launches=launches)
    out.records += _one_per_kernel(found.records)


def _one_per_kernel(records: list[KernelRecord]) -> list[KernelRecord]:
    """A bundle's module and its extracted binaries hold the same kernels: one record per kernel
    name and arch, the one with the most fields known (the module's where they tie), in order."""
    best: dict[tuple[str, str | None], KernelRecord] = {}
    for r in records:
        key = (r.name, r.arch)
        if key not in best or _known(r) > _known(best[key]):
            best[key] = r
    return list(best.values())


def _known(record: KernelRecord) -> int:
    return sum(v is not None for v in _record_values(record))


def _bundle_arch(target: Any) -> str | None:
    # 'cuda:sm_90' -> 'sm_90'; 'rocm:gfx942' -> 'gfx942'; anything else: no arch filter.
    if isinstance(target, str) and ":" in target:
        return target.split(":", 1)[1] or None
    return None


def _apply_launches(records: list[KernelRecord], launches: dict[str, Any]) -> None:
    """Block sizes from the bundle's catalog (TVM thread extents, IREE workgroup size)."""
    for r in records:
        launch = launches.get(r.name) or {}
        blk = launch.get("block")
        if r.block is None and isinstance(blk, list) and len(blk) == 3 and all(isinstance(x, int) for x in blk):
            r.block = tuple(blk)


# ---- rows and rendering --------------------------------------------------------------------

def row(record: KernelRecord) -> dict[str, Any]:
    """The output row of one record: ROW_KEYS, with occupancy where the block is known."""
    d = dict(zip(_RECORD_KEYS, _record_values(record)))
    block = tuple(record.block) if record.block is not None else None
    d["block"] = list(block) if block is not None else None
    d["code_bytes"] = record.extra.get("size") if record.format.endswith("host-elf") else None  # a CPU function's
    d["occupancy"], d["occupancy_limiter"] = (None, None) if block is None else _occupancy_cells(
        record.arch, block, record.registers, record.shared_bytes, record.max_threads_per_block,
        record.sgpr, record.agpr)
    return d


_RECORD_KEYS = ROW_KEYS[:ROW_KEYS.index("code_bytes")]  # the keys a KernelRecord holds, in row order
_record_values = operator.attrgetter(*_RECORD_KEYS)


@functools.lru_cache(maxsize=4096)
def _occupancy_cells(arch, block, registers, shared_bytes, max_threads, sgpr, agpr) -> tuple:
    # Kernels of one build repeat a few (arch, block, registers, shared) combinations; the
    # occupancy model costs ~20 us a call, so a directory of cubins with --block pays it once each.
    occ = kernel_occupancy(KernelRecord(name="", file="", format="", arch=arch, block=block, registers=registers,
                                        shared_bytes=shared_bytes, max_threads_per_block=max_threads,
                                        sgpr=sgpr, agpr=agpr))
    return (round(occ.occupancy, 4), occ.limiter) if occ else (None, None)


def kernel_occupancy(record: KernelRecord) -> gpus.Occupancy | None:
    """Theoretical occupancy of a record on its arch, or None when something is unknown."""
    if record.block is None or record.registers is None or not record.arch:
        return None
    from rootcause import gpus  # here: rows without a block size need no occupancy model

    try:
        lim = gpus.limits(record.arch)
    except KeyError:
        return None
    threads = record.block[0] * record.block[1] * record.block[2]
    if threads <= 0 or (record.max_threads_per_block and threads > record.max_threads_per_block):
        return None  # such a launch fails: the kernel was built for at most max_threads_per_block
    try:
        if lim.vendor == "amd":
            return gpus.occupancy(lim.arch, threads, record.registers, record.shared_bytes or 0,
                                  sgprs=record.sgpr, agprs=record.agpr)
        return gpus.occupancy(lim.arch, threads, record.registers, record.shared_bytes or 0)
    except ValueError:
        return None


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, list):
        return "x".join(str(v) for v in value)
    if isinstance(value, float):
        return f"{value:.2f}"
    return printable(value)  # a symbol name from a binary reaches the terminal: no escape codes


_SHORT = {"registers": "regs", "shared_bytes": "shared", "local_bytes": "local",
          "stack_bytes": "stack", "param_bytes": "param", "max_threads_per_block": "max_thr",
          "wavefront_size": "wave", "code_bytes": "code", "occupancy": "occ", "occupancy_limiter": "limiter"}


def _json_lines(rows: list[dict[str, Any]]) -> str:
    """The rows as a JSON list, one row a line. One json.dumps call for the whole list (a
    call per row costs ~1.4x more; indent= runs the pure-Python encoder), then a line break
    before each row: every row starts with its "name" key, and '}, {"name": ' cannot occur
    inside a JSON string, whose quotes are escaped."""
    if not rows:
        return "[]\n"
    import json

    text = json.dumps(rows)
    return "[\n  " + text[1:-1].replace('}, {"name": ', '},\n  {"name": ') + "\n]\n"


def render(rows: list[dict[str, Any]], fmt: str) -> str:
    if fmt == "json":
        return _json_lines(rows)
    if fmt == "csv":
        import csv
        import io

        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(ROW_KEYS)
        for r in rows:
            w.writerow(["" if r[k] is None else _cell(r[k]) if k == "block" or isinstance(r[k], str) else r[k]
                        for k in ROW_KEYS])
        return buf.getvalue()
    # code_bytes is a CPU function's: a table of GPU kernels leaves that column out (JSON and CSV keep it)
    keys = [k for k in ROW_KEYS if k != "code_bytes" or any(r[k] is not None for r in rows)]
    headers = [_SHORT.get(k, k) for k in keys]
    cells = [[_cell(r[k]) for k in keys] for r in rows]
    if fmt == "markdown":
        lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
        lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row_) + " |" for row_ in cells]
        return "\n".join(lines) + "\n"
    widths = [max([len(h)] + [len(c[i]) for c in cells]) for i, h in enumerate(headers)]
    numeric = {i for i, k in enumerate(keys) if k not in ("name", "file", "format", "arch", "block",
                                                         "occupancy_limiter")}
    def line(values: list[str]) -> str:
        return "  ".join(v.rjust(w) if i in numeric else v.ljust(w)
                         for i, (v, w) in enumerate(zip(values, widths))).rstrip()
    return "\n".join([line(headers)] + [line(c) for c in cells]) + "\n"
