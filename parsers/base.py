"""The two types every reader shares: the error it raises and the kernel row it returns."""
from __future__ import annotations

from typing import Any


class ParseError(Exception):
    """A format could not be read. str() is one line: 'FILE: PLACE: WHAT'."""

    def __init__(self, file: str, where: str, what: str):
        self.file = str(file)
        self.where = _one_line(where)
        self.what = _one_line(what)
        where, what = self.where, self.what
        super().__init__(f"{self.file}: {where}: {what}" if where else f"{self.file}: {what}")


def _one_line(text: str, limit: int = 400) -> str:
    """Bad bytes echoed in a message stay on one line and short (a mutated field can be huge)."""
    text = " ".join(str(text).split("\n")).replace("\r", " ")
    return text if len(text) <= limit else text[:limit] + "..."


def load_native(name: str):
    """parsers.<name>, a compiled reader setup.py builds, or None: when it is not built, when
    ROOTCAUSE_PURE_PYTHON is set (tests and benchmarks compare it with the Python reference), and
    when its C source beside it is newer than the built module (an edited checkout not rebuilt
    with `pip install -e .`: a stale decoder would disagree with the Python one silently)."""
    import os

    if os.environ.get("ROOTCAUSE_PURE_PYTHON"):
        return None
    import importlib

    try:
        module = importlib.import_module(f"parsers.{name}")
    except ImportError:
        return None
    built = getattr(module, "__file__", None) or ""
    source = os.path.join(os.path.dirname(built), f"{name}.c")
    try:
        if os.stat(source).st_mtime > os.stat(built).st_mtime:
            return None
    except OSError:  # an installed wheel carries no source: nothing to be stale against
        pass
    return module


# KernelRecord's fields, in order (its constructor's positional order, repr, equality, to_dict).
RECORD_FIELDS = ("name", "file", "format", "arch", "registers", "sgpr", "agpr", "shared_bytes",
                 "local_bytes", "stack_bytes", "param_bytes", "max_threads_per_block", "spills",
                 "wavefront_size", "block", "extra")


class KernelRecord:
    """One kernel's static resources, as read from a binary.

    Units: bytes for every *_bytes field, registers per thread (per lane for AMDGPU VGPRs).
    None means the format does not carry the field (not zero). `format` names the container
    the kernel was found in, innermost last, e.g. 'tvm-so/fatbin/cubin'. `extra` holds
    format-specific facts (barriers, stack_max, kernarg alignment, launch tags, ...).

    A plain class with __slots__, not a dataclass: importing dataclasses (and with it inspect,
    ast, dis, tokenize) costs 13-16 ms, most of `rootcause inspect`'s start-up on a cubin.
    """

    __slots__ = RECORD_FIELDS
    __hash__ = None  # mutable, compared by value

    def __init__(self, name: str, file: str, format: str, arch: str | None = None,
                 registers: int | None = None, sgpr: int | None = None, agpr: int | None = None,
                 shared_bytes: int | None = None, local_bytes: int | None = None,
                 stack_bytes: int | None = None, param_bytes: int | None = None,
                 max_threads_per_block: int | None = None, spills: int | None = None,
                 wavefront_size: int | None = None, block: tuple[int, int, int] | None = None,
                 extra: dict[str, Any] | None = None):
        self.name, self.file, self.format, self.arch = name, file, format, arch
        self.registers, self.sgpr, self.agpr = registers, sgpr, agpr
        self.shared_bytes, self.local_bytes, self.stack_bytes = shared_bytes, local_bytes, stack_bytes
        self.param_bytes, self.max_threads_per_block, self.spills = param_bytes, max_threads_per_block, spills
        self.wavefront_size, self.block = wavefront_size, block
        self.extra = {} if extra is None else extra

    def _values(self) -> tuple:
        return tuple(getattr(self, k) for k in RECORD_FIELDS)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._values() == other._values()

    def __repr__(self) -> str:
        return f"KernelRecord({', '.join(f'{k}={getattr(self, k)!r}' for k in RECORD_FIELDS)})"

    def to_dict(self) -> dict[str, Any]:
        """Every field, block as a list, extra copied through (nested dicts and lists too)."""
        row = {k: _copied(getattr(self, k)) for k in RECORD_FIELDS}
        if row["block"] is not None:
            row["block"] = list(row["block"])
        return row


def _copied(value: Any) -> Any:
    """A deep copy of a field value, as dataclasses.asdict makes one."""
    if isinstance(value, dict):
        return {_copied(k): _copied(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copied(v) for v in value]
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return type(value)(_copied(v) for v in value)
    if isinstance(value, (str, int, float, bool, type(None), bytes)):
        return value
    import copy

    return copy.deepcopy(value)
