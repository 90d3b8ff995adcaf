#!/usr/bin/env python3
"""Round 3 of the Kineto test pairs: held out from `rootcause compare`'s tuning.

Captured on 2026-12-04, after the trace path and round 2, and compared once at first sight.
Each pair changes one setting a PyTorch user changes, so that the kernels of one op change
name or the host changes, not the model:

  tf32      off / on       fp32 matmul chain, torch.backends.cuda.matmul.allow_tf32 False against
                           True: the same aten::mm ops, other cuBLAS kernels (names differ)
  cudnn     default / benchmark
                           ResNet-18 fp32 inference, torch.backends.cudnn.benchmark False against
                           True: cuDNN picks each convolution's algorithm by timing them
  sync      async / synced small transformer inference; side b reads one value back after every
                           block (`.item()`, as a NaN check does): a device-to-host copy and a host
                           wait per block, so the GPU idles while the host launches the next block
  null3     a / b          ResNet-18 bf16 inference, the same config in two processes

Usage (on the GPU host, beside kineto_capture.py):  python3 kineto_round3.py --all --out DIR
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import kineto_capture as kc

ROUND3 = {"tf32": ("off", "on"), "cudnn": ("default", "benchmark"), "sync": ("async", "synced"),
          "null3": ("a", "b")}
DESIGNED = {"tf32": "b_faster", "cudnn": "b_faster", "sync": "b_slower", "null3": "same"}


def _profiled(pair: str, side: str, out: Path, args, step, config: dict[str, Any], warm: int = 5) -> dict[str, Any]:
    """Warm the step, time it unprofiled, profile it: the protocol of kineto_capture's pairs."""
    kc.timed_steps(step, warm)
    unprof = kc.timed_steps(step, 5)
    path = out / f"{pair}-{side}.json.gz"
    prof = kc.profile_steps(step, path, args.active)
    return kc.side_record(pair, side, path, prof, unprof, config, {"streams_min": 1})


def run_tf32(args, side: str, out: Path) -> dict[str, Any]:
    torch = kc._torch()
    torch.backends.cuda.matmul.allow_tf32 = side == "on"
    b, width, depth = 2048, 4096, 6
    ws, x = kc.matmul_chain(b, width, depth, torch.float32)

    def step() -> None:
        y = x
        for w in ws:
            y = torch.relu(y @ w)

    config = {"model": f"chain of {depth} ({b}x{width})@({width}x{width}) matmuls + ReLU", "dtype": "float32",
              "allow_tf32": side == "on"}
    return _profiled("tf32", side, out, args, step, config, warm=3)


def run_cudnn(args, side: str, out: Path) -> dict[str, Any]:
    torch = kc._torch()
    torch.backends.cudnn.benchmark = side == "benchmark"
    torch.backends.cudnn.allow_tf32 = False  # keep fp32 convolutions fp32: only the algorithm choice differs
    torch.manual_seed(0)
    model, name = kc.resnet(1000)
    model = model.to("cuda").eval()
    x = torch.randn(32, 3, 224, 224, device="cuda")

    def step() -> None:
        with torch.no_grad():
            model(x)

    config = {"model": name, "batch": 32, "image": [3, 224, 224], "dtype": "float32",
              "cudnn.benchmark": side == "benchmark", "cudnn.allow_tf32": False, "mode": "inference (no_grad)"}
    return _profiled("cudnn", side, out, args, step, config)


def run_sync(args, side: str, out: Path) -> dict[str, Any]:
    torch = kc._torch()
    torch.manual_seed(0)
    d, heads, hidden, depth, b, t = 512, 8, 2048, 8, 8, 256
    model = kc.transformer(d, heads, hidden, depth, fused_ops=False).to("cuda", torch.bfloat16).eval()
    x = torch.randn(b, t, d, device="cuda", dtype=torch.bfloat16)
    blocks = list(model)  # kineto_capture.transformer: an nn.Sequential of blocks

    def step() -> None:
        with torch.no_grad():
            y = x
            for block in blocks:
                y = block(y)
                if side == "synced" and torch.isnan(y).any().item():  # a NaN check after every block
                    raise FloatingPointError("NaN")

    config = {"model": f"{depth} pre-norm transformer blocks d={d} heads={heads} mlp={hidden}",
              "input": [b, t, d], "dtype": "bfloat16", "mode": "inference (no_grad)",
              "check": "torch.isnan(y).any().item() after every block" if side == "synced" else "none"}
    return _profiled("sync", side, out, args, step, config)


def run_null3(args, side: str, out: Path) -> dict[str, Any]:
    torch = kc._torch()
    torch.manual_seed(0)
    model, name = kc.resnet(1000)
    model = model.to("cuda", torch.bfloat16).eval()
    x = torch.randn(64, 3, 224, 224, device="cuda", dtype=torch.bfloat16)

    def step() -> None:
        with torch.no_grad():
            model(x)

    config = {"model": name, "batch": 64, "image": [3, 224, 224], "dtype": "bfloat16", "mode": "inference (no_grad)",
              "note": "sides a and b are the same config, captured in two processes"}
    return _profiled("null3", side, out, args, step, config)


def install() -> None:
    """Make kineto_capture's driver run this round's pairs (its dicts are the driver's tables)."""
    kc.PAIRS.clear()
    kc.PAIRS.update(ROUND3)
    kc.DESIGNED.update(DESIGNED)
    kc.TWO_PROCESSES.add("null3")
    kc.SCENARIOS.update(tf32=run_tf32, cudnn=run_cudnn, sync=run_sync, null3=run_null3)


if __name__ == "__main__":
    install()
    sys.exit(kc.main())
