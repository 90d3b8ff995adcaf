"""Static resources per kernel, whatever the container (`rootcause inspect`).

Files, directories and rootcause bundles in; kernel records out (parsers.KernelRecord), bad files
as one line each. formats.py tells a file's format by its bytes and reads it (containers recurse
into their inner blobs; a row's `file` is the outer file); table.py makes the output rows, with a
theoretical occupancy where the block size is known, and renders them.

Imports that only some formats or options need (the readers, rootcause.gpus, the toolchain,
pathlib for directories, csv and json for their formats) happen where they are used, so a run
pays only for the formats it meets; typing and dataclasses are not imported at all.
"""
from __future__ import annotations

import gc
import os
import stat

from parsers import KernelRecord, ParseError
from rootcause.inspect.formats import HEAD_BYTES, PTX_SKIPPED, detect, inspect_bytes
from rootcause.inspect.table import ROW_KEYS, kernel_occupancy, record_values, render, row

# typing, dataclasses and pathlib are not imported at run time: on 100 small files they would
# be a fifth of the process (pathlib is imported for directories and bundles only).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

__all__ = ["HEAD_BYTES", "PTX_SKIPPED", "ROW_KEYS", "Inspection", "detect", "inspect_bytes", "inspect_paths",
           "kernel_occupancy", "render", "row"]


class Inspection:
    """What one inspect call found: kernel records, bad files (one line each), notes."""

    __slots__ = ("records", "errors", "notes")

    def __init__(self, records: list[KernelRecord] | None = None, errors: list[str] | None = None,
                 notes: list[str] | None = None):
        self.records = [] if records is None else records
        self.errors = [] if errors is None else errors
        self.notes = [] if notes is None else notes


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
    return sum(v is not None for v in record_values(record))


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
