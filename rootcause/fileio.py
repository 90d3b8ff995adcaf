"""Reading and writing JSON and result files: one JSON reader (errors with line and column), and
atomic writes, so that a crash or a bad input never leaves a half-written file."""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


def cache_dir() -> Path:
    """rootcause's cache (builds, toolchain environments, bisections): $ROOTCAUSE_CACHE or ~/.cache/rootcause."""
    return Path(os.environ.get("ROOTCAUSE_CACHE", Path.home() / ".cache" / "rootcause"))


def write_atomic(path: str | os.PathLike, data: bytes | str) -> Path:
    """Write data to path via a temporary file in the same directory, then rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = "wb" if isinstance(data, bytes) else "w"
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, mode, **({} if mode == "wb" else {"encoding": "utf-8"})) as f:
            f.write(data)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give the file open() would get
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_json(path: str | os.PathLike, obj: Any) -> Path:
    return write_atomic(path, json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n")


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
