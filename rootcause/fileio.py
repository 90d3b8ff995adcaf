"""Reading and writing JSON and result files: one JSON reader (errors with line and column), and
writes as a set: every file is staged complete and committed before any is renamed into place,
so a kill, a full disk or a bad folder never leaves a half-written file, and a new file beside
old ones (a SIGKILL between renames) is finished by the next writer or reader (settle)."""
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


STAGING = ".rootcause-staging-"
COMMIT = ".commit"  # inside a staging folder: every file is staged, roll the set forward


def write_set(folder: str | os.PathLike, files: dict[str, bytes | str]) -> list[Path]:
    """Write {name: data} into folder as one set; the paths written, in order.

    Each file is staged in a hidden folder inside `folder` (same file system, so a rename moves
    it). When all are staged, a commit record is renamed into the staging folder, and only then
    are the files renamed over the old ones. A failure or kill before the commit leaves every
    previous file as it was. A SIGKILL between two renames cannot be prevented by any program, so
    it is recovered instead: the next write_set into the folder, or settle() from a reader, finds
    the committed staging folder and finishes its renames. The whole write holds an flock on the
    folder, so a staging folder seen under that lock belongs to a dead writer. A folder that
    cannot be made or written is a UsageError naming it.
    """
    from rootcause.errors import UsageError

    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UsageError(f"{folder}: cannot write output here: {err.strerror or err}") from None
    with _folder_lock(folder):
        _settle_locked(folder)
        try:
            staging = Path(tempfile.mkdtemp(prefix=STAGING, dir=folder))
        except OSError as err:
            raise UsageError(f"{folder}: cannot write output here: {err.strerror or err}") from None
        name, kept = "", "; the previous files are unchanged"
        try:
            for name, data in files.items():
                _stage(staging / name, data, folder / name)
            name = COMMIT
            _stage(staging / (COMMIT + ".tmp"), json.dumps(list(files)), folder / COMMIT)
            os.replace(staging / (COMMIT + ".tmp"), staging / COMMIT)
            kept = ""
            _roll_forward(staging, folder)
        except OSError as err:
            shutil.rmtree(staging, ignore_errors=True)
            raise UsageError(f"{folder / name}: cannot write: {err.strerror or err}{kept}") from None
    return [folder / name for name in files]


def settle(folder: str | os.PathLike) -> None:
    """Finish a set whose writer was killed between its renames (see write_set), and remove the
    staging folders of writers killed before their commit. Quiet when the folder is missing or
    not writable: a reader then sees what is there."""
    folder = Path(folder)
    if not folder.is_dir() or not any(p.name.startswith(STAGING) for p in folder.iterdir()):
        return
    try:
        with _folder_lock(folder):
            _settle_locked(folder)
    except OSError:
        pass


def _settle_locked(folder: Path) -> None:
    for staging in folder.glob(STAGING + "*"):
        if (staging / COMMIT).is_file():
            _roll_forward(staging, folder)
        else:
            shutil.rmtree(staging, ignore_errors=True)


def _roll_forward(staging: Path, folder: Path) -> None:
    """Rename the committed files still in staging into folder, then drop staging. Safe to
    repeat after a kill: a file already moved is simply no longer in staging."""
    for name in json.loads((staging / COMMIT).read_text(encoding="utf-8")):
        if (staging / name).exists():
            os.replace(staging / name, folder / name)
    shutil.rmtree(staging, ignore_errors=True)


def exchange(a: Path, b: Path) -> bool:
    """Swap two existing paths in one atomic step (Linux renameat2 RENAME_EXCHANGE), so that no
    moment leaves either name missing; False where the call or the file system lacks it (the
    caller then renames twice, with a window between the renames)."""
    import ctypes
    import errno

    libc = ctypes.CDLL(None, use_errno=True)
    call = getattr(libc, "renameat2", None)
    if call is None:
        return False
    at_fdcwd, rename_exchange = -100, 2
    if call(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP):
        return False
    raise OSError(code, os.strerror(code), str(a))


@contextlib.contextmanager
def _folder_lock(folder: Path) -> Iterator[None]:
    """flock on the folder itself (no lock file left among the user's outputs)."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


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
