"""rootcause.gpus against NVIDIA's own occupancy calculator (cuda_occupancy.h, compiled here).

The header ships in the PyPI nvidia-cuda-runtime wheel. A tiny C++ program computes
cudaOccMaxActiveBlocksPerMultiprocessor for a grid of (block, registers, shared) per device;
rootcause.gpus.occupancy must give the same active blocks and a limiter among the header's
limiting factors. Device properties are the values cudaGetDeviceProperties reports on those
GPUs (CUDA Programming Guide, Compute Capabilities table; deviceQuery), written out here as
literals, independent of rootcause.gpus.ARCHS.
"""
from __future__ import annotations

import itertools
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rootcause import gpus

HEADER_DIRS = [Path(p) / "nvidia" / "cu13" / "include" for p in sys.path]
HEADER = next((d for d in HEADER_DIRS if (d / "cuda_occupancy.h").is_file()), None)

# cc -> (maxThreadsPerMultiProcessor, sharedMemPerMultiprocessor, sharedMemPerBlockOptin,
#        reservedSharedMemPerBlock) as cudaGetDeviceProperties reports them.
DEVICE_PROPS = {
    (7, 0): (2048, 98304, 98304, 0),     # V100
    (7, 5): (1024, 65536, 65536, 0),     # T4
    (8, 0): (2048, 167936, 166912, 1024),  # A100
    (8, 6): (1536, 102400, 101376, 1024),  # A10 / RTX 30xx
    (8, 9): (1536, 102400, 101376, 1024),  # L4 / L40S
    (9, 0): (2048, 233472, 232448, 1024),  # H100 / H200
    (10, 0): (2048, 233472, 232448, 1024),  # B200
    (12, 0): (1536, 102400, 101376, 1024),  # RTX 50xx
}

HARNESS = r"""
#include <cstdio>
#include <cuda_occupancy.h>
int main() {
  int major, minor, tpsm, block, regs, carve;
  long smsm, optin, reserved, smem, dyn;
  while (scanf("%d %d %d %ld %ld %ld %d %d %ld %ld %d", &major, &minor, &tpsm, &smsm, &optin,
               &reserved, &block, &regs, &smem, &dyn, &carve) == 11) {
    cudaOccDeviceProp p;
    p.computeMajor = major; p.computeMinor = minor; p.maxThreadsPerBlock = 1024;
    p.maxThreadsPerMultiprocessor = tpsm; p.regsPerBlock = 65536; p.regsPerMultiprocessor = 65536;
    p.warpSize = 32; p.sharedMemPerBlock = 49152; p.sharedMemPerMultiprocessor = smsm;
    p.numSms = 100; p.sharedMemPerBlockOptin = optin; p.reservedSharedMemPerBlock = reserved;
    cudaOccFuncAttributes a;
    a.maxThreadsPerBlock = 1024; a.numRegs = regs; a.sharedSizeBytes = smem;
    a.partitionedGCConfig = PARTITIONED_GC_OFF; a.shmemLimitConfig = FUNC_SHMEM_LIMIT_OPTIN;
    a.maxDynamicSharedSizeBytes = dyn; a.numBlockBarriers = 1; a.virtualResourceCount = 0;
    cudaOccDeviceState s;
    s.carveoutConfig = carve;
    cudaOccResult r;
    cudaOccError e = cudaOccMaxActiveBlocksPerMultiprocessor(&r, &p, &a, &s, block, dyn);
    printf("%d %d %u\n", (int)e, e ? -1 : r.activeBlocksPerMultiprocessor, e ? 0u : r.limitingFactors);
  }
  return 0;
}
"""

FACTORS = {0x01: "warps", 0x02: "registers", 0x04: "shared", 0x08: "blocks", 0x10: "barriers"}

BLOCKS = [32, 64, 96, 128, 192, 256, 384, 512, 640, 768, 1024]
REGS = [0, 16, 24, 32, 40, 48, 64, 72, 96, 128, 168, 200, 255]
SMEM = [0, 132, 1000, 4096, 12 * 1024, 40 * 1024, 48 * 1024, 70 * 1024, 99 * 1024, 160 * 1024,
        200 * 1024, 227 * 1024]


@pytest.fixture(scope="session")
def occ_binary(tmp_path_factory) -> Path:
    if HEADER is None or shutil.which("g++") is None:
        pytest.skip("cuda_occupancy.h (nvidia-cuda-runtime wheel) or g++ not available")
    work = tmp_path_factory.mktemp("occ")
    (work / "occ.cpp").write_text(HARNESS)
    exe = work / "occ"
    subprocess.run(["g++", "-O1", "-I", str(HEADER), str(work / "occ.cpp"), "-o", str(exe)],
                   check=True, capture_output=True)
    return exe


def _header_results(exe: Path, cases: list[tuple]) -> list[tuple[int, int, int]]:
    lines = []
    for (major, minor), block, regs, smem, dyn, carve in cases:
        tpsm, smsm, optin, reserved = DEVICE_PROPS[(major, minor)]
        lines.append(f"{major} {minor} {tpsm} {smsm} {optin} {reserved} {block} {regs} {smem} {dyn} {carve}")
    out = subprocess.run([str(exe)], input="\n".join(lines) + "\n", capture_output=True, text=True,
                         check=True).stdout.split("\n")
    return [tuple(int(x) for x in line.split()) for line in out if line.strip()]


def _compare(exe: Path, cases: list[tuple]) -> int:
    checked = 0
    for case, (err, blocks, factors) in zip(cases, _header_results(exe, cases), strict=True):
        (major, minor), block, regs, smem, dyn, carve = case
        arch = f"sm_{major}{minor}"
        if err != 0:  # the header rejects it (e.g. more shared than any carveout): so must we
            with pytest.raises(ValueError):
                gpus.occupancy(arch, block, regs, smem, dyn, carveout=None if carve < 0 else carve)
            continue
        got = gpus.occupancy(arch, block, regs, smem, dyn, carveout=None if carve < 0 else carve)
        assert got.active_blocks == blocks, (case, got)
        named = {name for bit, name in FACTORS.items() if factors & bit}
        assert got.limiter in named, (case, got, named)
        checked += 1
    return checked


@pytest.mark.parametrize("cc", sorted(DEVICE_PROPS), ids=lambda cc: f"sm_{cc[0]}{cc[1]}")
def test_static_shared_grid_matches_cuda_occupancy_h(occ_binary, cc):
    cases = [(cc, b, r, s, 0, -1) for b, r, s in itertools.product(BLOCKS, REGS, SMEM)]
    assert _compare(occ_binary, cases) > len(cases) // 2


@pytest.mark.parametrize("cc", [(8, 0), (9, 0), (7, 5)], ids=lambda cc: f"sm_{cc[0]}{cc[1]}")
def test_dynamic_shared_and_carveout_match(occ_binary, cc):
    cases = [(cc, b, r, s, d, c) for b, r, s, d, c in itertools.product(
        [64, 256, 1024], [32, 64], [0, 2048], [0, 8 * 1024, 60 * 1024, 150 * 1024],
        [-1, 0, 25, 50, 100])]
    assert _compare(occ_binary, cases) > 0


def test_seed_pool_fusion_kernel_from_cupti_capture():
    # The H200 CUPTI capture of the pool_fusion case records the fused kernel's launch: block 256,
    # 17 registers, 132 B static shared on sm_90. 256 threads = 8 warps, 8 blocks fill 64 warps.
    capture = Path(__file__).resolve().parents[1] / "fixtures/captures/h200-2026-12-02/tvm_pool_fusion.cupti.json"
    text = capture.read_text()
    records = _cupti_kernels(text)
    fused = [r for r in records if "fused_pool2d_add2" in r.get("name", "")]
    assert fused, "capture lost its fused kernel"
    rec = fused[0]
    block = rec["block_x"] * rec["block_y"] * rec["block_z"]
    occ = gpus.occupancy("sm_90", block, rec["registers_per_thread"], rec["static_shared_memory"],
                         rec.get("dynamic_shared_memory", 0))
    assert (block, rec["registers_per_thread"]) == (256, 17)
    assert occ.active_warps == 64 and occ.limiter == "warps"


def _cupti_kernels(text: str) -> list[dict]:
    data = json.loads(text)
    found: list[dict] = []

    def walk(x):
        if isinstance(x, dict):
            if "registers_per_thread" in x:
                found.append(x)
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    walk(data)
    return found


def test_amd_limits_follow_llvm_rules():
    # LLVM AMDGPUBaseInfo: gfx942 has 512 VGPRs per lane, granule 8, at most 8 waves per SIMD.
    lim = gpus.limits("gfx942:sramecc+:xnack-")
    assert (lim.warp_size, lim.waves_per_simd, lim.registers_per_sm) == (64, 8, 512)
    assert gpus.occupancy("gfx942", 256, 128).active_warps == 4 * (512 // 128)
    assert gpus.occupancy("gfx942", 256, 129).active_warps == 4 * (512 // 136)
    assert gpus.occupancy("gfx942", 64, 16).limiter == "warps"
    # 40 KiB LDS per group: one group per 64 KiB CU.
    assert gpus.occupancy("gfx942", 256, 32, 40 * 1024).active_blocks == 1


def test_unknown_arch_is_one_clear_error():
    with pytest.raises(KeyError, match="sm_42"):
        gpus.limits("sm_42")
    assert gpus.normalize_arch("sm_90a") == "sm_90" and gpus.normalize_arch("compute_80") == "sm_80"
