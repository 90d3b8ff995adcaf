#!/usr/bin/env python3
"""Round 4 of the Kineto test pairs (issue 31): profiler APIs other than torch.profiler's
scheduled steps, one-step captures from several processes, and a pair whose delta is one CPU op.

Each side records its own truth, as kineto_capture.py does: the wall time of every profiled step
or call (torch.cuda.synchronize + time.perf_counter around it), never read back from a trace.

  legacy       bf16 / fp32   torch.autograd.profiler.profile(use_device="cuda") with its old default
                             use_kineto=False: no ProfilerStep, no schedule, a host gap between
                             steps; a matmul chain in bf16 against fp32 (TF32 off)
  legacykineto bf16 / fp32   the same steps through torch.autograd.profiler.profile(use_kineto=True)
  ranks        r0 / r3       four processes ("ranks"), each capturing ONE ProfilerStep of the same
                             transformer inference; r3 is a straggler whose shard is 1.5x longer
                             (sequence 768 against 512)
  ranksnull    r1 / r2       two more of those processes, the same shard: a null pair of one step
  nogap        k32 / k1      no markers and no host gap between calls: side a's call launches one small add
                             32 times (eager, 20 calls: 640 identical launches), side b's call one add on 32x the
                             elements (20 launches); the call cannot be told apart in either trace
  hostop       light / heavy ResNet training step whose batch comes from a DataLoader (num_workers 0)
                             over a dataset doing CPU work per item; heavy does 3x the work per item,
                             so DataLoader.__next__ carries the delta and the GPU work is the same.
                             The script also times next(loader) in each profiled step.

Usage (on the GPU host, beside kineto_capture.py):  python3 kineto_round4.py --all --out DIR
"""
from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import kineto_capture as kc

ROUND4 = {"legacy": ("bf16", "fp32"), "legacykineto": ("bf16", "fp32"), "ranks": ("r0", "r3"),
          "ranksnull": ("r1", "r2"), "hostop": ("light", "heavy"), "nogap": ("k32", "k1")}
DESIGNED = {"legacy": "b_slower", "legacykineto": "b_slower", "ranks": "b_slower", "ranksnull": "same",
            "hostop": "b_slower", "nogap": "b_faster"}
LEGACY_STEPS = 8
HOST_GAP_US = 300.0


def legacy_profile(step, path: Path, steps: int, use_kineto: bool) -> dict[str, Any]:
    """The old API: no schedule and no prof.step(); each step's wall is timed here, a host gap
    (busy wait) after each, so the steps are separated in the trace as a user's loop leaves them."""
    torch = kc._torch()
    walls = []
    torch.cuda.synchronize()
    with torch.autograd.profiler.profile(use_device="cuda", use_kineto=use_kineto, record_shapes=True) as prof:
        for _ in range(steps):
            t0 = time.perf_counter()
            step()
            torch.cuda.synchronize()
            walls.append((time.perf_counter() - t0) * 1e3)
            kc.busy_wait_us(HOST_GAP_US)
    prof.export_chrome_trace(str(path))
    kc.ensure_gzip(path)
    return {"annotated": False, "steps": steps, "step_wall_ms": [round(w, 4) for w in walls],
            "profiler_api": f"torch.autograd.profiler.profile(use_device='cuda', use_kineto={use_kineto})",
            "host_gap_us_busy_wait": HOST_GAP_US}


def _legacy_side(pair: str, side: str, out: Path, use_kineto: bool) -> dict[str, Any]:
    torch = kc._torch()
    torch.backends.cuda.matmul.allow_tf32 = False
    dtype = torch.bfloat16 if side == "bf16" else torch.float32
    b, width, depth = 2048, 4096, 6
    ws, x = kc.matmul_chain(b, width, depth, dtype)

    def step() -> None:
        y = x
        for w in ws:
            y = torch.relu(y @ w)

    kc.timed_steps(step, 3)
    unprof = kc.timed_steps(step, 5)
    path = out / f"{pair}-{side}.json.gz"
    prof = legacy_profile(step, path, LEGACY_STEPS, use_kineto)
    config = {"model": f"chain of {depth} ({b}x{width})@({width}x{width}) matmuls + ReLU", "dtype": str(dtype),
              "allow_tf32": False}
    return kc.side_record(pair, side, path, prof, unprof, config, {"profiler_steps": 0, "streams_min": 1})


def run_legacy(args, side: str, out: Path) -> dict[str, Any]:
    return _legacy_side("legacy", side, out, use_kineto=False)


def run_legacykineto(args, side: str, out: Path) -> dict[str, Any]:
    return _legacy_side("legacykineto", side, out, use_kineto=True)


def _rank_side(pair: str, side: str, out: Path) -> dict[str, Any]:
    torch = kc._torch()
    torch.manual_seed(0)
    d, heads, hidden, depth, b = 1024, 16, 4096, 6, 8
    t = 768 if side == "r3" else 512
    model = kc.transformer(d, heads, hidden, depth, fused_ops=False).to("cuda", torch.bfloat16).eval()
    x = torch.randn(b, t, d, device="cuda", dtype=torch.bfloat16)

    def step() -> None:
        with torch.no_grad():
            model(x)

    kc.timed_steps(step, 5)
    unprof = kc.timed_steps(step, 10)
    path = out / f"{pair}-{side}.json.gz"
    prof = kc.profile_steps(step, path, 1)
    config = {"model": f"{depth} pre-norm transformer blocks d={d} heads={heads} mlp={hidden}", "input": [b, t, d],
              "dtype": "bfloat16", "mode": "inference (no_grad)", "rank": int(side[1:]),
              "note": "one process per rank, run one after another on one GPU; one ProfilerStep a trace"}
    return kc.side_record(pair, side, path, prof, unprof, config, {"profiler_steps": 1, "streams_min": 1})


def run_ranks(args, side: str, out: Path) -> dict[str, Any]:
    return _rank_side("ranks", side, out)


def run_ranksnull(args, side: str, out: Path) -> dict[str, Any]:
    return _rank_side("ranksnull", side, out)


def run_hostop(args, side: str, out: Path) -> dict[str, Any]:
    torch = kc._torch()
    dev = torch.device("cuda")
    torch.manual_seed(0)
    model, model_name = kc.resnet()
    model = model.to(dev).train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    iters, item_ms = args.dl_calib
    if side == "heavy":
        iters *= 3
    ds = kc.FFTImages(4096, args.dl_size, iters)
    loader = torch.utils.data.DataLoader(ds, batch_size=args.dl_batch, shuffle=False, num_workers=0, drop_last=True)
    it = iter(loader)
    next_ms: list[float] = []

    def batch():
        t0 = time.perf_counter()
        x, y = next(it)
        next_ms.append((time.perf_counter() - t0) * 1e3)
        return x.to(dev), y.to(dev)

    step = kc.train_step_fn(model, opt, batch)
    kc.timed_steps(step, 4)
    unprof = kc.timed_steps(step, 4)
    path = out / f"hostop-{side}.json.gz"
    before = len(next_ms)
    prof = kc.profile_steps(step, path, args.active)
    prof["loader_next_ms"] = [round(v, 4) for v in next_ms[before + 2:]]  # the profiled steps' next(loader)
    config = {"model": model_name, "batch": args.dl_batch, "image": [3, args.dl_size, args.dl_size], "num_workers": 0,
              "fft_rounds_per_item": iters, "light_item_cpu_ms_measured": round(item_ms, 4),
              "optimizer": "SGD momentum 0.9", "cpu_op_carrying_the_delta": "DataLoader.__next__ (dataset __getitem__)"}
    return kc.side_record("hostop", side, path, prof, unprof, config, {"memcpy_htod_per_step_min": 2, "streams_min": 1})


def _back_to_back_ms(call, calls: int) -> tuple[float, float]:
    """(wall ms, GPU ms) per call of `calls` calls issued back to back, synchronized only at the end."""
    torch = kc._torch()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    start.record()
    for _ in range(calls):
        call()
    end.record()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e3 / calls, start.elapsed_time(end) / calls


def _profile_back_to_back(call, path: Path, calls: int) -> dict[str, Any]:
    """Calls issued back to back under the profiler (no synchronize between them, so no host gap
    marks where one ends); the truth is the per-call mean of five unprofiled batches of as many
    calls, and of the profiled batch itself."""
    kc._torch()  # imported and checked once
    from torch.profiler import ProfilerActivity, profile

    batches = [_back_to_back_ms(call, calls) for _ in range(5)]
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True) as prof:
        profiled = _back_to_back_ms(call, calls)
    prof.export_chrome_trace(str(path))
    kc.ensure_gzip(path)
    return {"annotated": False, "calls": calls, "call_wall_ms": [round(w, 4) for w, _ in batches],
            "call_gpu_ms": [round(g, 4) for _, g in batches], "profiled_call_wall_ms": round(profiled[0], 4),
            "profiled_call_gpu_ms": round(profiled[1], 4),
            "timing": "per-call means of batches of `calls` calls issued back to back, synchronized at the end"}


def run_nogap(args, side: str, out: Path) -> dict[str, Any]:
    torch = kc._torch()
    n = args.nm_elems
    x = torch.zeros(n * (32 if side == "k1" else 1), device="cuda")
    launches = 32 if side == "k32" else 1

    def call() -> None:
        for _ in range(launches):
            x.add_(1.0)

    kc.timed_steps(call, 10)
    unprof = kc.timed_steps(call, 10)
    path = out / f"nogap-{side}.json.gz"
    rec = _profile_back_to_back(call, path, args.calls)
    rec["kernels_per_call"] = launches
    config = {"kernel": "x.add_(1.0) on a float32 vector", "elements": x.numel(), "launches_per_call": launches,
              "host_gap_us_busy_wait": 0.0}
    return kc.side_record("nogap", side, path, rec, unprof, config,
                          {"kernel_events": args.calls * launches, "profiler_steps": 0, "streams_min": 1})


def install() -> None:
    """Make kineto_capture's driver run this round's pairs (its dicts are the driver's tables)."""
    kc.PAIRS.clear()
    kc.PAIRS.update(ROUND4)
    kc.DESIGNED.update(DESIGNED)
    kc.TWO_PROCESSES.update({"ranks", "ranksnull"})
    kc.SCENARIOS.update(legacy=run_legacy, legacykineto=run_legacykineto, ranks=run_ranks, ranksnull=run_ranksnull,
                        hostop=run_hostop, nogap=run_nogap)
    kc.CALIBRATED.add("hostop")


if __name__ == "__main__":
    install()
    sys.exit(kc.main())
