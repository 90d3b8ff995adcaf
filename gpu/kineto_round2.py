#!/usr/bin/env python3
"""Round 2 of the Kineto test pairs: held out from `rootcause compare`'s tuning.

kineto_capture.py's pairs were in hand while the trace path was written; these were captured
after it, to be compared once at first sight (their results are recorded as first seen). The
same protocol and truth record as kineto_capture.py (which this script extends with its own
pairs; run it the same way, from the folder that holds both):

  graphs    eager / cudagraphs  inference of a small transformer stack (launch-bound), eager
                                against torch.compile(mode="reduce-overhead"): CUDA graphs
  adamw     loop / fused        MLP training step, AdamW(foreach=False) against AdamW(fused=True)
  sdpa      math / flash        scaled_dot_product_attention forward, bf16, the math backend
                                against FlashAttention
  channels  nchw / nhwc         ResNet-18 inference, bf16, contiguous against channels_last
  null2     a / b               the graphs pair's eager side, in two processes

Usage (on the GPU host):  python3 kineto_round2.py --all --out DIR
"""
from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import kineto_capture as kc

ROUND2 = {"graphs": ("eager", "cudagraphs"), "adamw": ("loop", "fused"), "sdpa": ("math", "flash"),
          "channels": ("nchw", "nhwc"), "null2": ("a", "b")}
DESIGNED = {"graphs": "b_faster", "adamw": "b_faster", "sdpa": "b_faster", "channels": "b_faster",
            "null2": "same"}


def small_transformer():
    torch = kc._torch()
    torch.manual_seed(0)
    d, heads, hidden, depth, b, t = 512, 8, 2048, 4, 4, 128
    model = kc.transformer(d, heads, hidden, depth, fused_ops=False).to("cuda", torch.bfloat16).eval()
    x = torch.randn(b, t, d, device="cuda", dtype=torch.bfloat16)
    config = {"model": f"{depth} pre-norm transformer blocks d={d} heads={heads} mlp={hidden}",
              "input": [b, t, d], "dtype": "bfloat16", "mode": "inference (no_grad)"}
    return model, x, config


def run_graphs(args, side: str, out: Path, pair: str = "graphs") -> dict[str, Any]:
    torch = kc._torch()
    model, x, config = small_transformer()
    fn = model
    if side == "cudagraphs":
        t0 = time.perf_counter()
        fn = torch.compile(model, mode="reduce-overhead")
        with torch.no_grad():
            for _ in range(3):  # reduce-overhead records its graph after warm-up calls
                fn(x)
        torch.cuda.synchronize()
        config.update(compile_s=round(time.perf_counter() - t0, 2),
                      compiler='torch.compile(mode="reduce-overhead"): inductor with CUDA graphs')

    def step() -> None:
        with torch.no_grad():
            fn(x)

    kc.timed_steps(step, 10)
    unprof = kc.timed_steps(step, 10)
    path = out / f"{pair}-{side}.json.gz"
    prof = kc.profile_steps(step, path, args.active)
    return kc.side_record(pair, side, path, prof, unprof, config, {"streams_min": 1})


def run_null2(args, side: str, out: Path) -> dict[str, Any]:
    rec = run_graphs(args, "eager", out, pair="null2")
    # the file is named after the side, so the two processes do not overwrite each other
    src = out / "null2-eager.json.gz"
    dst = out / f"null2-{side}.json.gz"
    src.replace(dst)
    rec.update(name=f"null2-{side}", side=side, file=dst.name)
    rec["config"]["note"] = "sides a and b are the same config, captured in two processes"
    return rec


def run_adamw(args, side: str, out: Path) -> dict[str, Any]:
    torch = kc._torch()
    torch.manual_seed(0)
    width, depth, b = 1024, 8, 256
    layers = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers, torch.nn.Linear(width, 10)).to("cuda")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, **({"fused": True} if side == "fused" else
                                                            {"foreach": False}))
    x = torch.randn(b, width, device="cuda")
    y = torch.randint(0, 10, (b,), device="cuda")
    step = kc.train_step_fn(model, opt, lambda: (x, y))
    kc.timed_steps(step, 5)
    unprof = kc.timed_steps(step, 5)
    path = out / f"adamw-{side}.json.gz"
    prof = kc.profile_steps(step, path, args.active)
    config = {"model": f"MLP {width}x{depth} + ReLU -> 10, fp32", "batch": b, "params": 2 * (depth + 1),
              "optimizer": "AdamW fused=True" if side == "fused" else "AdamW foreach=False (a loop over params)"}
    return kc.side_record("adamw", side, path, prof, unprof, config, {"streams_min": 1})


def run_sdpa(args, side: str, out: Path) -> dict[str, Any]:
    torch = kc._torch()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    torch.manual_seed(0)
    shape = (8, 16, 2048, 64)
    q, k, v = (torch.randn(shape, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    backend = SDPBackend.MATH if side == "math" else SDPBackend.FLASH_ATTENTION

    def step() -> None:
        with torch.no_grad(), sdpa_kernel(backend):
            torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)

    kc.timed_steps(step, 5)
    unprof = kc.timed_steps(step, 5)
    path = out / f"sdpa-{side}.json.gz"
    prof = kc.profile_steps(step, path, args.active)
    config = {"op": "scaled_dot_product_attention(is_causal=True), forward", "q_k_v": list(shape),
              "dtype": "bfloat16", "backend": str(backend)}
    return kc.side_record("sdpa", side, path, prof, unprof, config, {"streams_min": 1})


def run_channels(args, side: str, out: Path) -> dict[str, Any]:
    torch = kc._torch()
    torch.manual_seed(0)
    model, name = kc.resnet(1000)
    fmt = torch.channels_last if side == "nhwc" else torch.contiguous_format
    model = model.to("cuda", torch.bfloat16).eval().to(memory_format=fmt)
    x = torch.randn(64, 3, 224, 224, device="cuda", dtype=torch.bfloat16).to(memory_format=fmt)

    def step() -> None:
        with torch.no_grad():
            model(x)

    kc.timed_steps(step, 5)
    unprof = kc.timed_steps(step, 5)
    path = out / f"channels-{side}.json.gz"
    prof = kc.profile_steps(step, path, args.active)
    config = {"model": name, "batch": 64, "image": [3, 224, 224], "dtype": "bfloat16",
              "memory_format": "channels_last" if side == "nhwc" else "contiguous", "mode": "inference (no_grad)"}
    return kc.side_record("channels", side, path, prof, unprof, config, {"streams_min": 1})


def install() -> None:
    """Make kineto_capture's driver run this round's pairs (its dicts are the driver's tables)."""
    kc.PAIRS.clear()
    kc.PAIRS.update(ROUND2)
    kc.DESIGNED.update(DESIGNED)
    kc.TWO_PROCESSES.add("null2")
    kc.SCENARIOS.update(graphs=run_graphs, adamw=run_adamw, sdpa=run_sdpa, channels=run_channels,
                        null2=run_null2)


if __name__ == "__main__":
    install()
    sys.exit(kc.main())
