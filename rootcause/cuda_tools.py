"""Where the CUDA build tools are, and the build-only libcuda stub TVM needs without a GPU.

nvcc, ptxas and cuobjdump come from PyPI (nvidia-cuda-nvcc, nvidia-cuda-cuobjdump) so a fresh
machine needs no system CUDA toolkit. A tool found on PATH is used only when the PyPI one is
absent, and `describe()` says which one was used, so a report can name it.

cuda_fp16.h and cuda_bf16.h include <nv/target>, which is CCCL's (PyPI nvidia-cuda-cccl, installed
into the same nvidia/cu13/include that nvcc.profile puts on nvcc's include path, with its
include/cccl as a system include): without it every fp16/bf16 CUDA build fails, so cuda_home()
refuses a toolkit that lacks it, in one line.
"""
from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from rootcause.errors import UsageError


# Set by a build for its child in a toolchain's environment (rootcause.build.build_in), which has
# the compiler release but not rootcause[cuda-tools]: the child uses the parent's nvcc and headers.
CUDA_ROOT_VAR = "ROOTCAUSE_CUDA_ROOT"


class ToolMissing(UsageError, RuntimeError):
    """A build tool rootcause needs is not installed (one line, exit status 2)."""


def _pypi_cuda_roots() -> list[Path]:
    roots = []
    given = os.environ.get(CUDA_ROOT_VAR)  # a parent's tools, for a build in a toolchain's venv
    if given and (Path(given) / "bin").is_dir():
        roots.append(Path(given))
    for entry in sys.path:
        base = Path(entry) / "nvidia"
        for sub in ("cu13", "cuda_nvcc", "cu12"):
            if (base / sub / "bin").is_dir():
                roots.append(base / sub)
    return roots


@functools.cache
def find_tool(name: str) -> Path | None:
    """Path of a CUDA tool (nvcc, ptxas, cuobjdump, nvdisasm), PyPI first, then PATH."""
    for root in _pypi_cuda_roots():
        candidate = root / "bin" / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which(name)
    return Path(found) if found else None


def cuda_root() -> Path | None:
    """The toolkit-like folder (bin/nvcc, include/) of the nvcc find_tool picks; None without one."""
    nvcc = find_tool("nvcc")
    return nvcc.parent.parent if nvcc else None


def require_tool(name: str) -> Path:
    path = find_tool(name)
    if path is None:
        raise ToolMissing(f"{name} not found: install rootcause[cuda-tools] (PyPI nvidia-cuda-nvcc)")
    return path


def cuda_home() -> Path:
    """A directory laid out like a CUDA toolkit (bin/, include/), for tools that want CUDA_HOME;
    ToolMissing when its headers cannot compile fp16/bf16 code (no <nv/target>)."""
    home = require_tool("nvcc").parent.parent
    if nv_target_header(home) is None:
        raise ToolMissing(f"{home / 'include'}: no nv/target, which cuda_fp16.h includes: install "
                          "rootcause[cuda-tools] (PyPI nvidia-cuda-cccl)")
    return home


def nv_target_header(home: Path) -> Path | None:
    """<nv/target> where nvcc looks for it under a toolkit: include/ or include/cccl/."""
    for include in (home / "include", home / "include" / "cccl"):
        if (include / "nv" / "target").is_file():
            return include / "nv" / "target"
    return None


def tool_version(name: str) -> str | None:
    path = find_tool(name)
    if path is None:
        return None
    out = subprocess.run([str(path), "--version"], capture_output=True, text=True).stdout
    lines = [line for line in out.splitlines() if line.strip()]
    return lines[-1].strip() if lines else None


# The driver symbols libtvm_runtime_cuda.so imports (docs/GPU_HOST.md). The stub only has to let
# the library load so TVM takes its real nvcc path; nothing in a build calls them.
_STUB_SYMBOLS = (
    "cuDeviceGetName", "cuFuncSetAttribute", "cuGetErrorName", "cuGetErrorString",
    "cuLaunchKernelEx", "cuModuleGetFunction", "cuModuleLoadData", "cuModuleUnload",
    "cuTensorMapEncodeTiled",
)


def libcuda_stub_dir(cache: Path | None = None) -> Path:
    """A directory holding a build-only libcuda.so.1 (every call returns an error).

    Put it on LD_LIBRARY_PATH before TVM loads, and only on a machine without a real driver.
    """
    from rootcause.fileio import cache_dir

    cache = cache or cache_dir()
    target = cache / "libcuda-stub"
    lib = target / "libcuda.so.1"
    if lib.is_file():
        return target
    target.mkdir(parents=True, exist_ok=True)
    body = "\n".join(f"int {sym}(void) {{ return 999; }}" for sym in _STUB_SYMBOLS)
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise ToolMissing("a C compiler (cc/gcc) is needed to build the libcuda stub")
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "stub.c"
        src.write_text(body + "\n")
        out = Path(tmp) / "libcuda.so.1"
        subprocess.run([cc, "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", str(out), str(src)],
                       check=True, capture_output=True)
        os.replace(out, lib)  # atomic: a concurrent builder never sees half a library
    return target


def real_driver_present() -> bool:
    """True when a real libcuda can be loaded (a GPU host)."""
    import ctypes

    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True
