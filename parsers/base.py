"""The two types every reader shares: the error it raises and the kernel row it returns."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
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


@dataclass
class KernelRecord:
    """One kernel's static resources, as read from a binary.

    Units: bytes for every *_bytes field, registers per thread (per lane for AMDGPU VGPRs).
    None means the format does not carry the field (not zero). `format` names the container
    the kernel was found in, innermost last, e.g. 'tvm-so/fatbin/cubin'. `extra` holds
    format-specific facts (barriers, stack_max, kernarg alignment, launch tags, ...).
    """

    name: str
    file: str
    format: str
    arch: str | None = None
    registers: int | None = None
    sgpr: int | None = None
    agpr: int | None = None
    shared_bytes: int | None = None
    local_bytes: int | None = None
    stack_bytes: int | None = None
    param_bytes: int | None = None
    max_threads_per_block: int | None = None
    spills: int | None = None
    wavefront_size: int | None = None
    block: tuple[int, int, int] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        row = asdict(self)
        if row["block"] is not None:
            row["block"] = list(row["block"])
        return row
