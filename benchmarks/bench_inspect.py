"""Throughput of `rootcause inspect`: MB/s and kernels/s on a large fatbin and on 1,000 cubins.

    .venv/bin/python benchmarks/bench_inspect.py [--kernels 300] [--cubins 1000] [--repeat 3]

Inputs are built once with the PyPI nvcc and cached under $ROOTCAUSE_CACHE/bench-inspect
(default ~/.cache/rootcause): a fatbin of N distinct kernels for sm_80, sm_86, sm_89 and sm_90
(cubins only: PTX entries would time ptxas, not rootcause), and a directory of 1,000 cubins
copied from a few compiled ones. Times cover what the CLI does: read, detect, parse, recurse,
occupancy and rows (inspect_paths + row), best of --repeat; then one full CLI run for --format json.
Goal on the 2-core CPU machine: >= 50 MB/s and >= 5,000 kernels/s. The machine is shared, so
each line also gives the process CPU time of the same pass and the load average: wall time
under load overstates what inspect itself costs.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from rootcause import toolchain
from rootcause.inspect import inspect_paths, row

ARCHS = ("sm_80", "sm_86", "sm_89", "sm_90")

KERNEL = """
__global__ void k{i}(float* __restrict__ out, const float* __restrict__ a, const float* __restrict__ b, int n) {{
  __shared__ float tile[{smem}];
  int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
  tile[t % {smem}] = i < n ? a[i] * {i}.0f : 0.0f;
  __syncthreads();
  float acc = 0.0f;
  #pragma unroll
  for (int j = 0; j < {unroll}; j++) acc += tile[(t + j) % {smem}] * b[(i + j) % n];
  if (i < n) out[i] = acc;
}}
"""


def cache_dir() -> Path:
    root = Path(os.environ.get("ROOTCAUSE_CACHE", Path.home() / ".cache" / "rootcause"))
    d = root / "bench-inspect"
    d.mkdir(parents=True, exist_ok=True)
    return d


def source(n: int) -> str:
    return "".join(KERNEL.format(i=i, smem=32 * (1 + i % 8), unroll=1 + i % 16) for i in range(n))


def build_fatbin(n: int) -> Path:
    out = cache_dir() / f"many_{n}.fatbin"
    if out.is_file():
        return out
    src = cache_dir() / f"many_{n}.cu"
    src.write_text(source(n))
    gencode = [f"-gencode=arch=compute_{a[3:]},code={a}" for a in ARCHS]
    subprocess.run([str(toolchain.require_tool("nvcc")), "-fatbin", *gencode, str(src), "-o", str(out) + ".tmp"],
                   check=True)
    os.replace(str(out) + ".tmp", out)
    return out


def build_cubin_dir(count: int) -> Path:
    d = cache_dir() / f"cubins_{count}"
    if d.is_dir() and len(list(d.iterdir())) == count:
        return d
    seeds = []
    for j, n in enumerate((3, 5, 8)):
        src = cache_dir() / f"seed_{j}.cu"
        src.write_text(source(n))
        cubin = cache_dir() / f"seed_{j}.cubin"
        subprocess.run([str(toolchain.require_tool("nvcc")), "-cubin", "-arch=sm_90", str(src), "-o", str(cubin)],
                       check=True)
        seeds.append(cubin)
    tmp = d.with_name(d.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    for i in range(count):
        shutil.copyfile(seeds[i % len(seeds)], tmp / f"k{i:04d}.cubin")
    shutil.rmtree(d, ignore_errors=True)
    tmp.rename(d)
    return d


def measure(label: str, path: Path, repeat: int) -> None:
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    size = sum(p.stat().st_size for p in files)
    best, cpu, kernels = float("inf"), float("inf"), 0
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        result = inspect_paths([path])
        rows = [row(r) for r in result.records]
        best = min(best, time.perf_counter() - t0)
        cpu = min(cpu, time.process_time() - c0)
        kernels = len(rows)
        assert not result.errors, result.errors[:3]
    parse = min(_parsers_only(files) for _ in range(repeat))
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "rootcause", "inspect", str(path), "--format", "json"],
                          capture_output=True)
    cli = time.perf_counter() - t0
    assert proc.returncode == 0, proc.stderr.decode()[-500:]
    print(f"{label}: {len(files)} file(s), {size / 1e6:.1f} MB, {kernels} kernels: "
          f"{best * 1e3:.0f} ms -> {size / 1e6 / best:.1f} MB/s, {kernels / best:,.0f} kernels/s "
          f"(full CLI incl. Python start and JSON: {cli:.2f} s)")
    print(f"  CPU time of the best pass: {cpu * 1e3:.0f} ms -> {size / 1e6 / cpu:.1f} MB/s, {kernels / cpu:,.0f} kernels/s "
          f"(load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")
    # Separate passes on a shared machine: compare the two, do not subtract them.
    print(f"  the readers alone (parsers.fatbin.entries + parsers.cubin.kernels) on the same bytes: "
          f"{parse * 1e3:.0f} ms, {size / 1e6 / parse:.1f} MB/s")


def _parsers_only(files: list[Path]) -> float:
    """Time of the format readers by themselves on the same bytes, to show where time goes."""
    from parsers import cubin, fatbin

    t0 = time.perf_counter()
    for f in files:
        data = f.read_bytes()
        if fatbin.matches(data):
            for e in fatbin.entries(data, str(f)):
                if e.kind == "cubin":
                    cubin.kernels(e.data, str(f))
        else:
            cubin.kernels(data, str(f))
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernels", type=int, default=300)
    ap.add_argument("--cubins", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    fatbin = build_fatbin(args.kernels)
    cubins = build_cubin_dir(args.cubins)
    measure(f"fatbin ({', '.join(ARCHS)})", fatbin, args.repeat)
    measure("cubin directory", cubins, args.repeat)


if __name__ == "__main__":
    main()
