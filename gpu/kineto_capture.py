#!/usr/bin/env python3
"""Capture real Kineto (Chrome-trace) profiles of small PyTorch workloads, in pairs, with an
independent record of how long each profiled step took.

Issue 12's test data: each pair is two `.json.gz` traces written by torch.profiler's
export_chrome_trace (gzip as published), named PAIR-SIDE.json.gz, and `truth.json` beside them
holds what this script measured itself, never read back from a trace: the wall time of every
profiled step (torch.cuda.synchronize() + time.perf_counter() around the step), the number of
steps, the ProfilerStep#N names those steps get, the copies and memsets each step was built to
issue, and per pair the direction and ratio of the median step times.

Pairs (side a, side b; one process per pair, except the null pairs, whose sides run in two):
  dataloader  w0 / w4        ResNet training step, the batch drawn from a DataLoader over a
                             synthetic dataset whose __getitem__ does real CPU work (FFT
                             filtering), num_workers 0 against 4: host-bound difference
  compile     eager / inductor  inference of a stack of transformer blocks, eager against
                             torch.compile (default mode); if compiling fails, side b is an
                             eager variant with fused library ops (eagerfused), and the error
                             is logged and recorded
  streams     single / multi  MLP training step with a pinned H2D batch copy and a weight EMA:
                             all on the default stream, against the copy on a side stream
                             (prefetching the next batch) and the EMA on a third stream
  copies      base / extra   bf16 matmul chain, against the same chain plus transposing
                             .contiguous() copies, clone() device-to-device memcpys and a
                             cuMemsetD8Async per layer: a GPU-side regression made of copies
  precision   bf16 / fp32    the same matmul chain in bf16 against fp32 with TF32 disabled
  null        a / b          the same GPU-bound ResNet training config (batch 512, 128x128),
                             captured in two processes
  nullhost    a / b          the same host-bound ResNet training config (batch 64, 64x64: the
                             profiler's per-op CPU cost sets the step time), in two processes
  nomarker    fast / slow    no schedule, no prof.step(): K calls of a CUDA graph that
                             launches one small elementwise kernel 32 times, with host gaps
                             between calls; the slow side runs the same graph on 32x the
                             elements
  nomarkerhost fast / slow   the same without a graph: 32 launches from Python per call, so
                             there are host gaps inside a call too

Usage (on the GPU host):
  python3 kineto_capture.py --all --out DIR          # every pair, one subprocess per job
  python3 kineto_capture.py --pair copies --out DIR  # one pair in this process
"""
from __future__ import annotations

import argparse
import ctypes
import datetime
import gzip
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable

PAIRS: dict[str, tuple[str, str]] = {
    "dataloader": ("w0", "w4"),
    "compile": ("eager", "inductor"),
    "streams": ("single", "multi"),
    "copies": ("base", "extra"),
    "precision": ("bf16", "fp32"),
    "null": ("a", "b"),
    "nullhost": ("a", "b"),
    "nomarker": ("fast", "slow"),
    "nomarkerhost": ("fast", "slow"),
}
# What each pair is built to show, as the direction of side b against side a.
DESIGNED = {
    "dataloader": "b_faster",
    "compile": "b_faster",
    "streams": "b_faster",
    "copies": "b_slower",
    "precision": "b_slower",
    "null": "same",
    "nullhost": "same",
    "nomarker": "b_slower",
    "nomarkerhost": "b_slower",
}
# Side order inside one process. dataloader runs w4 first so that its workers fork before
# any profiler session has started in the process.
SIDE_ORDER = {"dataloader": ("w4", "w0")}
TWO_PROCESSES = {"null", "nullhost"}  # pairs whose sides run in two processes
CALL_PAIRS = {"nogap"}  # pairs timed per call (call_wall_ms), like the nomarker ones
CALIBRATED = {"dataloader"}  # pairs whose dataset work is calibrated to --item-ms first
SAME_BAND = 1.05  # a ratio within [1/1.05, 1.05] is called "same"
KERNELS_PER_CALL = 32


def log(msg: str) -> None:
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%H:%M:%S")
    print(f"[{stamp}] {msg}", flush=True)


def median(xs: list[float]) -> float:
    return statistics.median(xs)


def direction(ratio: float) -> str:
    """Direction of side b against side a from the ratio of median step times (b / a)."""
    if ratio > SAME_BAND:
        return "b_slower"
    if ratio < 1 / SAME_BAND:
        return "b_faster"
    return "same"


def pair_truth(pair: str, a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Expected verdict for one pair from the two sides' own timings."""
    calls = pair.startswith("nomarker") or pair in CALL_PAIRS
    key = "call_wall_ms" if calls else "step_wall_ms"
    ma, mb = median(a[key]), median(b[key])
    ratio = mb / ma
    out = {
        "a": a["name"],
        "b": b["name"],
        "unit": "call" if calls else "step",
        "median_ms_a": round(ma, 4),
        "median_ms_b": round(mb, 4),
        "ratio_b_over_a": round(ratio, 4),
        "direction": direction(ratio),
        "designed_direction": DESIGNED[pair],
        "same_process": a["pid"] == b["pid"],
    }
    if calls:
        ga, gb = median(a["call_gpu_ms"]), median(b["call_gpu_ms"])
        out["median_gpu_ms_a"] = round(ga, 4)
        out["median_gpu_ms_b"] = round(gb, 4)
        out["gpu_ratio_b_over_a"] = round(gb / ga, 4)
    out["agrees_with_design"] = out["direction"] == out["designed_direction"]
    return out


# --------------------------------------------------------------------------- torch helpers
# torch is imported lazily so that --help and the merge step run where it is not installed.

def _torch():
    import torch

    return torch


def busy_wait_us(us: float) -> None:
    """Spin rather than sleep: sleep's granularity is far coarser than the gaps wanted."""
    end = time.perf_counter() + us * 1e-6
    while time.perf_counter() < end:
        pass


def timed_steps(step: Callable[[], None], n: int) -> list[float]:
    """Wall ms of n unprofiled steps (also the warm-up)."""
    torch = _torch()
    out = []
    torch.cuda.synchronize()
    for _ in range(n):
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        out.append((time.perf_counter() - t0) * 1e3)
    return out


def profile_steps(step: Callable[[], None], path: Path, active: int) -> dict[str, Any]:
    """Profile wait=1, warmup=1, active=N steps with prof.step() after each, exporting the
    trace when the active phase ends; each step's wall time is taken here, around the step,
    so the ProfilerStep#N spans can be checked against it."""
    torch = _torch()
    from torch.profiler import ProfilerActivity, profile, schedule

    saved: list[str] = []

    def ready(prof) -> None:
        prof.export_chrome_trace(str(path))
        saved.append(str(path))

    walls = []
    torch.cuda.synchronize()
    with profile(
        activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
        schedule=schedule(wait=1, warmup=1, active=active, repeat=1),
        record_shapes=True,
        on_trace_ready=ready,
    ) as prof:
        for _ in range(active + 2):
            t0 = time.perf_counter()
            step()
            torch.cuda.synchronize()
            walls.append((time.perf_counter() - t0) * 1e3)
            prof.step()
    if not saved:
        raise RuntimeError(f"{path}: the profiler never reported the trace ready")
    ensure_gzip(path)
    return {
        "annotated": True,
        "steps": active,
        "step_wall_ms": [round(w, 4) for w in walls[2:]],
        "profiler_steps": [f"ProfilerStep#{i}" for i in range(2, active + 2)],
        "skipped_wall_ms": [round(w, 4) for w in walls[:2]],
    }


_LIBCUDA = None


def memset_async(t) -> None:
    """cuMemsetD8Async on the tensor's bytes, on the current stream: a real memset
    activity (PyTorch's own zero_() is a fill kernel, not a memset)."""
    global _LIBCUDA
    torch = _torch()
    if _LIBCUDA is None:
        lib = ctypes.CDLL("libcuda.so.1")
        lib.cuMemsetD8Async.argtypes = [ctypes.c_uint64, ctypes.c_ubyte, ctypes.c_size_t,
                                        ctypes.c_void_p]
        lib.cuMemsetD8Async.restype = ctypes.c_int
        _LIBCUDA = lib
    stream = torch.cuda.current_stream().cuda_stream
    rc = _LIBCUDA.cuMemsetD8Async(t.data_ptr(), 0, t.numel() * t.element_size(), stream or None)
    if rc != 0:
        raise RuntimeError(f"cuMemsetD8Async returned CUresult {rc}")


def trace_counts(path: Path) -> dict[str, int]:
    """Event counts by category of a written trace: a sanity line for the log only (the truth
    never comes from here)."""
    with gzip.open(path, "rt") as f:
        doc = json.load(f)
    counts: dict[str, int] = {}
    for e in doc.get("traceEvents", []):
        if e.get("ph") != "X":
            continue
        cat = e.get("cat", "?")
        keys = [cat] + ([f"{cat}:{e.get('name')}"] if cat in ("gpu_memcpy", "gpu_memset") else [])
        for key in keys:
            counts[key] = counts.get(key, 0) + 1
    return counts


def ensure_gzip(path: Path) -> None:
    """export_chrome_trace gzips a path ending in .gz; make sure, so the file is as published."""
    with open(path, "rb") as f:
        magic = f.read(2)
    if magic != b"\x1f\x8b":
        log(f"{path.name}: export wrote plain JSON; gzipping it here")
        data = path.read_bytes()
        with gzip.open(path, "wb") as f:
            f.write(data)


# --------------------------------------------------------------------------- models

def resnet(num_classes: int = 10):
    """torchvision's resnet18 (random weights, nothing downloaded), or a small ResNet-like
    stack when torchvision is missing."""
    torch = _torch()
    nn = torch.nn
    try:
        import torchvision

        return torchvision.models.resnet18(weights=None, num_classes=num_classes), "torchvision.resnet18"
    except Exception as exc:  # noqa: BLE001 - any import failure means: use our own
        log(f"torchvision resnet18 unavailable ({exc!r}); using the in-script ResNet")

    class Basic(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int):
            super().__init__()
            self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.b1 = nn.BatchNorm2d(cout)
            self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.b2 = nn.BatchNorm2d(cout)
            self.skip = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                       nn.BatchNorm2d(cout))
                         if stride != 1 or cin != cout else nn.Identity())

        def forward(self, x):
            y = torch.relu(self.b1(self.c1(x)))
            return torch.relu(self.b2(self.c2(y)) + self.skip(x))

    layers = [nn.Conv2d(3, 64, 3, 1, 1, bias=False), nn.BatchNorm2d(64), nn.ReLU()]
    for cin, cout, s in [(64, 64, 1), (64, 128, 2), (128, 256, 2), (256, 512, 2)]:
        layers += [Basic(cin, cout, s), Basic(cout, cout, 1)]
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, num_classes)]
    return nn.Sequential(*layers), "in-script ResNet-18-like"


def train_step_fn(model, opt, batch: Callable[[], tuple[Any, Any]]) -> Callable[[], None]:
    torch = _torch()
    F = torch.nn.functional

    def step() -> None:
        x, y = batch()
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()

    return step


class FFTImages:
    """Synthetic images, each made by `iters` rounds of FFT low-pass filtering of seeded noise
    on the CPU: a dataset whose loading costs real host time."""

    def __init__(self, n: int, size: int, iters: int):
        import numpy as np

        self.n, self.size, self.iters = n, size, iters
        fy = np.fft.fftfreq(size)[:, None]
        fx = np.fft.rfftfreq(size)[None, :]
        self.filt = np.exp(-(fy ** 2 + fx ** 2) * 40.0).astype(np.float32)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, idx: int):
        import numpy as np
        torch = _torch()

        rng = np.random.default_rng(idx)
        img = rng.standard_normal((3, self.size, self.size), dtype=np.float32)
        for _ in range(self.iters):
            img = np.fft.irfft2(np.fft.rfft2(img) * self.filt, s=img.shape[-2:]).astype(np.float32)
        img = (img - img.mean()) / (img.std() + 1e-6)
        return torch.from_numpy(np.ascontiguousarray(img)), idx % 10


def calibrate_iters(size: int, item_ms: float) -> tuple[int, float]:
    """FFT rounds per item for about item_ms of CPU work, and the measured ms per item."""
    probe = FFTImages(64, size, 1)
    probe[0]
    t0 = time.perf_counter()
    for i in range(16):
        probe[i]
    per_round = (time.perf_counter() - t0) * 1e3 / 16
    iters = max(1, round(item_ms / per_round))
    ds = FFTImages(64, size, iters)
    t0 = time.perf_counter()
    for i in range(16):
        ds[i]
    return iters, (time.perf_counter() - t0) * 1e3 / 16


def rms_norm(x, w, eps: float = 1e-6):
    torch = _torch()
    return (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * w


def tanh_gelu(x):
    """GELU (tanh form) written out: several elementwise kernels in eager, one when fused."""
    torch = _torch()
    return 0.5 * x * (1.0 + torch.tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))


def transformer(d: int, heads: int, hidden: int, depth: int, fused_ops: bool):
    """A pre-norm transformer stack (RMSNorm, causal SDPA attention, tanh-GELU MLP).
    fused_ops=True uses the library's fused norm and GELU instead of the written-out ones."""
    torch = _torch()
    nn, F = torch.nn, torch.nn.functional

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = nn.Linear(d, 3 * d)
            self.proj = nn.Linear(d, d)
            self.fc1 = nn.Linear(d, hidden)
            self.fc2 = nn.Linear(hidden, d)
            self.n1 = nn.Parameter(torch.ones(d))
            self.n2 = nn.Parameter(torch.ones(d))

        def norm(self, x, w):
            return F.rms_norm(x, (d,), w, 1e-6) if fused_ops else rms_norm(x, w)

        def act(self, x):
            return F.gelu(x, approximate="tanh") if fused_ops else tanh_gelu(x)

        def forward(self, x):
            b, t, _ = x.shape
            q, k, v = self.qkv(self.norm(x, self.n1)).view(b, t, 3, heads, d // heads) \
                .permute(2, 0, 3, 1, 4).unbind(0)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
            return x + self.fc2(self.act(self.fc1(self.norm(x, self.n2))))

    return nn.Sequential(*[Block() for _ in range(depth)])


# --------------------------------------------------------------------------- scenarios
# Each scenario function runs one side: builds it, warms it, times unprofiled steps, profiles,
# and returns that side's truth record.

def side_record(pair: str, side: str, path: Path, prof: dict[str, Any], unprof: list[float],
                config: dict[str, Any], expect: dict[str, Any]) -> dict[str, Any]:
    rec = {"name": f"{pair}-{side}", "pair": pair, "side": side, "file": path.name,
           "pid": os.getpid(), "config": config, "expect": expect,
           "unprofiled_step_wall_ms": [round(w, 4) for w in unprof]}
    rec.update(prof)
    log(f"{rec['name']}: median profiled step {median(rec.get('step_wall_ms') or rec['call_wall_ms']):.3f} ms "
        f"(unprofiled {median(unprof):.3f} ms); {path.stat().st_size} bytes; "
        f"events {trace_counts(path)}")
    return rec


def run_dataloader(args, side: str, out: Path) -> dict[str, Any]:
    torch = _torch()
    workers = int(side[1:])
    dev = torch.device("cuda")
    torch.manual_seed(0)
    model, model_name = resnet()
    model = model.to(dev).train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    iters, item_ms = args.dl_calib
    ds = FFTImages(4096, args.dl_size, iters)
    loader = torch.utils.data.DataLoader(ds, batch_size=args.dl_batch, shuffle=False,
                                         num_workers=workers, drop_last=True)
    live = [iter(loader)]  # cleared after profiling: the workers shut down

    def batch():
        x, y = next(live[0])
        return x.to(dev), y.to(dev)

    step = train_step_fn(model, opt, batch)
    # enough untimed batches that the workers' prefetch queue is drained: steady state
    timed_steps(step, 4 * max(workers, 1) + 4)
    unprof = timed_steps(step, 4)
    path = out / f"dataloader-{side}.json.gz"
    prof = profile_steps(step, path, args.active)
    live.clear()
    config = {"model": model_name, "batch": args.dl_batch, "image": [3, args.dl_size, args.dl_size],
              "num_workers": workers, "fft_rounds_per_item": iters,
              "item_cpu_ms_measured": round(item_ms, 4), "optimizer": "SGD momentum 0.9",
              "data_loading_inside_step": True}
    expect = {"memcpy_htod_per_step_min": 2, "streams_min": 1}
    return side_record("dataloader", side, path, prof, unprof, config, expect)


def run_compile(args, side: str, out: Path) -> dict[str, Any]:
    torch = _torch()
    dev = torch.device("cuda")
    torch.manual_seed(0)
    d, heads, hidden, depth, b, t = 1024, 16, 4096, 4, 8, 512
    model = transformer(d, heads, hidden, depth, fused_ops=False).to(dev, torch.bfloat16).eval()
    x = torch.randn(b, t, d, device=dev, dtype=torch.bfloat16)
    config = {"model": f"{depth} pre-norm transformer blocks d={d} heads={heads} mlp={hidden}",
              "input": [b, t, d], "dtype": "bfloat16", "mode": "inference (no_grad)"}
    fn = model
    if side == "inductor":
        try:
            t0 = time.perf_counter()
            fn = torch.compile(model)
            with torch.no_grad():
                fn(x)
            torch.cuda.synchronize()
            config["compile_s"] = round(time.perf_counter() - t0, 2)
            config["compiler"] = "torch.compile (default mode, inductor)"
        except Exception as exc:  # noqa: BLE001 - recorded, then the eager variant stands in
            log("torch.compile FAILED; capturing the eager fused-ops variant instead:\n"
                + traceback.format_exc())
            side = "eagerfused"
            config["compile_error"] = f"{type(exc).__name__}: {exc}"[:2000]
            config["substituted"] = "eager with F.rms_norm and F.gelu(tanh) instead of torch.compile"
            fn = transformer(d, heads, hidden, depth, fused_ops=True).to(dev, torch.bfloat16).eval()
            fn.load_state_dict(model.state_dict())

    def step() -> None:
        with torch.no_grad():
            fn(x)

    timed_steps(step, 5)
    unprof = timed_steps(step, 5)
    path = out / f"compile-{side}.json.gz"
    prof = profile_steps(step, path, args.active)
    return side_record("compile", side, path, prof, unprof, config, {"streams_min": 1})


def run_streams(args, side: str, out: Path) -> dict[str, Any]:
    torch = _torch()
    torch.backends.cuda.matmul.allow_tf32 = True
    dev = torch.device("cuda")
    torch.manual_seed(0)
    fin, width, depth, b = 4096, 2048, 6, 8192
    layers = [torch.nn.Linear(fin, width), torch.nn.ReLU()]
    for _ in range(depth - 1):
        layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    layers += [torch.nn.Linear(width, 1)]
    model = torch.nn.Sequential(*layers).to(dev)
    params = list(model.parameters())
    ema = [p.detach().clone() for p in params]
    opt = torch.optim.SGD(params, lr=1e-4, momentum=0.9, foreach=True)
    host_x = [torch.randn(b, fin).pin_memory() for _ in range(2)]
    host_y = [torch.randn(b, 1).pin_memory() for _ in range(2)]
    main = torch.cuda.current_stream()
    copy_s = torch.cuda.Stream() if side == "multi" else main
    ema_s = torch.cuda.Stream() if side == "multi" else main
    state = {"i": 0, "next": None}

    def fetch(i: int):
        with torch.cuda.stream(copy_s):
            return (host_x[i % 2].to(dev, non_blocking=True),
                    host_y[i % 2].to(dev, non_blocking=True))

    def step() -> None:
        i = state["i"]
        if side == "multi":
            if state["next"] is None:
                state["next"] = fetch(i)
            main.wait_stream(copy_s)
            x, y = state["next"]
            x.record_stream(main)
            y.record_stream(main)
            state["next"] = fetch(i + 1)  # overlaps this step's compute
        else:
            x, y = fetch(i)
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        main.wait_stream(ema_s)  # the EMA of the last step read the weights we now update
        opt.step()
        ema_s.wait_stream(main)
        with torch.cuda.stream(ema_s):
            torch._foreach_lerp_(ema, [p.detach() for p in params], 0.01)
        state["i"] = i + 1

    timed_steps(step, 5)
    unprof = timed_steps(step, 5)
    path = out / f"streams-{side}.json.gz"
    prof = profile_steps(step, path, args.active)
    config = {"model": f"MLP {fin}->{width}x{depth}->1, ReLU, fp32 with TF32 matmuls",
              "batch": b, "h2d_bytes_per_step": b * (fin + 1) * 4, "pinned": True,
              "non_blocking": True,
              "copy_stream": "side stream, prefetching the next batch" if side == "multi" else "default",
              "ema_stream": "third stream" if side == "multi" else "default",
              "optimizer": "SGD momentum 0.9 (foreach)"}
    expect = {"memcpy_htod_per_step_min": 2, "streams_min": 3} if side == "multi" else \
        {"memcpy_htod_per_step_min": 2, "streams_min": 1, "streams_max": 1}
    return side_record("streams", side, path, prof, unprof, config, expect)


def matmul_chain(b: int, width: int, depth: int, dtype):
    torch = _torch()
    dev = torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(0)
    ws = [torch.randn(width, width, device=dev, dtype=dtype, generator=g) / math.sqrt(width)
          for _ in range(depth)]
    x = torch.randn(b, width, device=dev, dtype=dtype, generator=g)
    return ws, x


def run_copies(args, side: str, out: Path) -> dict[str, Any]:
    torch = _torch()
    b, width, depth, clones = 8192, 2048, 8, 4
    ws, x = matmul_chain(b, width, depth, torch.bfloat16)
    scratch = torch.empty(16 << 20, dtype=torch.uint8, device="cuda")
    extra = side == "extra"

    def step() -> None:
        y = x
        for w in ws:
            y = torch.relu(y @ w)
            if extra:
                y = y.t().contiguous().t().contiguous()  # two transposing copy kernels
                for _ in range(clones):
                    y = y.clone()  # contiguous, same dtype: cudaMemcpyAsync DtoD
                memset_async(scratch)

    timed_steps(step, 5)
    unprof = timed_steps(step, 5)
    path = out / f"copies-{side}.json.gz"
    prof = profile_steps(step, path, args.active)
    config = {"model": f"bf16 chain of {depth} ({b}x{width})@({width}x{width}) matmuls + ReLU",
              "extra_per_layer": (f"2 transposing .contiguous() copies, {clones} clone() DtoD "
                                  f"memcpys of {b * width * 2} bytes, one cuMemsetD8Async of "
                                  f"{scratch.numel()} bytes") if extra else None}
    # cuBLAS issues memsets of its own (the same on both sides); memset_issued_per_step counts
    # only ours, so extra has exactly that many more per step than base.
    expect = {"memcpy_dtod_per_step": depth * clones if extra else 0,
              "memset_issued_per_step": depth if extra else 0, "streams_min": 1}
    return side_record("copies", side, path, prof, unprof, config, expect)


def run_precision(args, side: str, out: Path) -> dict[str, Any]:
    torch = _torch()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    b, width, depth = 4096, 4096, 8
    dtype = torch.bfloat16 if side == "bf16" else torch.float32
    ws, x = matmul_chain(b, width, depth, dtype)

    def step() -> None:
        y = x
        for w in ws:
            y = torch.relu(y @ w)

    timed_steps(step, 3)
    unprof = timed_steps(step, 5)
    path = out / f"precision-{side}.json.gz"
    prof = profile_steps(step, path, args.active)
    config = {"model": f"chain of {depth} ({b}x{width})@({width}x{width}) matmuls + ReLU",
              "dtype": str(dtype), "tf32": False,
              "flop_per_step": 2 * b * width * width * depth}
    return side_record("precision", side, path, prof, unprof, config, {"streams_min": 1})


def resnet_resident(pair: str, side: str, out: Path, active: int, batch: int, size: int,
                    note: str) -> dict[str, Any]:
    """ResNet training on a GPU-resident synthetic batch (the null pairs)."""
    torch = _torch()
    dev = torch.device("cuda")
    torch.manual_seed(0)
    model, model_name = resnet()
    model = model.to(dev).train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(batch, 3, size, size, device=dev)
    y = torch.randint(0, 10, (batch,), device=dev)
    step = train_step_fn(model, opt, lambda: (x, y))
    timed_steps(step, 5)
    unprof = timed_steps(step, 5)
    path = out / f"{pair}-{side}.json.gz"
    prof = profile_steps(step, path, active)
    config = {"model": model_name, "batch": batch, "image": [3, size, size],
              "data": "GPU-resident synthetic batch", "optimizer": "SGD momentum 0.9",
              "note": note}
    return side_record(pair, side, path, prof, unprof, config, {"streams_min": 1})


def run_null(args, side: str, out: Path) -> dict[str, Any]:
    return resnet_resident("null", side, out, args.active, 512, 128,
                           "GPU-bound; sides a and b are the same config, in two processes")


def run_nullhost(args, side: str, out: Path) -> dict[str, Any]:
    return resnet_resident("nullhost", side, out, args.active, 64, 64,
                           "host-bound under the profiler (its per-op CPU cost sets the step); "
                           "sides a and b are the same config, in two processes")


def graph_of_adds(x):
    """A CUDA graph of KERNELS_PER_CALL in-place adds on x (warmed on a side stream first, as
    graph capture asks)."""
    torch = _torch()
    graph = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            x.add_(1.0)
    torch.cuda.current_stream().wait_stream(s)
    with torch.cuda.graph(graph):
        for _ in range(KERNELS_PER_CALL):
            x.add_(1.0)
    return graph


def profile_calls(call: Callable[[], None], path: Path, calls: int, gap_us: float) -> dict[str, Any]:
    """Profile `calls` calls with no schedule and no prof.step(), so the trace has no
    ProfilerStep annotations; each call's wall (perf_counter around launch + synchronize) and
    GPU time (CUDA events around the launch) are taken here. A host gap follows each call."""
    torch = _torch()
    from torch.profiler import ProfilerActivity, profile

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    walls, gpus = [], []
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True) as prof:
        for _ in range(calls):
            t0 = time.perf_counter()
            start.record()
            call()
            end.record()
            torch.cuda.synchronize()
            walls.append((time.perf_counter() - t0) * 1e3)
            gpus.append(start.elapsed_time(end))
            busy_wait_us(gap_us)
    prof.export_chrome_trace(str(path))
    ensure_gzip(path)
    return {"annotated": False, "calls": calls, "kernels_per_call": KERNELS_PER_CALL,
            "call_wall_ms": [round(w, 4) for w in walls],
            "call_gpu_ms": [round(g, 4) for g in gpus]}


def run_nomarker(args, side: str, out: Path, pair: str = "nomarker",
                 modes: tuple[str, ...] = ("cuda_graph", "eager")) -> dict[str, Any]:
    """CUDA graph replays first; if graph capture fails or the trace holds fewer kernel events
    than were launched (profilers can under-record graph replays), plain launches instead."""
    torch = _torch()
    n = args.nm_elems * (32 if side == "slow" else 1)
    x = torch.zeros(n, device="cuda")
    path = out / f"{pair}-{side}.json.gz"
    rec = None
    for launch in modes:
        try:
            if launch == "cuda_graph":
                call = graph_of_adds(x).replay
            else:
                def call() -> None:
                    for _ in range(KERNELS_PER_CALL):
                        x.add_(1.0)
            timed_steps(call, 10)
            unprof = timed_steps(call, 10)
            rec = profile_calls(call, path, args.calls, args.nm_gap_us)
        except Exception:  # noqa: BLE001 - logged; the next launch mode stands in
            log(f"{pair}-{side} with {launch} FAILED:\n" + traceback.format_exc())
            continue
        kernels = trace_counts(path).get("kernel", 0)
        if kernels >= args.calls * KERNELS_PER_CALL:
            break
        log(f"{pair}-{side}: {launch} gave {kernels} kernel events for "
            f"{args.calls * KERNELS_PER_CALL} launched")
    if rec is None:
        raise RuntimeError(f"{pair}-{side}: no launch mode produced a trace")
    config = {"kernel": "x.add_(1.0) on a float32 vector", "elements": n, "launch": launch,
              "host_gap_us_busy_wait": args.nm_gap_us,
              "timing": "call_wall_ms: perf_counter around event record, launch, event record, "
                        "synchronize; call_gpu_ms: CUDA events around the launch"}
    expect = {"kernel_events": args.calls * KERNELS_PER_CALL, "profiler_steps": 0, "streams_min": 1}
    return side_record(pair, side, path, rec, unprof, config, expect)


def run_nomarkerhost(args, side: str, out: Path) -> dict[str, Any]:
    return run_nomarker(args, side, out, "nomarkerhost", ("eager",))


SCENARIOS: dict[str, Callable[[Any, str, Path], dict[str, Any]]] = {
    "dataloader": run_dataloader,
    "compile": run_compile,
    "streams": run_streams,
    "copies": run_copies,
    "precision": run_precision,
    "null": run_null,
    "nullhost": run_nullhost,
    "nomarker": run_nomarker,
    "nomarkerhost": run_nomarkerhost,
}


# --------------------------------------------------------------------------- driver

def run_pair(args) -> int:
    """Run the named sides of one pair in this process; write one truth fragment per side."""
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.pair in CALIBRATED:
        args.dl_calib = calibrate_iters(args.dl_size, args.item_ms)
        log(f"{args.pair}: {args.dl_calib[0]} FFT rounds per item, {args.dl_calib[1]:.3f} ms per item")
    sides = args.sides.split(",") if args.sides else list(SIDE_ORDER.get(args.pair, PAIRS[args.pair]))
    status = 0
    for side in sides:
        try:
            rec = SCENARIOS[args.pair](args, side, out)
        except Exception:  # noqa: BLE001 - one failed side must not lose the others
            log(f"{args.pair}-{side} FAILED:\n" + traceback.format_exc())
            status = 1
            continue
        (out / f"truth-{args.pair}-{rec['side']}.part.json").write_text(json.dumps(rec, indent=1))
    return status


def environment() -> dict[str, Any]:
    torch = _torch()
    env: dict[str, Any] = {
        "captured_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
        "device_name": torch.cuda.get_device_name(0),
        "capability": list(torch.cuda.get_device_capability(0)),
    }
    try:
        import torchvision

        env["torchvision"] = torchvision.__version__
    except Exception as exc:  # noqa: BLE001
        env["torchvision"] = f"unavailable: {exc!r}"
    try:
        import triton

        env["triton"] = triton.__version__
    except Exception as exc:  # noqa: BLE001
        env["triton"] = f"unavailable: {exc!r}"
    try:
        q = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                            "--format=csv,noheader"], capture_output=True, text=True, timeout=30)
        env["nvidia_smi_query"] = q.stdout.strip()
    except Exception as exc:  # noqa: BLE001
        env["nvidia_smi_query"] = f"failed: {exc!r}"
    return env


def merge(out: Path, argv: list[str], env: dict[str, Any], pairs_run: list[str]) -> dict[str, Any]:
    """Gather the per-side fragments into truth.json, with each pair's expected verdict."""
    sides = {}
    for part in sorted(out.glob("truth-*.part.json")):
        rec = json.loads(part.read_text())
        sides[rec["name"]] = rec
        part.unlink()
    pairs = {}
    for pair in pairs_run:
        got = [r for r in sides.values() if r["pair"] == pair]
        a = [r for r in got if r["side"] == PAIRS[pair][0]]
        b = [r for r in got if r["side"] != PAIRS[pair][0]]
        if a and b:
            pairs[pair] = pair_truth(pair, a[0], b[0])
        else:
            pairs[pair] = {"missing": sorted(r["name"] for r in got)}
    truth = {
        "about": "Ground truth measured by gpu/kineto_capture.py around each profiled step "
                 "(torch.cuda.synchronize + time.perf_counter), not read from the traces.",
        "command": " ".join(argv),
        "environment": env,
        "same_band": SAME_BAND,
        "traces": sides,
        "pairs": pairs,
    }
    (out / "truth.json").write_text(json.dumps(truth, indent=1) + "\n")
    return truth


def run_all(args) -> int:
    """One subprocess per pair (two for each null pair), then merge."""
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    env = environment()
    log("environment: " + json.dumps(env))
    (out / "env.json").write_text(json.dumps(env, indent=1) + "\n")
    jobs = []
    for pair in (args.only.split(",") if args.only else PAIRS):
        if pair in TWO_PROCESSES:
            jobs += [(pair, side) for side in PAIRS[pair]]
        else:
            jobs.append((pair, None))
    status = 0
    for pair, side in jobs:
        # the script that was started: a suite that adds pairs (kineto_round2.py) runs its own
        cmd = [sys.executable, os.path.abspath(sys.argv[0]), "--pair", pair, "--out", str(out),
               "--active", str(args.active), "--calls", str(args.calls),
               "--item-ms", str(args.item_ms)]
        if side:
            cmd += ["--sides", side]
        log("run: " + " ".join(cmd))
        t0 = time.perf_counter()
        try:
            rc = subprocess.run(cmd, timeout=args.job_timeout_s).returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
        log(f"{pair}{'-' + side if side else ''}: exit {rc} after {time.perf_counter() - t0:.1f} s")
        status = status or (rc != 0)
    truth = merge(out, sys.argv, env, args.only.split(",") if args.only else list(PAIRS))
    for name, p in truth["pairs"].items():
        log(f"pair {name}: {json.dumps(p)}")
    return int(status)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--all", action="store_true", help="every pair, one subprocess per job")
    what.add_argument("--pair", choices=sorted(PAIRS), help="one pair, in this process")
    p.add_argument("--sides", help="comma-separated sides of --pair (default: both)")
    p.add_argument("--only", help="with --all: comma-separated pairs to run")
    p.add_argument("--out", required=True, help="folder for the traces and truth.json")
    p.add_argument("--active", type=int, default=8, help="profiled (active) steps per trace")
    p.add_argument("--calls", type=int, default=20, help="profiled calls per nomarker trace")
    p.add_argument("--item-ms", type=float, default=1.5,
                   help="target CPU ms of one dataset item's __getitem__ (dataloader pair)")
    p.add_argument("--dl-batch", type=int, default=32)
    p.add_argument("--dl-size", type=int, default=64, help="image side (dataloader pair)")
    p.add_argument("--nm-elems", type=int, default=1 << 18,
                   help="elements of the fast nomarker vector (slow: 32x)")
    p.add_argument("--nm-gap-us", type=float, default=20.0, help="host gap between nomarker calls")
    p.add_argument("--job-timeout-s", type=int, default=240)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    return run_all(args) if args.all else run_pair(args)


if __name__ == "__main__":
    sys.exit(main())
