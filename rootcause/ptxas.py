"""Compile PTX with ptxas -v: the cubin plus what ptxas says about each function.

PTX carries no register counts; only the assembler decides them. `compile_ptx` runs the PyPI
ptxas (rootcause.cuda_tools) and returns the cubin bytes (for parsers/cubin.py) and the -v facts
per function: registers, spill store/load bytes, stack frame, shared and constant memory,
barriers. Failures are ParseErrors naming the PTX line ptxas complained about.
"""
from __future__ import annotations

import functools
import re
import subprocess
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from parsers import ParseError
from rootcause import cuda_tools


@dataclass
class PtxasFunction:
    """ptxas -v facts of one function; None where ptxas printed nothing for it."""

    name: str
    entry: bool = False
    registers: int | None = None
    barriers: int | None = None
    stack_frame_bytes: int | None = None
    spill_store_bytes: int | None = None
    spill_load_bytes: int | None = None
    cumulative_stack_bytes: int | None = None
    shared_bytes: int | None = None
    cmem: dict[int, int] = field(default_factory=dict)  # constant bank -> bytes

    @property
    def spill_bytes(self) -> int | None:
        """Spill traffic as every rootcause row reports it: stores + loads, bytes (None if unknown)."""
        if self.spill_store_bytes is None and self.spill_load_bytes is None:
            return None
        return (self.spill_store_bytes or 0) + (self.spill_load_bytes or 0)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class PtxasResult:
    cubin: bytes
    arch: str
    version: str | None
    functions: dict[str, PtxasFunction]
    log: str


_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '([^']+)'")
_PROPS = re.compile(r"Function properties for (\S+)")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
_BARRIERS = re.compile(r"used (\d+) barriers")
_SMEM = re.compile(r"(\d+) bytes smem")
_CMEM = re.compile(r"(\d+) bytes cmem\[(\d+)\]")
_CUMUL = re.compile(r"(\d+) bytes cumulative stack size")
_ERROR = re.compile(r"^ptxas (?:.*?), line (\d+); (error|fatal)\s*: (.*)$")
_TARGET = re.compile(r"^\s*\.target\s+([A-Za-z0-9_]+)", re.M)


def parse_verbose(log: str) -> dict[str, PtxasFunction]:
    """Per-function facts from ptxas -v output (stderr/stdout lines starting 'ptxas info')."""
    funcs: dict[str, PtxasFunction] = {}
    current: PtxasFunction | None = None
    for line in log.splitlines():
        if m := _ENTRY.search(line):
            current = funcs.setdefault(m.group(1), PtxasFunction(m.group(1)))
            current.entry = True
            continue
        if m := _PROPS.search(line):
            current = funcs.setdefault(m.group(1), PtxasFunction(m.group(1)))
            continue
        if current is None:
            continue
        if m := _FRAME.search(line):
            current.stack_frame_bytes, current.spill_store_bytes, current.spill_load_bytes = (
                int(g) for g in m.groups())
        if m := _USED.search(line):
            current.registers = int(m.group(1))
            current.barriers = int(b.group(1)) if (b := _BARRIERS.search(line)) else current.barriers
            current.shared_bytes = int(s.group(1)) if (s := _SMEM.search(line)) else 0
            current.cmem = {int(bank): int(n) for n, bank in _CMEM.findall(line)}
            if c := _CUMUL.search(line):
                current.cumulative_stack_bytes = int(c.group(1))
    return funcs


def ptx_target(ptx: str) -> str | None:
    """The .target of a PTX module ('sm_90a'), or None."""
    m = _TARGET.search(ptx)
    return m.group(1) if m else None


@functools.cache
def supported_archs() -> tuple[str, ...]:
    """Real (sm_*) GPU names this ptxas accepts, from its --help text."""
    ptxas = cuda_tools.require_tool("ptxas")
    text = subprocess.run([str(ptxas), "--help"], capture_output=True, text=True).stdout
    block = text.split("--gpu-name", 1)[-1].split("\n--", 1)[0]
    return tuple(sorted(set(re.findall(r"'(sm_\d+[af]?)'", block)), key=_arch_key))


def _arch_key(arch: str) -> tuple[int, str]:
    m = re.match(r"(?:sm|compute)_(\d+)([af]?)", arch)
    return (int(m.group(1)), m.group(2)) if m else (0, arch)


def default_arch(ptx: str) -> str:
    """The PTX .target if this ptxas can build it, else the lowest supported sm above it."""
    target = ptx_target(ptx) or "sm_75"
    supported = supported_archs()
    if target in supported:
        return target
    want = _arch_key(target)[0]
    plain = [a for a in supported if _arch_key(a)[1] == "" and _arch_key(a)[0] >= want]
    return plain[0] if plain else target


def compile_ptx(ptx: str | bytes, arch: str | None = None, file: str = "<ptx>",
                extra_flags: list[str] | None = None) -> PtxasResult:
    """Assemble PTX for arch (default: default_arch) with -v; raise ParseError on failure."""
    text = ptx.decode("utf-8", errors="replace") if isinstance(ptx, bytes) else ptx
    ptxas = cuda_tools.require_tool("ptxas")
    arch = arch or default_arch(text)
    with tempfile.TemporaryDirectory(prefix="rootcause-ptxas-") as tmp:
        src, out = Path(tmp) / "in.ptx", Path(tmp) / "out.cubin"
        src.write_text(text)
        proc = subprocess.run([str(ptxas), "-v", f"-arch={arch}", *(extra_flags or []), str(src),
                               "-o", str(out)], capture_output=True, text=True)
        log = proc.stdout + proc.stderr
        if proc.returncode != 0 or not out.is_file():
            raise _error(file, arch, log)
        cubin = out.read_bytes()
    return PtxasResult(cubin, arch, ptxas_version(), parse_verbose(log), log)


def _error(file: str, arch: str, log: str) -> ParseError:
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    for line in lines:
        if m := _ERROR.match(line):
            return ParseError(file, f"line {m.group(1)}", f"ptxas -arch={arch}: {m.group(3).strip()}")
    fatal = next((line for line in lines if "fatal" in line or "error" in line), lines[-1] if lines else "")
    what = fatal.split(":", 1)[-1].strip() if ":" in fatal else fatal
    return ParseError(file, "ptxas", f"-arch={arch}: {what or 'failed with no message'}")


@functools.cache
def ptxas_version() -> str | None:
    """'13.5.37' from ptxas --version ('Cuda compilation tools, release 13.5, V13.5.37')."""
    ptxas = cuda_tools.find_tool("ptxas")
    if ptxas is None:
        return None
    text = subprocess.run([str(ptxas), "--version"], capture_output=True, text=True).stdout
    m = re.search(r"V(\d+\.\d+\.\d+)", text) or re.search(r"release (\S+?),", text)
    return m.group(1) if m else None
