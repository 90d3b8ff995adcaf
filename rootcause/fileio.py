"""Reading and writing JSON and result files: one JSON reader (errors with line and column), and
writes as a set: every file is staged complete before any is renamed into place, so a kill, a
full disk or a bad folder never leaves a half-written file or a new file beside old ones."""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def cache_dir() -> Path:
    """rootcause's cache (builds, toolchain environments, bisections): $ROOTCAUSE_CACHE or ~/.cache/rootcause."""
    return Path(os.environ.get("ROOTCAUSE_CACHE", Path.home() / ".cache" / "rootcause"))


def write_set(folder: str | os.PathLike, files: dict[str, bytes | str]) -> list[Path]:
    """Write {name: data} into folder as one set; the paths written, in order.

    Each file is staged in a hidden folder inside `folder` (same file system, so a rename moves
    it), and only when all are staged are they renamed over the old ones. A failure while
    staging (a kill, ENOSPC, EFBIG under RLIMIT_FSIZE) leaves every previous file as it was;
    what remains open is the microseconds of the renames themselves. A folder that cannot be
    made or written is a UsageError naming it.
    """
    from rootcause.errors import UsageError

    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".rootcause-staging-", dir=folder))
    except OSError as err:
        raise UsageError(f"{folder}: cannot write output here: {err.strerror or err}") from None
    name, kept = "", "; the previous files are unchanged"
    try:
        staged = []
        for name, data in files.items():
            staged.append(_stage(staging / name, data, folder / name))
        kept = ""
        for tmp, name in zip(staged, files):
            os.replace(tmp, folder / name)
    except OSError as err:
        raise UsageError(f"{folder / name}: cannot write: {err.strerror or err}{kept}") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return [folder / name for name in files]


def _stage(tmp: Path, data: bytes | str, dest: Path) -> Path:
    if dest.is_dir():
        raise IsADirectoryError(21, "is a directory", str(dest))
    with open(tmp, "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode("utf-8"))
    os.chmod(tmp, 0o666 & ~_umask())  # mkdtemp makes 0700; give the file open() would get
    return tmp


def write_atomic(path: str | os.PathLike, data: bytes | str) -> Path:
    """Write one file atomically (a set of one)."""
    path = Path(path)
    return write_set(path.parent, {path.name: data})[0]


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def json_text(obj: Any) -> str:
    """The JSON every rootcause file uses: indented, keys in their order, a final newline."""
    return json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n"


def write_json(path: str | os.PathLike, obj: Any) -> Path:
    return write_atomic(path, json_text(obj))


@contextlib.contextmanager
def locked(path: str | os.PathLike) -> Iterator[None]:
    """An exclusive advisory lock (flock) on path, held for the block: concurrent rootcause
    processes that touch one cache entry or one output take turns. The kernel drops it when
    the process dies, so a killed holder never blocks the next."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def read_json(path: str | os.PathLike, missing: str) -> Any:
    """A JSON file; UsageError '<path>: <missing>' when absent, with line and column when not JSON."""
    from rootcause.errors import UsageError

    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"{path}: {missing}") from None
    except IsADirectoryError:
        raise UsageError(f"{path}: is a directory, expected a JSON file") from None
    except UnicodeDecodeError as err:
        raise UsageError(f"{path}: byte {err.start}: not UTF-8 text") from None
    except json.JSONDecodeError as err:
        raise UsageError(f"{path}: line {err.lineno} column {err.colno}: not JSON: {err.msg}") from None
