"""GPU architecture limits and theoretical occupancy.

Sources (cited per value below):
- [CPG] CUDA C++ Programming Guide, "Compute Capabilities" / "Technical Specifications per
  Compute Capability" table (threads, warps, blocks, registers, shared memory per SM/block).
- [OCC] cuda_occupancy.h from the CUDA 13.5 runtime wheel (PyPI nvidia-cuda-runtime,
  nvidia/cu13/include/cuda_occupancy.h): allocation granularities, sub-partitions, carveout
  sizes, and the cudaOccMaxActiveBlocksPerMultiprocessor algorithm that `occupancy` follows.
  tests/test_gpus.py compiles that header with g++ and checks this module against it.
- [LLVM] llvm/lib/Target/AMDGPU/Utils/AMDGPUBaseInfo.cpp (IsaInfo::getMaxWavesPerEU = 8 for
  gfx90a-class targets, getTotalNumVGPRs = 512, getVGPRAllocGranule = 8, getEUsPerCU = 4,
  getLocalMemorySize = 64 KiB, getMaxWorkGroupsPerCU: 16 barriers per CU on gfx9,
  getOccupancyWithNumSGPRs) and AMDGPUUsage (COMPUTE_PGM_RSRC2.LDS_SIZE: 128-dword granules).

Counts of SMs / CUs belong to a device, not an architecture: see DEVICES.
"""
from __future__ import annotations

import re
from pathlib import Path
from dataclasses import asdict, dataclass, field
from typing import Any

KIB = 1024


@dataclass(frozen=True)
class ArchLimits:
    """Per-SM (per-CU on AMD) and per-block limits of one architecture.

    On AMD: 'warps' are wavefronts, 'SM' is a CU, registers are VGPRs per lane per SIMD.
    """

    arch: str
    vendor: str  # 'nvidia' | 'amd'
    warp_size: int
    max_threads_per_block: int
    max_warps_per_sm: int  # AMD: waves per SIMD x SIMDs per CU
    max_blocks_per_sm: int
    registers_per_sm: int  # NVIDIA: 32-bit registers per SM; AMD: VGPRs per SIMD lane
    registers_per_block: int
    max_registers_per_thread: int
    register_alloc_unit: int  # NVIDIA: registers per warp granule; AMD: VGPR granule per lane
    shared_per_sm: int  # bytes, largest carveout
    shared_per_block: int  # bytes without opt-in (48 KiB on NVIDIA)
    shared_per_block_optin: int  # bytes with cudaFuncAttributeMaxDynamicSharedMemorySize
    shared_alloc_unit: int  # bytes
    reserved_shared_per_block: int  # bytes the driver adds to every block (sm_80+)
    carveouts_kib: tuple[int, ...] = ()  # shared-memory sizes an SM can be configured to
    sub_partitions: int = 4  # NVIDIA: SM sub-partitions (register files); AMD: SIMDs per CU
    waves_per_simd: int = 0  # AMD only
    sgprs_per_simd: int = 0  # AMD only
    max_barriers_per_cu: int = 0  # AMD only: workgroups of >1 wave per CU

    def to_dict(self) -> dict:
        return asdict(self)


# NVIDIA carveouts: cudaOccAlignUpShmemSizeVoltaPlus [OCC].
_CARVE_V100 = (0, 8, 16, 32, 64, 96)
_CARVE_T4 = (32, 64)
_CARVE_A100 = (0, 8, 16, 32, 64, 100, 132, 164)
_CARVE_GA10X = (0, 8, 16, 32, 64, 100)
_CARVE_H100 = (0, 8, 16, 32, 64, 100, 132, 164, 196, 228)


def _nv(arch: str, warps: int, blocks: int, smem_sm_kib: int, optin_kib: int,
        carveouts: tuple[int, ...]) -> ArchLimits:
    major = int(arch[3:-1])
    return ArchLimits(
        arch=arch, vendor="nvidia", warp_size=32,
        max_threads_per_block=1024,  # [CPG], all cc >= 7.0
        max_warps_per_sm=warps,  # [CPG] "Maximum number of resident warps per SM"
        max_blocks_per_sm=blocks,  # [CPG], = cudaOccMaxBlocksPerMultiprocessor [OCC]
        registers_per_sm=64 * KIB, registers_per_block=64 * KIB,  # [CPG]
        max_registers_per_thread=255,  # [CPG]
        register_alloc_unit=256,  # cudaOccRegAllocationGranularity [OCC]
        shared_per_sm=smem_sm_kib * KIB, shared_per_block=48 * KIB,  # [CPG]
        shared_per_block_optin=optin_kib * KIB,  # [CPG] (sharedMemPerBlockOptin)
        shared_alloc_unit=256 if major == 7 else 128,  # cudaOccSMemAllocationGranularity [OCC]
        reserved_shared_per_block=0 if major == 7 else 1 * KIB,  # [OCC] "Starting Ampere"
        carveouts_kib=carveouts,
        sub_partitions=4,  # cudaOccSubPartitionsPerMultiprocessor [OCC]
    )


def _amd(arch: str) -> ArchLimits:
    # CDNA2 (gfx90a) and CDNA3 (gfx942) share these in [LLVM]: FeatureGFX90AInsts targets.
    return ArchLimits(
        arch=arch, vendor="amd", warp_size=64,
        max_threads_per_block=1024,  # getMaxFlatWorkGroupSize
        max_warps_per_sm=8 * 4,  # getMaxWavesPerEU (8) x getEUsPerCU (4)
        max_blocks_per_sm=8 * 4,  # one-wave workgroups: bounded by waves only
        registers_per_sm=512, registers_per_block=512,  # getTotalNumVGPRs (unified VGPR+AGPR)
        max_registers_per_thread=512,  # getAddressableNumVGPRs
        register_alloc_unit=8,  # getVGPRAllocGranule
        shared_per_sm=64 * KIB, shared_per_block=64 * KIB,  # getLocalMemorySize
        shared_per_block_optin=64 * KIB,
        shared_alloc_unit=128 * 4,  # AMDGPUUsage: LDS_SIZE granularity 128 dwords (GFX7+)
        reserved_shared_per_block=0,
        sub_partitions=4, waves_per_simd=8, sgprs_per_simd=800,  # getTotalNumSGPRs
        max_barriers_per_cu=16,  # getMaxWorkGroupsPerCU, gfx9
    )


ARCHS: dict[str, ArchLimits] = {
    a.arch: a for a in (
        _nv("sm_70", 64, 32, 96, 96, _CARVE_V100),
        _nv("sm_75", 32, 16, 64, 64, _CARVE_T4),
        _nv("sm_80", 64, 32, 164, 163, _CARVE_A100),
        _nv("sm_86", 48, 16, 100, 99, _CARVE_GA10X),
        _nv("sm_89", 48, 24, 100, 99, _CARVE_GA10X),
        _nv("sm_90", 64, 32, 228, 227, _CARVE_H100),
        _nv("sm_100", 64, 32, 228, 227, _CARVE_H100),
        _nv("sm_120", 48, 24, 100, 99, _CARVE_GA10X),
        _amd("gfx90a"),
        _amd("gfx942"),
    )
}

# Device -> (arch, SMs or CUs). Vendor spec sheets / deviceQuery multiProcessorCount.
DEVICES: dict[str, tuple[str, int]] = {
    "V100": ("sm_70", 80), "T4": ("sm_75", 40), "A100": ("sm_80", 108), "A10": ("sm_86", 72),
    "L4": ("sm_89", 58), "L40S": ("sm_89", 142), "H100": ("sm_90", 132), "H200": ("sm_90", 132),
    "B200": ("sm_100", 148), "MI250X": ("gfx90a", 220), "MI300X": ("gfx942", 304),
}


# Peak DRAM bandwidth, bytes/s (the bandwidth rule), from the vendors' spec sheets: H200 "GPU Memory Bandwidth
# 4.8TB/s" (nvidia.com/en-us/data-center/h200, HBM3e); H100 SXM 3.35 TB/s (H100 datasheet);
# A100 80GB SXM 2,039 GB/s (A100 datasheet); MI300X 5.3 TB/s (AMD Instinct MI300X datasheet).

PEAK_DRAM_BYTES_PER_S: dict[str, float] = {"H200": 4.8e12, "H100": 3.35e12, "A100": 2.039e12, "MI300X": 5.3e12}

# Peak FP32 arithmetic on the vector units (FMA: 2 flops), flop/s, from the same spec sheets: H100
# and H200 SXM "FP32 67 teraFLOPS", A100 "FP32 19.5 TFLOPS", V100 SXM2 15.7, MI300X "FP32 vector
# 163.4 TFLOPs". Tensor-core peaks (TF32, BF16, FP8) are several times higher: a kernel on them
# can pass this figure, and the compute rule says which peak it measures against.
PEAK_FP32_FLOPS: dict[str, float] = {"H200": 67e12, "H100": 67e12, "A100": 19.5e12, "V100": 15.7e12,
                                     "MI300X": 163.4e12}


def find_device(*names: Any) -> str | None:
    """The DEVICES key the first recognisable name means ('NVIDIA H200' -> 'H200'): a key itself
    (any case) or a whole word of the name. The one device-name resolution of every command."""
    for name in names:
        if not isinstance(name, str):
            continue
        tokens = {t.upper() for t in re.split(r"[\s_/-]+", name)}
        for key in DEVICES:
            if key.upper() == name.upper() or key.upper() in tokens:
                return key
    return None


def env_gpu_names(env: Any) -> list[str]:
    """GPU names of an env.json ({'before': snapshot, ...}) or of one NVML snapshot."""
    snaps = [env] if isinstance(env, dict) and "gpus" in env else \
        [s for s in env.values() if isinstance(s, dict)] if isinstance(env, dict) else []
    return [g["name"] for s in snaps for g in s.get("gpus") or [] if isinstance(g, dict)
            and isinstance(g.get("name"), str)]


def resolve_device(given: str | None, env: Any = None) -> str | None:
    """--gpu (UsageError naming the known devices when unknown), else the GPU env.json names."""
    if given is not None:
        key = find_device(given)
        if key is None:
            from rootcause.errors import UsageError

            raise UsageError(f"--gpu: unknown GPU {given!r} (known: {', '.join(DEVICES)})")
        return key
    return find_device(*env_gpu_names(env))


def normalize_arch(arch: str) -> str:
    """'sm_90a', 'compute_90', '90', 'sm90', 'gfx942:sramecc+:xnack-' -> table key."""
    a = arch.strip().lower()
    if a.startswith("gfx"):
        return a.split(":")[0]
    for prefix in ("sm_", "sm", "compute_", "compute"):
        if a.startswith(prefix):
            a = a[len(prefix):]
            break
    a = a.rstrip("af")  # sm_90a / sm_100f: same resource limits as the base arch
    return f"sm_{a}"


def limits(arch: str) -> ArchLimits:
    key = normalize_arch(arch)
    if key not in ARCHS:
        raise KeyError(f"unknown GPU architecture {arch!r} (known: {', '.join(ARCHS)})")
    return ARCHS[key]


@dataclass
class Occupancy:
    """Theoretical occupancy of one kernel launch configuration on one SM / CU."""

    active_blocks: int
    active_warps: int
    max_warps: int
    occupancy: float  # active_warps / max_warps, 0..1
    limiter: str  # 'registers' | 'shared' | 'warps' | 'blocks' (| 'barriers' on sm_90+)
    block_limits: dict[str, int] = field(default_factory=dict)  # blocks per SM under each limit

    def to_dict(self) -> dict:
        return asdict(self)


_BIG = 2**31 - 1  # INT_MAX in [OCC]: "no limit from this resource"


def _round_up(x: int, unit: int) -> int:
    return -(-x // unit) * unit


def _carveout_fit(lim: ArchLimits, size: int) -> int | None:
    """Smallest configurable shared size >= size (cudaOccAlignUpShmemSizeVoltaPlus)."""
    for kib in lim.carveouts_kib:
        if size <= kib * KIB:
            return kib * KIB
    return None


def _pick(blocks: dict[str, int]) -> tuple[int, str]:
    # [OCC] reports every factor equal to the minimum; name one, the block-size limits first
    # (a kernel at full occupancy is limited by warps, not by registers that tie with them).
    active = min(blocks.values())
    for name in ("warps", "blocks", "registers", "shared", "barriers"):
        if blocks.get(name) == active:
            return active, name
    raise AssertionError("unreachable")


def _nvidia(lim: ArchLimits, block: int, regs: int, static_smem: int, dyn_smem: int,
            carveout: int | None, barriers: int) -> Occupancy:
    warps_per_block = -(-block // lim.warp_size)
    max_warps = lim.max_warps_per_sm
    b: dict[str, int] = {}
    # Registers: per warp, rounded to the allocation unit, fitted per sub-partition.
    regs_warp = _round_up(regs * lim.warp_size, lim.register_alloc_unit)
    hw_check = regs_warp * _round_up(warps_per_block, lim.sub_partitions)
    if (hw_check > lim.registers_per_block or regs_warp * warps_per_block > lim.registers_per_block
            or regs > lim.max_registers_per_thread + 1):  # [OCC] allows 256 on cc >= 7
        b["registers"] = 0
    elif regs_warp == 0:
        b["registers"] = _BIG
    else:
        per_part = (lim.registers_per_sm // lim.sub_partitions) // regs_warp
        b["registers"] = per_part * lim.sub_partitions // warps_per_block
    b["warps"] = 0 if block > lim.max_threads_per_block else max_warps // warps_per_block
    b["blocks"] = lim.max_blocks_per_sm
    b["shared"] = _nvidia_smem_blocks(lim, static_smem, dyn_smem, carveout)
    if int(lim.arch[3:]) >= 90 and barriers > 0:  # Hopper onwards: block barrier limit [OCC]
        per_block = 1 if lim.arch == "sm_120" else 2  # barriers per block slot
        b["barriers"] = lim.max_blocks_per_sm * per_block // barriers
    active, limiter = _pick(b)
    return Occupancy(active, active * warps_per_block, max_warps,
                     active * warps_per_block / max_warps, limiter, b)


def _nvidia_smem_blocks(lim: ArchLimits, static_smem: int, dyn_smem: int,
                        carveout: int | None) -> int:
    static = static_smem + lim.reserved_shared_per_block
    per_block = _round_up(static + dyn_smem, lim.shared_alloc_unit)
    # Per-block cap: opt-in limit when the kernel needs more than the default 48 KiB
    # (FUNC_SHMEM_LIMIT_OPTIN with maxDynamicSharedSizeBytes = the launch's dynamic size).
    cap = lim.shared_per_block_optin if static + dyn_smem > lim.shared_per_block else lim.shared_per_block
    if per_block > cap + lim.reserved_shared_per_block:
        return 0
    pref = lim.shared_per_sm if carveout is None else carveout * lim.shared_per_sm // 100
    pref = _carveout_fit(lim, pref)
    if pref is None:
        raise ValueError(f"carveout {carveout}% does not map to a {lim.arch} shared size")
    if pref < per_block:  # the driver grows the carveout to fit one block
        pref = _carveout_fit(lim, per_block) or 0
    return pref // per_block if per_block else _BIG


def _amd_occupancy(lim: ArchLimits, block: int, vgprs: int, sgprs: int | None, agprs: int | None,
                   lds: int) -> Occupancy:
    waves_per_block = -(-block // lim.warp_size)
    simds = lim.sub_partitions
    # Unified register file: arch VGPRs aligned to 4, then AGPRs (getTotalNumVGPRs(gfx90a,...)).
    total_v = (_round_up(vgprs, 4) + agprs) if agprs else vgprs
    if total_v < lim.register_alloc_unit:
        v_waves = lim.waves_per_simd
    else:
        v_waves = min(max(lim.registers_per_sm // _round_up(total_v, lim.register_alloc_unit), 1),
                      lim.waves_per_simd)
    if total_v > lim.max_registers_per_thread:
        v_waves = 0
    s_waves = lim.waves_per_simd if not sgprs else min(_sgpr_waves(sgprs), lim.waves_per_simd)
    b: dict[str, int] = {}
    b["registers"] = min(v_waves, s_waves) * simds // waves_per_block
    b["warps"] = 0 if block > lim.max_threads_per_block else lim.max_warps_per_sm // waves_per_block
    b["blocks"] = lim.max_blocks_per_sm if waves_per_block == 1 else lim.max_barriers_per_cu
    per_block = _round_up(lds, lim.shared_alloc_unit)
    b["shared"] = 0 if per_block > lim.shared_per_block else (
        lim.shared_per_sm // per_block if per_block else _BIG)
    active, limiter = _pick(b)
    warps = active * waves_per_block
    return Occupancy(active, warps, lim.max_warps_per_sm, warps / lim.max_warps_per_sm, limiter, b)


def _sgpr_waves(sgprs: int) -> int:
    # getOccupancyWithNumSGPRs, VOLCANIC_ISLANDS..GFX9 [LLVM]
    if sgprs <= 80:
        return 10
    if sgprs <= 88:
        return 9
    if sgprs <= 100:
        return 8
    return 7


def occupancy(arch: str, block_threads: int, registers: int, shared_bytes: int = 0,
              dynamic_shared_bytes: int = 0, *, carveout: int | None = None, barriers: int = 1,
              sgprs: int | None = None, agprs: int | None = None) -> Occupancy:
    """Blocks and warps resident per SM (CU) for a kernel launched with block_threads threads.

    NVIDIA follows cudaOccMaxActiveBlocksPerMultiprocessor [OCC] with default device state
    (carveout None = largest shared size; otherwise a percentage 0..100) and the kernel opted
    in to its dynamic shared size. AMD follows LLVM's IsaInfo rules [LLVM]: registers are
    VGPRs per lane (plus AGPRs, and SGPRs per wave if given), shared_bytes is LDS per group.
    """
    lim = limits(arch)
    if block_threads <= 0:
        raise ValueError(f"block size must be positive, got {block_threads}")
    if registers < 0 or shared_bytes < 0 or dynamic_shared_bytes < 0:
        raise ValueError("registers and shared sizes must be >= 0")
    if lim.vendor == "amd":
        return _amd_occupancy(lim, block_threads, registers, sgprs, agprs,
                              shared_bytes + dynamic_shared_bytes)
    return _nvidia(lim, block_threads, registers, shared_bytes, dynamic_shared_bytes,
                   carveout, barriers)


def detect_gpu() -> str | None:
    """'cuda:sm_XX' when an NVIDIA GPU answers NVML, 'rocm:gfxNNN' when the amdgpu KFD lists one, else None."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            if pynvml.nvmlDeviceGetCount() > 0:
                major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(pynvml.nvmlDeviceGetHandleByIndex(0))
                return f"cuda:sm_{major}{minor}"
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no pynvml, no driver, no device: not a CUDA host
        pass
    for props in sorted(Path("/sys/class/kfd/kfd/topology/nodes").glob("*/properties")):
        for line in props.read_text(errors="replace").splitlines():
            key, _, value = line.partition(" ")
            if key == "gfx_target_version" and value.strip().isdigit() and int(value) > 0:
                v = int(value)  # major*10000 + minor*100 + stepping, e.g. 90402 = gfx942
                return f"rocm:gfx{v // 10000}{v // 100 % 100}{v % 100:x}"
    return None


def gpu_count() -> int:
    """NVIDIA GPUs NVML sees here (0 without a driver)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return int(pynvml.nvmlDeviceGetCount())
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no NVML, no driver: no NVIDIA GPU here
        return 0
