"""Run a TVM Relax bundle (module.so) through the runtime's VirtualMachine, on cuda or cpu.

Works with the full apache-tvm install and in runtime-only mode (TVM_USE_RUNTIME_LIB=1, the
package without libtvm_compiler.so, as on the GPU host). In runtime-only mode `import tvm`
does not load CUDA support, so libtvm_runtime_cuda.so is loaded here with ctypes, after its
libcudart (from the PyPI nvidia-cuda-runtime package when the system has none).
"""
from __future__ import annotations

import ctypes
import glob
import os
import re
import sys
from typing import Callable

import numpy as np

from rootcause.child import first_error_line
from rootcause.errors import ToolFailed, UsageError
from rootcause.artifacts.bundle import Bundle

_DEVICES = ("cuda", "cpu", "rocm")


def import_tvm():
    """`tvm` with its VM, for running a bundle or building a TVMScript source. Where torch is
    installed and not yet loaded, it is kept out of this import: apache-tvm-ffi imports torch first
    whenever it can (for a symbol clash on one Windows configuration, and its optional DLPack
    exchange), which costs seconds of CPU in every such process, and none of them hands a tensor to
    torch. A later `import torch` in the same process works as usual."""
    keep_out = "torch" not in sys.modules
    if keep_out:
        sys.modules["torch"] = None  # type: ignore[assignment]  # an import of it raises ImportError
    try:
        import tvm
        import tvm.runtime.vm  # noqa: F401  the VM is not imported by `import tvm` alone
    except ImportError as err:
        raise UsageError(f"TVM runtime not importable (pip install apache-tvm): {err}") from None
    finally:
        if keep_out and sys.modules.get("torch", False) is None:
            del sys.modules["torch"]
    return tvm


def _load_global(path_or_name: str) -> None:
    ctypes.CDLL(path_or_name, mode=ctypes.RTLD_GLOBAL)


def _preload_cudart() -> None:
    """Make libcudart.so.13 loadable: system first, then PyPI nvidia/*/lib/ on sys.path."""
    try:
        _load_global("libcudart.so.13")
        return
    except OSError:
        pass
    for entry in sys.path:
        for lib in sorted(glob.glob(os.path.join(entry, "nvidia", "*", "lib", "libcudart.so.13*"))):
            _load_global(lib)
            return


def _ensure_device_api(tvm, device: str) -> None:
    """Load the CUDA (or ROCm) runtime library when `import tvm` did not (runtime-only mode)."""
    import tvm_ffi

    if device == "cpu" or f"device_api.{device}" in tvm_ffi.registry.list_global_func_names():
        return
    lib = os.path.join(os.path.dirname(tvm.__file__), "lib", f"libtvm_runtime_{device}.so")
    if not os.path.isfile(lib):
        raise UsageError(f"TVM {device} runtime missing: {lib} not found")
    if device == "cuda":
        _preload_cudart()
    try:
        _load_global(lib)
    except OSError as err:
        raise UsageError(f"{lib}: cannot load: {err}") from None


class TvmSession:
    def __init__(self, bundle: Bundle, device: str):
        if device not in _DEVICES:
            raise UsageError(f"{bundle.path}: device {device!r}: TVM runner supports {', '.join(_DEVICES)}")
        tvm = import_tvm()
        _ensure_device_api(tvm, device)
        self.tvm = tvm
        self.bundle = bundle
        self.device = device
        self.dev = tvm.device(device, 0)
        if not self.dev.exist:
            raise UsageError(f"{bundle.path}: no {device} device on this host")
        with open(bundle.module_path, "rb") as f:
            if f.read(4) != b"\x7fELF":  # not what a build wrote: the bundle's, not the runtime's fault
                raise UsageError(f"{bundle.module_path}: not a shared library; TVM cannot load it")
        try:
            self.lib = tvm.runtime.load_module(str(bundle.module_path))
            self.vm = tvm.runtime.vm.VirtualMachine(self.lib, self.dev)
        except Exception as err:  # TVM raises its own error types from C++: its runtime failed on the bundle
            raise ToolFailed(f"{bundle.module_path}: the TVM runtime cannot load it: {first_error_line(str(err))}") \
                from None
        self.entry = bundle.entry
        self._inputs = None

    def set_inputs(self, arrays: list[np.ndarray]) -> None:
        self._inputs = [self.tvm.runtime.tensor(np.ascontiguousarray(a), device=self.dev) for a in arrays]
        self.vm.set_input(self.entry, *self._inputs)
        self.dev.sync()

    def call(self) -> None:
        try:
            self.vm.invoke_stateful(self.entry)
        except (ValueError, RuntimeError) as err:  # the VM checks each argument against the parameters
            line = next((x for x in str(err).splitlines() if "ErrorContext(fn=" in x), "")
            param = re.search(r"loc=(param\[\d+\])", line)
            if param is None:
                raise ToolFailed(f"{self.bundle.path}: the TVM runtime failed in a call of {self.entry}: "
                                 f"{first_error_line(str(err))}") from None
            detail = re.search(r'annotation=.*?"\)\)\s*(.*)', line)
            raise UsageError(f"{self.bundle.path}: {self.entry} refused the bundle's inputs (spec [inputs] "
                             f"differ from the model's parameters): {param.group(1)}: "
                             f"{(detail.group(1) if detail else line).strip()}") from None
        self.dev.sync()

    def outputs(self) -> list[np.ndarray]:
        return _flatten(self.vm.get_outputs(self.entry))

    timer_includes = ("TVM time_evaluator over VM invoke_stateful: device-synchronised per sample, "
                      "inputs set on the device beforehand, outputs left there (no readback)")

    def timer(self, number: int = 10) -> Callable[[], float]:
        """Seconds per call: TVM's time_evaluator (device-synchronised, `number` calls per sample)."""
        evaluator = self.vm.time_evaluator("invoke_stateful", self.dev, number=number, repeat=1)
        return lambda: float(evaluator(self.entry).mean)


def _flatten(value) -> list[np.ndarray]:
    if hasattr(value, "numpy"):
        return [value.numpy()]
    out: list[np.ndarray] = []
    for item in value:  # a tuple of outputs (ffi Array), possibly nested
        out.extend(_flatten(item))
    return out


def load(bundle: Bundle, device: str) -> TvmSession:
    return TvmSession(bundle, device)
