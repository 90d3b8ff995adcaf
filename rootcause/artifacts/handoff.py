"""The files a parent and one of its Python children exchange in a work folder (the protocol is
rootcause.child): KIND_request.json, the VariantSpec the parent hands over; KIND_result.json,
the child's result envelope; KIND.log, the child's output, kept for the error message; step, the
build's current step in a few words (note_step), which the parent shows on a terminal. KIND
names the child: 'build' (TVM's build worker), 'export' (a model exported for IREE),
'toolchain' (a build run by another environment's python)."""
from __future__ import annotations

import json
from pathlib import Path

from rootcause.errors import InternalError
from rootcause.fileio import write_json
from rootcause.spec import VariantSpec


def write_spec_request(work_dir: Path, kind: str, spec: VariantSpec) -> Path:
    """The request file, and no result left from an earlier child in its place."""
    result_file(work_dir, kind).unlink(missing_ok=True)
    return write_json(Path(work_dir) / f"{kind}_request.json", spec.to_dict())


def read_spec_request(path: Path) -> VariantSpec:
    """The child's side: the spec its parent wrote (the parent's own output, so a file that
    does not parse is rootcause's fault, not the user's)."""
    try:
        return VariantSpec.from_dict(json.loads(Path(path).read_text()))
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise InternalError(f"{path}: the request from the parent process cannot be read: {err}") from None


def result_file(work_dir: Path, kind: str) -> Path:
    return Path(work_dir) / f"{kind}_result.json"


def log_file(work_dir: Path, kind: str) -> Path:
    return Path(work_dir) / f"{kind}.log"


STEP = "step"


def note_step(work_dir: Path, text: str) -> None:
    """The build in work_dir is now at `text` ('LegalizeOps', 'iree-compile'): one short line the
    parent shows while it waits (rootcause.terminal.ticker). Best effort: a failed write is no error."""
    tmp = Path(work_dir) / f".{STEP}.tmp"
    try:
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(Path(work_dir) / STEP)
    except OSError:
        pass


def read_step(work_dir: Path) -> str:
    try:
        return (Path(work_dir) / STEP).read_text(encoding="utf-8")[:80]
    except (OSError, UnicodeDecodeError):
        return ""
