"""Shared by test_cubin.py, test_fatbin.py, test_ptx.py: build real CUDA binaries with the PyPI
nvcc/ptxas, and read what NVIDIA's own tools say about them (ptxas -v, cuobjdump), which is
the truth the readers are checked against. No tests here."""
from __future__ import annotations

import atexit
import functools
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from rootcause.cuda_tools import find_tool

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "binaries" / "cuda"
KERNELS_CU = FIXTURES / "kernels.cu"
BOUNDS_PTX = FIXTURES / "bounds.ptx"

_WORK = Path(tempfile.mkdtemp(prefix="rootcause-cuda-tests-"))
atexit.register(shutil.rmtree, _WORK, True)


def need(tool: str) -> Path:
    path = find_tool(tool)
    if path is None:
        pytest.skip(f"{tool} not installed (PyPI nvidia-cuda-nvcc / nvidia-cuda-cuobjdump)")
    return path


def _run(args: list[str]) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(a) for a in args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, args))} failed:\n{proc.stderr}")
    return proc


@functools.cache
def nvcc(mode: str, *flags: str, src: Path = KERNELS_CU) -> tuple[Path, str]:
    """Compile src with `nvcc -<mode>` (cubin, fatbin, ptx, c) plus flags; (output, ptxas -v log)."""
    out = _WORK / f"{src.stem}-{mode}-{abs(hash(flags)):x}.{ {'c': 'o'}.get(mode, mode)}"
    verbose = ["-Xptxas", "-v"] if mode in ("cubin", "c") else []
    proc = _run([need("nvcc"), f"-{mode}", *flags, *verbose, "-o", out, src])
    return out, proc.stderr + proc.stdout


@functools.cache
def ptxas(arch: str, src: Path = BOUNDS_PTX) -> tuple[Path, str]:
    out = _WORK / f"{src.stem}-{arch}.cubin"
    proc = _run([need("ptxas"), f"-arch={arch}", "-v", "-o", out, src])
    return out, proc.stderr + proc.stdout


def ptxas_info(log: str) -> dict[str, dict[str, int]]:
    """Per entry: registers, barriers, smem, stack_frame, spill_stores, spill_loads from ptxas -v."""
    out: dict[str, dict[str, int]] = {}
    current = None
    for line in log.splitlines():
        if m := re.search(r"Compiling entry function '([^']+)'", line):
            current = out.setdefault(m.group(1), {"smem": 0})
        elif m := re.search(r"Function properties for (\S+)", line):
            current = out.setdefault(m.group(1), {"smem": 0})
        elif current is not None and (m := re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)):
            current.update(stack_frame=int(m.group(1)), spill_stores=int(m.group(2)), spill_loads=int(m.group(3)))
        elif current is not None and (m := re.search(r"Used (\d+) registers(?:, used (\d+) barriers)?", line)):
            current["registers"] = int(m.group(1))
            current["barriers"] = int(m.group(2) or 0)
            if s := re.search(r"(\d+) bytes smem", line):
                current["smem"] = int(s.group(1))
    return out


def resource_usage(path: Path) -> dict[str, dict[str, int | None]]:
    """cuobjdump --dump-resource-usage: per function REG, STACK (None = UNKNOWN), SHARED, LOCAL, CONSTANT[0]."""
    text = _run([need("cuobjdump"), "--dump-resource-usage", path]).stdout
    out = {}
    for name, body in re.findall(r"Function ([^:\s]+):\s*\n\s*(REG:.*)", text):
        fields = dict(re.findall(r"(\w+(?:\[\d\])?):(\S+)", body))
        out[name] = {k: (None if v == "UNKNOWN" else int(v)) for k, v in fields.items()}
    return out


def elf_dump(path: Path) -> str:
    return _run([need("cuobjdump"), "-elf", path]).stdout


def elf_arch(path: Path) -> str:
    """The 'sm=90a' of cuobjdump -elf's header line, as 'sm_90a'."""
    m = re.search(r"sm=(\w+)", elf_dump(path))
    assert m, "cuobjdump -elf printed no sm="
    return f"sm_{m.group(1)}"


def nvinfo_values(path: Path, attribute: str) -> dict[str, str]:
    """Per kernel, the Value text cuobjdump -elf prints for one EIATTR in .nv.info.<kernel>."""
    out = {}
    for name, body in re.findall(r"^\.nv\.info\.(\S+)\n(.*?)(?=^\.|\Z)", elf_dump(path), re.S | re.M):
        m = re.search(rf"Attribute:\s*{attribute}\s*\n\s*Format:.*\n\s*Value:\s*([^\n]*)", body)
        if m:
            out[name] = m.group(1).strip()
    return out


def listing(path: Path) -> list[tuple[str, str]]:
    """(kind, arch) per code object, from cuobjdump -lelf -lptx (names like f.2.sm_90a.cubin)."""
    text = _run([need("cuobjdump"), "-lelf", "-lptx", path]).stdout
    return [("cubin" if kind == "ELF" else "ptx", arch)
            for kind, arch in re.findall(r"^(ELF|PTX) file\s+\d+: \S*?\.(sm_\w+)\.(?:cubin|ptx)$", text, re.M)]


def extracted(path: Path) -> dict[str, list[bytes]]:
    """cuobjdump -xelf all -xptx all: file contents grouped by 'kind:arch', in cuobjdump's order."""
    where = Path(tempfile.mkdtemp(dir=_WORK))
    subprocess.run([str(need("cuobjdump")), "-xelf", "all", "-xptx", "all", str(path.resolve())],
                   cwd=where, capture_output=True, check=True)
    out: dict[str, list[bytes]] = {}
    for f in sorted(where.iterdir(), key=lambda p: int(p.name.split(".")[-3])):
        kind = "cubin" if f.suffix == ".cubin" else "ptx"
        out.setdefault(f"{kind}:{f.name.split('.')[-2]}", []).append(f.read_bytes())
    return out
