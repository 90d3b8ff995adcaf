"""Run an IREE bundle (module.vmfb) through iree.runtime on cuda, hip or local-task (CPU).

Only iree-base-runtime is needed (no compiler). Completion: a function compiled with IREE's
default (sync) invocation model declares `sync func` in its reflection, and its exported wrapper
ends with `hal.fence.await` (timeout -1) on the signal fence of its last queue operation (seen
in `iree-compile --compile-to=vm` output), so a call returns only after the device work is done
and wall-clock timing around calls is synchronised without a readback. Functions of the
`coarse-fences` model (`async func`) return before that; the runner refuses them rather than
time a queue submission. `timer(readback=True)` adds copying the results to the host, as a
cross-check. `benchmark()` is the other timer: iree-benchmark-module, the tool IREE ships.
"""
from __future__ import annotations

import re
import tempfile
import time
from pathlib import Path
from typing import Callable

import numpy as np

from rootcause.child import first_error_line
from rootcause.errors import ToolFailed, UsageError
from rootcause.artifacts.bundle import Bundle
from rootcause.inputs import LOW_PRECISION, mlir_name

DRIVERS = {"cuda": "cuda", "rocm": "hip", "hip": "hip", "cpu": "local-task", "local-task": "local-task"}


def _ireert():
    try:
        import iree.runtime as ireert
    except ImportError as err:
        raise UsageError(f"iree.runtime not importable (pip install iree-base-runtime): {err}") from None
    return ireert


class IreeSession:
    def __init__(self, bundle: Bundle, device: str):
        if device not in DRIVERS:
            raise UsageError(f"{bundle.path}: device {device!r}: IREE runner supports {', '.join(DRIVERS)}")
        ireert = _ireert()
        self.ireert = ireert
        self.bundle = bundle
        self.device = device
        self.driver = DRIVERS[device]
        try:
            self.config = ireert.Config(self.driver)
            self.context = ireert.SystemContext(config=self.config)
            self.vm_module = ireert.VmModule.mmap(self.config.vm_instance, str(bundle.module_path))
            self.context.add_vm_module(self.vm_module)
        except (RuntimeError, ValueError) as err:
            raise ToolFailed(f"{bundle.module_path}: the IREE runtime cannot load it on {self.driver}: "
                             f"{first_error_line(str(err))}") from None
        functions = [f for f in self.vm_module.function_names if f != "__init"]
        if bundle.entry not in functions:
            raise UsageError(f"{bundle.module_path}: no function {bundle.entry!r} (has {', '.join(functions)})")
        self.entry = bundle.entry
        self.function = self.context.modules[self.vm_module.name][self.entry]
        declaration = self.function.vm_function.reflection.get("iree.abi.declaration", "")
        if declaration.startswith("async"):
            raise UsageError(f"{bundle.module_path}: {self.entry} uses the coarse-fences ABI (async func): "
                             f"calls return before the device work completes; rebuild with the default sync ABI")
        self.abi = "sync" if declaration.startswith("sync") else "undeclared"
        self._host_inputs: list[np.ndarray] = []
        self._inputs: list = []
        self._result = None

    def set_inputs(self, arrays: list[np.ndarray]) -> None:
        self._host_inputs = [np.ascontiguousarray(a) for a in arrays]
        self._inputs = [self.ireert.asdevicearray(self.config.device, a) for a in self._host_inputs]

    def call(self) -> None:
        try:
            self._result = self.function(*self._inputs)
        except (ValueError, RuntimeError) as err:  # hal.buffer_view.assert checks each argument against the signature
            match = re.search(r"input\d+ (element type|shape|rank)[^;]*mismatch[^;]*(;[^;]*)?", str(err))
            if match is None:
                raise ToolFailed(f"{self.bundle.path}: the IREE runtime failed in a call of {self.entry}: "
                                 f"{first_error_line(str(err))}") from None
            raise UsageError(f"{self.bundle.path}: {self.entry} refused the bundle's inputs (spec [inputs] "
                             f"differ from the model's parameters): {match.group(0)}") from None

    def outputs(self) -> list[np.ndarray]:
        if self._result is None:
            raise UsageError(f"{self.bundle.path}: outputs() before call()")
        results = self._result if isinstance(self._result, (tuple, list)) else [self._result]
        return [np.asarray(r.to_host() if hasattr(r, "to_host") else r) for r in results]

    @property
    def timer_includes(self) -> str:
        """What one timed call covers, recorded beside the measurement."""
        return (f"wall clock around iree.runtime calls of a {self.abi}-ABI function: VM invoke, queue "
                f"submission and the wrapper's hal.fence.await on completion; inputs already on the "
                f"device ({self.driver}), outputs left there (no readback)")

    def timer(self, number: int = 10, readback: bool = False) -> Callable[[], float]:
        """Seconds per call: wall clock around `number` synchronous calls (readback: each call's
        results also copied to the host inside the timer)."""
        def sample() -> float:
            start = time.perf_counter()
            for _ in range(number):
                result = self.function(*self._inputs)
                if readback:
                    for r in result if isinstance(result, (tuple, list)) else [result]:
                        r.to_host()
            return (time.perf_counter() - start) / number
        return sample

    def benchmark(self, repetitions: int = 5, timeout: float | None = 600) -> list[float]:
        """Seconds per call from iree-benchmark-module, one value per repetition."""
        from iree.runtime.benchmark import BenchmarkToolError, benchmark_module

        with tempfile.TemporaryDirectory() as tmp:
            files = [tool_input(array, Path(tmp) / str(i)) for i, array in enumerate(self._host_inputs)]
            try:
                rows = benchmark_module(str(self.bundle.module_path), self.entry, files, timeout=timeout,
                                        device=self.driver, benchmark_repetitions=repetitions,
                                        benchmark_report_aggregates_only=False)
            except BenchmarkToolError as err:
                raise UsageError(f"{self.bundle.module_path}: iree-benchmark-module failed: "
                                 f"{err.message.strip().splitlines()[-1] if err.message.strip() else err}") from None
        return [_seconds(row.report) for row in rows if row.report.get("run_type") == "iteration"]


def tool_input(array: np.ndarray, stem: Path) -> str:
    """An IREE tool's --input value for an array: '@x.npy', or for bfloat16/fp8 (whose .npy
    headers IREE's reader does not know) raw bytes typed by MLIR name: '16x32xbf16=@x.bin'."""
    if array.dtype.name in LOW_PRECISION:
        path = stem.with_suffix(".bin")
        np.ascontiguousarray(array).tofile(path)
        return f"{'x'.join(map(str, array.shape))}{'x' if array.shape else ''}{mlir_name(array.dtype)}=@{path}"
    path = stem.with_suffix(".npy")
    np.save(path, array)
    return f"@{path}"


_UNITS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}


def _seconds(report: dict) -> float:
    return float(report["real_time"]) * _UNITS[report["time_unit"]]


def load(bundle: Bundle, device: str) -> IreeSession:
    return IreeSession(bundle, device)
