"""Run an XLA bundle: jax deserializes the export (module.jaxexport) and XLA compiles it for this
host's device with the spec's [xla] options, as jax does for any jitted function. Only jax and
jaxlib are needed (with the device's plugin on a GPU host).

Completion: a call returns jax arrays whose computation may still be running; `call` and the
timer wait for every output (jax.block_until_ready), so wall-clock timing covers the device work.
"""
from __future__ import annotations

import time
from typing import Any, Callable

import numpy as np

from rootcause.child import first_error_line
from rootcause.errors import ToolFailed, UsageError

DEVICES = {"cpu": "cpu", "cuda": "cuda", "rocm": "rocm"}


def _jax() -> Any:
    try:
        import jax
    except ImportError as err:
        raise UsageError(f"jax not importable (pip install 'rootcause[models]'): {err}") from None
    return jax


def hlo_file_name(bundle_name: str) -> str:
    """The run directory's file of the HLO XLA compiled there for a bundle."""
    from rootcause.frontends.base import profile_name

    return profile_name(bundle_name, ".xla-hlo.txt")


def compile_bundle(bundle: Any, device: str) -> tuple[Any, Any, Any]:
    """(jax, the device, the compiled executable) of a bundle's export on `device`."""
    jax = _jax()
    if device not in DEVICES:
        raise UsageError(f"{bundle.path}: device {device!r}: the XLA runner supports {', '.join(DEVICES)}")
    try:
        target = jax.devices(DEVICES[device])[0]
    except RuntimeError as err:
        raise ToolFailed(f"{bundle.path}: jax has no {device} device here: {first_error_line(str(err))}") from None
    options = ((bundle.manifest.get("spec") or {}).get("options") or {}).get("options") or None
    try:
        exported = jax.export.deserialize(bytearray(bundle.module_path.read_bytes()))
        shapes = [jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=jax.sharding.SingleDeviceSharding(target))
                  for a in exported.in_avals]
        compiled = jax.jit(exported.call).lower(*shapes).compile(compiler_options=options)
    except Exception as err:  # noqa: BLE001  a module jax or XLA cannot load or compile here
        raise ToolFailed(f"{bundle.module_path}: XLA cannot compile it on {device}: {first_error_line(str(err))}") from None
    return jax, target, compiled


def fusions_note(bundle: Any, hlo_text: str) -> str:
    """One line: whether this compile made the catalog's kernels (the same entry instructions)."""
    from rootcause.frontends.xla import hlo

    here = [i.name for i in hlo.thunks(hlo.read(hlo_text))]
    built = [k.get("name") for k in bundle.manifest.get("kernels", [])]
    if not built:
        return f"{len(here)} kernels; the build made no catalog to compare them with"
    if here == built:
        return f"the same {len(here)} kernels as the build's catalog"
    return (f"kernels differ from the build's catalog ({len(here)} here, {len(built)} built, "
            f"{len(set(here) & set(built))} names in common): the catalog describes another compile")


class XlaSession:
    def __init__(self, bundle: Any, device: str):
        self.bundle, self.device = bundle, device
        self.jax, self.target, self.compiled = compile_bundle(bundle, device)
        import jaxlib

        self.compiled_by = f"jaxlib {jaxlib.__version__}"
        self.catalog_note = fusions_note(bundle, self.compiled.as_text())
        self._args: list[Any] = []
        self._out: Any = None

    def run_files(self) -> dict[str, str]:
        """Files the run keeps: the optimized HLO XLA compiled here, which the analysis reads for
        the catalog where the build host could not compile for this device (run_catalog)."""
        return {hlo_file_name(self.bundle.name): self.compiled.as_text()}

    def set_inputs(self, arrays: list[np.ndarray]) -> None:
        self._args = [self.jax.device_put(np.ascontiguousarray(a), self.target) for a in arrays]

    def call(self) -> None:
        try:
            self._out = self.jax.block_until_ready(self.compiled(*self._args))
        except (TypeError, ValueError) as err:
            raise UsageError(f"{self.bundle.path}: the module refused the bundle's inputs: "
                             f"{first_error_line(str(err))}") from None
        except Exception as err:  # noqa: BLE001  XLA's runtime failing on accepted input
            raise ToolFailed(f"{self.bundle.path}: XLA failed in a call: {first_error_line(str(err))}") from None

    def outputs(self) -> list[np.ndarray]:
        if self._out is None:
            raise UsageError(f"{self.bundle.path}: outputs() before call()")
        return [np.asarray(x) for x in self.jax.tree_util.tree_leaves(self._out)]

    @property
    def timer_includes(self) -> str:
        return (f"wall clock around calls of the XLA executable compiled here by {self.compiled_by} "
                f"({self.catalog_note}), each waiting for its outputs (jax.block_until_ready); inputs "
                f"already on the device ({self.device}), outputs left there")

    def timer(self, number: int = 10) -> Callable[[], float]:
        compiled, args, ready = self.compiled, self._args, self.jax.block_until_ready

        def sample() -> float:
            start = time.perf_counter()
            for _ in range(number):
                ready(compiled(*args))
            return (time.perf_counter() - start) / number
        return sample


def load(bundle: Any, device: str) -> XlaSession:
    return XlaSession(bundle, device)
