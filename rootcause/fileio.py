"""Reading and writing JSON and result files: one JSON reader (errors with line and column), and
writes as a set: every file is staged complete and committed before any is renamed into place,
so a kill, a full disk or a bad folder never leaves a half-written file, and a new file beside
old ones (a SIGKILL between renames) is finished by the next writer or reader (settle)."""
from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import math
import os
import re
import shutil
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any



def safe_name(name: str) -> str:
    """A name made shell- and path-safe, to be one folder or file name: every run of characters
    other than letters, digits and . _ - becomes one '_'."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name)

def cache_dir() -> Path:
    """rootcause's cache (builds, toolchain environments, bisections): $ROOTCAUSE_CACHE or
    ~/.cache/rootcause, made if missing. A cache that cannot be made or written (no home folder,
    a read-only or full one) is a UsageError that says how to name another."""
    from rootcause.errors import UsageError

    if os.environ.get("ROOTCAUSE_CACHE"):
        path = Path(os.environ["ROOTCAUSE_CACHE"])
    else:
        try:
            path = Path.home() / ".cache" / "rootcause"
        except (RuntimeError, KeyError):  # HOME unset and no passwd entry for this uid
            raise UsageError("no home folder for the cache (HOME is unset and this user has no passwd entry); "
                             "set ROOTCAUSE_CACHE to a writable folder") from None
    try:
        path.mkdir(parents=True, exist_ok=True)
        writable = os.access(path, os.W_OK | os.X_OK)
    except OSError as err:
        raise UsageError(f"{path}: cannot make the cache folder: {err.strerror or err}; set ROOTCAUSE_CACHE to a "
                         "writable folder") from None
    if not writable:
        raise UsageError(f"{path}: the cache folder is not writable; set ROOTCAUSE_CACHE to a writable folder")
    return path


STAGING = ".rootcause-staging-"
COMMIT = ".commit"  # inside a staging folder: every file is staged, roll the set forward
WRITER = ".writer"  # inside a staging folder: written first, so only write_set's own are settled
_MKDTEMP_NAME = re.compile(r"[a-z0-9_]{8}")  # what tempfile.mkdtemp adds to the staging prefix


# What a file is written from: bytes, text, or text in pieces (a page of several MB that is never
# held whole, such as an HTML report's inlined plotly.js read from its file a piece at a time).
Data = bytes | str | Iterable[str]


def write_set(folder: str | os.PathLike, files: Mapping[str, Data]) -> list[Path]:
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
    bad = next((name for name in files if not is_plain_name(name)), None)
    if bad is not None:  # a bug, not bad input: callers name their own files
        raise ValueError(f"write_set writes plain file names only, not {bad!r}")
    make_folder(folder)
    with _folder_lock(folder):
        _settle_locked(folder)
        for name in files:
            check_replaceable_file(folder / name)
        try:
            staging = Path(tempfile.mkdtemp(prefix=STAGING, dir=folder))
            (staging / WRITER).write_text(str(os.getpid()), encoding="utf-8")
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
            _roll_forward(staging, folder, list(files))
        except OSError as err:
            shutil.rmtree(staging, ignore_errors=True)
            raise UsageError(f"{folder / name}: cannot write: {err.strerror or err}{kept}") from None
        except BaseException:  # ^C, a bug: an uncommitted set leaves nothing; a committed one is settled later
            if kept:
                shutil.rmtree(staging, ignore_errors=True)
            raise
    written = [folder / name for name in files]
    record_written(written)
    note_finished(written)
    return written


# What this process finished writing (files of a set, published bundle folders), in order, for
# the line an interrupted command prints (rootcause.cli): the first FINISHED_KEPT paths, and how
# many more, so a long sweep's record stays small.
FINISHED_KEPT = 256
_finished: dict[Path, None] = {}
_finished_more = 0


def note_finished(paths: list[Path]) -> None:
    global _finished_more
    for path in paths:
        if path in _finished:
            continue
        if len(_finished) < FINISHED_KEPT:
            _finished[path] = None
        else:
            _finished_more += 1


def finished() -> tuple[list[Path], int]:
    """The paths this process finished writing (the first FINISHED_KEPT) and how many more."""
    return list(_finished), _finished_more


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
        if staging.is_symlink() or not staging.is_dir():
            continue  # not a folder write_set made: none of ours to finish or remove
        if not (staging / WRITER).is_file():
            # A writer killed between making its staging folder (mkdtemp's name) and marking it
            # leaves it empty; rmdir removes only an empty folder, so one holding anything stays.
            if _MKDTEMP_NAME.fullmatch(staging.name[len(STAGING):]):
                with contextlib.suppress(OSError):
                    staging.rmdir()
            continue
        if (staging / COMMIT).exists():
            names = committed_names(staging)
            if names is not None:
                _roll_forward(staging, folder, names)
            # else: a record write_set did not write (edited, planted, empty): followed by nobody
        else:
            shutil.rmtree(staging, ignore_errors=True)


def committed_names(staging: Path) -> list[str] | None:
    """The file names a staging folder's commit record lists, or None when the record is not one
    write_set wrote: a JSON list of plain names (no folder part, no '..', no hidden staging name),
    each a regular file in the staging folder or already moved. A record is data from the folder,
    which may have come from anyone; only a name that stays inside the folder is ever renamed."""
    try:
        record = (staging / COMMIT).read_bytes()
        names = json.loads(record.decode("utf-8")) if len(record) < 1 << 20 else None
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(names, list) or not names:
        return None
    for name in names:
        if not is_plain_name(name):
            return None
        staged = staging / name
        if staged.is_symlink() or (staged.exists() and not staged.is_file()):
            return None
    return names


def is_plain_name(name: object) -> bool:
    """A file name with no path in it: what write_set writes, and all a staging record may name."""
    return (isinstance(name, str) and name not in ("", ".", "..") and "/" not in name and "\0" not in name
            and not name.startswith(STAGING) and name not in (COMMIT, WRITER))


def _roll_forward(staging: Path, folder: Path, names: list[str]) -> None:
    """Rename the committed files still in staging into folder, then drop staging. Safe to
    repeat after a kill: a file already moved is simply no longer in staging."""
    for name in names:
        if (staging / name).exists():
            os.replace(staging / name, folder / name)
    shutil.rmtree(staging, ignore_errors=True)


OWNED = ".rootcause-owned"  # in a folder rootcause publishes whole: the files it wrote there

# Output roots: the folders a command was given to write into (--out), held for the command's
# block by output_root. Under a root, nothing is written through a symbolic link (a folder on the
# way that is a link is refused), and a file is replaced only when the root's OWNED record lists
# it as written by rootcause; every file write_set puts there is added to the record. A child
# process started under a root holds its parent's (child.python_env passes them in ROOTS_VAR), so
# what it writes into the output is checked as its parent's writes are.
ROOTS_VAR = "ROOTCAUSE_OUTPUT_ROOTS"
_ROOTS: list[Path] = [Path(p) for p in os.environ.get(ROOTS_VAR, "").split(os.pathsep) if p]


def held_roots() -> list[Path]:
    """The output roots this process holds now, outermost first."""
    return list(_ROOTS)


@contextlib.contextmanager
def output_root(folder: str | os.PathLike) -> Iterator[Path]:
    """Hold folder as an output root for the block (see _ROOTS): writes under it are checked."""
    root = Path(os.path.abspath(folder))
    _ROOTS.append(root)
    try:
        yield Path(folder)
    finally:
        _ROOTS.remove(root)


def _root_of(path: Path) -> Path | None:
    """The innermost output root that path lies in (by its text: no link is resolved), or None."""
    path = Path(os.path.abspath(path))
    found = [root for root in _ROOTS if root == path or root in path.parents]
    return max(found, key=lambda r: len(r.parts)) if found else None


def check_no_links(path: str | os.PathLike) -> None:
    """UsageError when a path between path's output root and path is a symbolic link: a link
    planted inside an output must not carry a write outside it. Outside a root, nothing is checked
    (the user named the folder, links on the way to it included)."""
    from rootcause.errors import UsageError

    root = _root_of(Path(path))
    if root is None:
        return
    step = root
    for part in Path(os.path.abspath(path)).relative_to(root).parts:
        step = step / part
        if step.is_symlink():
            raise UsageError(f"{step}: is a symbolic link inside the output {root}; rootcause never writes through "
                             "a link: remove it, or name another --out")


def make_folder(folder: str | os.PathLike) -> Path:
    """folder made (with its parents) for writing, after check_no_links; UsageError when it cannot be."""
    from rootcause.errors import UsageError

    folder = Path(folder)
    check_no_links(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UsageError(f"{folder}: cannot write output here: {err.strerror or err}") from None
    check_no_links(folder)  # made by another process between the check and mkdir
    return folder


def _owned_record(root: Path) -> set[str]:
    try:
        listed = json.loads((root / OWNED).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return set()
    return {x for x in listed if isinstance(x, str)} if isinstance(listed, list) else set()


def check_replaceable_file(path: Path) -> None:
    """UsageError when path, under an output root, exists and the root's record does not list it
    as rootcause's own: a user's report.md or measurement.json in --out is never replaced."""
    from rootcause.errors import UsageError

    root = _root_of(path)
    if root is None or not os.path.lexists(path):
        return
    check_no_links(path.parent)
    if path.is_symlink() or not path.is_file():
        raise UsageError(f"{path}: exists and is not a file rootcause wrote; refusing to replace it: name a new or "
                         "empty --out, or remove it yourself")
    if Path(os.path.abspath(path)).relative_to(root).as_posix() not in _owned_record(root):
        raise UsageError(f"{path}: exists and rootcause did not write it; refusing to replace it: name a new or "
                         "empty --out, or remove it yourself")


def record_written(paths: list[Path]) -> None:
    """Add paths (files just written under an output root) to the root's OWNED record."""
    by_root: dict[Path, list[str]] = {}
    for path in paths:
        root = _root_of(path)
        if root is not None and root != Path(os.path.abspath(path)):
            by_root.setdefault(root, []).append(Path(os.path.abspath(path)).relative_to(root).as_posix())
    for root, rels in by_root.items():
        with _folder_lock(root):
            listed = _owned_record(root)
            if set(rels) <= listed:
                continue
            tmp = root / f"{OWNED}.{os.getpid()}.tmp"
            tmp.write_text(json.dumps(sorted(listed | set(rels)), indent=0) + "\n", encoding="utf-8")
            os.replace(tmp, root / OWNED)


def mark_owned(folder: Path) -> None:
    """Record every file now under folder as rootcause's own (OWNED), so that a later publish may
    replace the folder whole; call it on the staged folder, before it is renamed into place."""
    files = sorted(_files_under(folder) - {OWNED})
    (folder / OWNED).write_text(json.dumps(files, indent=0) + "\n", encoding="utf-8")


def check_replaceable(folder: Path, what: str = "output") -> None:
    """UsageError unless folder is missing, empty, or holds only files rootcause wrote there
    (mark_owned). A folder of the user's files is never replaced, as `git clone` refuses a
    non-empty folder; a manifest.json or any other name in it proves nothing."""
    from rootcause.errors import UsageError

    if not os.path.lexists(folder):
        return
    if folder.is_symlink() or not folder.is_dir():
        raise UsageError(f"{folder}: exists and is not a folder; refusing to replace it with the {what}")
    try:
        present = _files_under(folder)
        listed = json.loads((folder / OWNED).read_text(encoding="utf-8")) if (folder / OWNED).is_file() else None
    except (OSError, ValueError, RecursionError) as err:
        raise UsageError(f"{folder}: cannot read it to check what it holds: {err}") from None
    if not present:
        return
    foreign = sorted(present - {OWNED} - set(listed if isinstance(listed, list) else []))
    if listed is None or foreign:
        example = foreign[0] if foreign else sorted(present)[0]
        raise UsageError(f"{folder}: holds files rootcause did not write there (e.g. {example!r}); refusing to "
                         f"replace it with the {what}: name a new or empty folder, or remove this one yourself")


def _files_under(folder: Path) -> set[str]:
    """Relative paths of everything under folder that is not a folder (links not followed)."""
    found: set[str] = set()
    for root, dirs, files in os.walk(folder):
        rel = Path(root).relative_to(folder)
        found.update((rel / name).as_posix() for name in files)
        found.update((rel / name).as_posix() for name in dirs if os.path.islink(os.path.join(root, name)))
    return found


def refuse_overwriting(outputs: list[str | os.PathLike], inputs: list[str | os.PathLike]) -> None:
    """UsageError when an output path is one of the inputs (the same file, by inode), so that
    `report A --out A` or `inspect X --out X` never replaces what it reads."""
    from rootcause.errors import UsageError

    for out in outputs:
        for given in inputs:
            try:
                same = os.path.samefile(out, given)
            except OSError:
                same = False
            if same:
                raise UsageError(f"{out}: is also an input ({given}); refusing to overwrite it: name another output")


def exchange(a: Path, b: Path) -> bool:
    """Swap two existing paths in one atomic step (Linux renameat2 RENAME_EXCHANGE), so that no
    moment leaves either name missing; False where the call or the file system lacks it (the
    caller then renames twice, with a window between the renames)."""
    import ctypes

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


_PIECE = 1 << 20  # characters of text encoded and written at a time


def _stage(tmp: Path, data: Data, dest: Path) -> Path:
    if dest.is_dir():
        raise IsADirectoryError(21, "is a directory", str(dest))
    with open(tmp, "wb") as f:
        if isinstance(data, bytes):
            f.write(data)
        else:
            for text in [data] if isinstance(data, str) else data:
                _write_text(f, text)
    os.chmod(tmp, 0o666 & ~_umask())  # mkdtemp makes 0700; give the file open() would get
    return tmp


def _write_text(f: Any, text: str) -> None:
    """text encoded a piece at a time (a report of several MB is not held twice); a name that is
    not UTF-8 (a file name's undecodable bytes) is kept as its \\udcXX escape: the file stays
    UTF-8, and JSON reads the escape back as the same name."""
    for start in range(0, len(text), _PIECE):
        f.write(text[start:start + _PIECE].encode("utf-8", errors="backslashreplace"))


def write_atomic(path: str | os.PathLike, data: Data) -> Path:
    """Write one file atomically (a set of one)."""
    path = Path(path)
    return write_set(path.parent, {path.name: data})[0]


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def json_text(obj: Any) -> str:
    """The JSON every rootcause file uses: indented, keys in their order, UTF-8, a final newline.
    A NaN or infinity is written null: JSON has no such number, and readers (jq, a browser's
    JSON.parse) refuse the NaN token. msgspec encodes and indents in C: the standard library's
    encoder indents in Python, about 8 times slower on a 5 MB attribution."""
    import msgspec

    try:
        return msgspec.json.format(msgspec.json.encode(obj, enc_hook=_plain), indent=2).decode() + "\n"
    except UnicodeEncodeError:  # a file name's undecodable byte (a lone surrogate): escaped as \udcXX
        return json.dumps(_nan_as_null(obj), indent=2, default=_plain) + "\n"


def _nan_as_null(obj: Any) -> Any:
    """obj with every NaN and infinity replaced by None, as msgspec writes them."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _nan_as_null(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_nan_as_null(v) for v in obj]
    return obj


def _plain(obj: Any) -> Any:
    """A value json does not know: a NumPy scalar as its Python value (a numpy bool written as
    the string "False" would read back as true), anything else (paths) as its text."""
    item = getattr(obj, "item", None)
    if callable(item) and getattr(obj, "shape", None) == ():
        return item()
    return str(obj)


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


OUTPUT_LOCK = ".rootcause-lock"


@contextlib.contextmanager
def output_lock(folder: str | os.PathLike, command: str) -> Iterator[Path]:
    """Hold folder as this command's output for the block; a second rootcause writing into the
    same folder at once is refused in one line (UsageError) instead of mixing two runs' files.
    The lock is an flock on a hidden file in the folder: the kernel drops it when the holder dies.
    The holder removes the file before letting go, so a finished command leaves none behind; a
    command that locked a file since removed locks again (the path must still be its file)."""
    from rootcause.errors import UsageError

    folder = Path(folder)
    lock = folder / OUTPUT_LOCK
    while True:
        try:
            folder.mkdir(parents=True, exist_ok=True)
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o666)
        except OSError as err:
            if err.errno == errno.ELOOP:
                raise UsageError(f"{lock}: is a symbolic link; rootcause never writes through a link: "
                                 "remove it") from None
            raise UsageError(f"{folder}: cannot write output here: {err.strerror or err}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise UsageError(f"{folder}: another rootcause {command} is writing into this folder now; wait for it "
                             "to finish or name another --out") from None
        try:
            same = os.path.samestat(os.fstat(fd), os.stat(lock))
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # the previous holder removed it between our open and our lock: lock the new one
    try:
        with output_root(folder):
            yield folder
    finally:
        try:
            lock.unlink()
        except OSError:
            pass
        os.close(fd)


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
    except RecursionError:
        raise UsageError(f"{path}: objects or arrays nested too deeply to be a file rootcause wrote") from None
