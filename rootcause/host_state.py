"""The host a measurement ran on: GPU state through NVML (pynvml), CPU and software facts.

Take `snapshot()` before and after a measurement; `drift(before, after)` lists what moved
(SM/memory clocks, throttle reasons, temperature) so a report can warn. Without NVML the
record says 'NVML unavailable: <reason>' and carries no GPU numbers: none are made up.
"""
from __future__ import annotations

import ctypes
import os
import platform
import socket
import time
from typing import Any, Callable

# Clock-event (throttle) reason bits, NVML's names without the prefix. GpuIdle is benign
# between runs; the others mean the clocks were held down while we measured.
_REASONS = ("GpuIdle", "ApplicationsClocksSetting", "SwPowerCap", "HwSlowdown", "SyncBoost",
            "SwThermalSlowdown", "HwThermalSlowdown", "HwPowerBrakeSlowdown", "DisplayClockSetting")
BENIGN_REASONS = {"GpuIdle", "ApplicationsClocksSetting", "DisplayClockSetting"}


def _cpu() -> dict[str, Any]:
    model = platform.processor() or None
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    info: dict[str, Any] = {"model": model, "logical_cpus": os.cpu_count(), "machine": platform.machine()}
    try:
        info["affinity_cpus"] = len(os.sched_getaffinity(0))
        info["loadavg"] = list(os.getloadavg())
    except (AttributeError, OSError):
        pass
    return info


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _reasons(mask: int) -> list[str]:
    import pynvml

    names = []
    for name in _REASONS:
        bit = getattr(pynvml, f"nvmlClocksEventReason{name}", None) or getattr(pynvml, f"nvmlClocksThrottleReason{name}", 0)
        if bit and mask & bit:
            names.append(name)
    return names


def _try(fn, *args):
    """One NVML query; a field the device does not support is recorded as its error, not a value."""
    import pynvml

    try:
        return fn(*args)
    except pynvml.NVMLError as err:
        return f"unavailable: {err}"


def _gpu(index: int) -> dict[str, Any]:
    import pynvml as n

    h = n.nvmlDeviceGetHandleByIndex(index)
    power = _try(n.nvmlDeviceGetPowerUsage, h)
    limit = _try(n.nvmlDeviceGetEnforcedPowerLimit, h)
    mask = _try(getattr(n, "nvmlDeviceGetCurrentClocksEventReasons", n.nvmlDeviceGetCurrentClocksThrottleReasons), h)
    util = _try(n.nvmlDeviceGetUtilizationRates, h)
    mem = _try(n.nvmlDeviceGetMemoryInfo, h)
    return {
        "index": index,
        "name": _text(n.nvmlDeviceGetName(h)),
        "uuid": _text(_try(n.nvmlDeviceGetUUID, h)),
        "pstate": _try(n.nvmlDeviceGetPerformanceState, h),
        "sm_clock_mhz": _try(n.nvmlDeviceGetClockInfo, h, n.NVML_CLOCK_SM),
        "mem_clock_mhz": _try(n.nvmlDeviceGetClockInfo, h, n.NVML_CLOCK_MEM),
        "sm_clock_max_mhz": _try(n.nvmlDeviceGetMaxClockInfo, h, n.NVML_CLOCK_SM),
        "mem_clock_max_mhz": _try(n.nvmlDeviceGetMaxClockInfo, h, n.NVML_CLOCK_MEM),
        "temperature_c": _try(n.nvmlDeviceGetTemperature, h, n.NVML_TEMPERATURE_GPU),
        "power_w": power / 1000 if isinstance(power, int) else power,
        "power_limit_w": limit / 1000 if isinstance(limit, int) else limit,
        "clock_event_mask": mask,
        "clock_event_reasons": _reasons(mask) if isinstance(mask, int) else mask,
        "utilization_gpu_pct": util.gpu if hasattr(util, "gpu") else util,
        "memory_used_mib": mem.used // 2**20 if hasattr(mem, "used") else mem,
        "memory_total_mib": mem.total // 2**20 if hasattr(mem, "total") else mem,
    }


def nvml_state() -> dict[str, Any]:
    """{'driver', 'cuda_driver_version', 'gpus': [...]} or {'nvml': 'NVML unavailable: <reason>'}."""
    try:
        import pynvml as n
    except ImportError as err:
        return {"nvml": f"NVML unavailable: pynvml not installed ({err})"}
    try:
        n.nvmlInit()
    except n.NVMLError as err:
        return {"nvml": f"NVML unavailable: {err}"}
    try:
        cuda = _try(n.nvmlSystemGetCudaDriverVersion_v2)
        return {
            "nvml": "ok",
            "driver": _text(n.nvmlSystemGetDriverVersion()),
            "cuda_driver_version": f"{cuda // 1000}.{cuda % 1000 // 10}" if isinstance(cuda, int) else cuda,
            "gpus": [_gpu(i) for i in range(n.nvmlDeviceGetCount())],
        }
    except n.NVMLError as err:
        return {"nvml": f"NVML unavailable: {err}"}
    finally:
        try:
            n.nvmlShutdown()
        except n.NVMLError:
            pass


def sm_clock_reader(cuda_ordinal: int = 0) -> Callable[[], tuple[int, int]] | None:
    """A reader of (SM clock MHz, its maximum MHz) of the GPU that CUDA numbers `cuda_ordinal` in
    this process (CUDA_VISIBLE_DEVICES applied), or None where the CUDA driver or NVML cannot say.
    The GPU is found by its PCI bus id: NVML numbers every GPU of the host in PCI order, CUDA only
    the visible ones, fastest first. NVML stays initialized for the reader's process."""
    try:
        import pynvml as n

        bus = _cuda_pci_bus(cuda_ordinal)
        if bus is None:
            return None
        n.nvmlInit()
        handles = [n.nvmlDeviceGetHandleByIndex(i) for i in range(n.nvmlDeviceGetCount())]
        handle = next((h for h in handles if _pci_key(_text(n.nvmlDeviceGetPciInfo(h).busId)) == bus), None)
        if handle is None:
            return None
        top = int(n.nvmlDeviceGetMaxClockInfo(handle, n.NVML_CLOCK_SM))
    except Exception:  # noqa: BLE001  no pynvml, no driver, a field the device lacks: no reader
        return None
    return lambda: (int(n.nvmlDeviceGetClockInfo(handle, n.NVML_CLOCK_SM)), top)


def _cuda_pci_bus(ordinal: int) -> tuple[int, int, int, int] | None:
    """(domain, bus, device, function) of CUDA device `ordinal`, through the driver API; None
    without a CUDA driver or that device."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    device = ctypes.c_int()
    text = ctypes.create_string_buffer(64)
    if cuda.cuInit(0) or cuda.cuDeviceGet(ctypes.byref(device), ordinal) or \
            cuda.cuDeviceGetPCIBusId(text, len(text), device):
        return None
    return _pci_key(text.value.decode())


def _pci_key(bus_id: str) -> tuple[int, int, int, int] | None:
    """'0000:19:00.0' (CUDA) and '00000000:19:00.0' (NVML) as one comparable key."""
    try:
        domain, bus, rest = bus_id.strip().split(":")
        device, function = rest.split(".")
        return int(domain, 16), int(bus, 16), int(device, 16), int(function, 16)
    except ValueError:
        return None


def snapshot() -> dict[str, Any]:
    """The host now: time, hostname, CPU, Python, and the NVML state of every GPU."""
    return {
        "time_unix": time.time(),
        "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu": _cpu(),
        **nvml_state(),
    }


def drift(before: dict[str, Any], after: dict[str, Any], clock_tolerance: float = 0.05) -> list[str]:
    """Warnings: clocks that moved by more than clock_tolerance, throttling, a hot GPU."""
    if before.get("nvml") != "ok" or after.get("nvml") != "ok":
        return [f"GPU state not recorded: {before.get('nvml') if before.get('nvml') != 'ok' else after.get('nvml')}"] \
            if "nvml" in before or "nvml" in after else []
    warnings = []
    for b, a in zip(before["gpus"], after["gpus"]):
        tag = f"GPU {a['index']} ({a['name']})"
        for key in ("sm_clock_mhz", "mem_clock_mhz"):
            x, y = b.get(key), a.get(key)
            if isinstance(x, int) and isinstance(y, int) and x and abs(y - x) / x > clock_tolerance:
                warnings.append(f"{tag}: {key} moved {x} -> {y} MHz during the measurement")
        for snap, when in ((b, "before"), (a, "after")):
            bad = [r for r in snap.get("clock_event_reasons") or [] if isinstance(r, str) and r not in BENIGN_REASONS]
            if isinstance(snap.get("clock_event_reasons"), list) and bad:
                warnings.append(f"{tag}: clocks held down {when}: {', '.join(bad)}")
    return warnings
