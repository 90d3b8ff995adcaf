#!/usr/bin/env python3
"""Round 5 of the Kineto test pairs (issue 44): traces without ProfilerStep whose iterations the
trace marks otherwise. Every trace is taken with torch.profiler.profile and no schedule (no
ProfilerStep), the loop inside it; each side records its own truth, as kineto_capture.py does:
the wall time of every profiled iteration (torch.cuda.synchronize + time.perf_counter around it),
never read back from a trace.

  annotated   w2048 / w3072  record_function(f"iteration_{i}") around each step, which waits for
                             the GPU inside the span; a chain of 6 fp32 matmuls + ReLU, width 2048
                             against 3072
  annotnull   s1 / s2        the same step (width 2048) on both sides: a null pair
  forward     b32 / b64      record_function("forward") around the forward only (no wait inside);
                             backward and an SGD step after it: an MLP trained on batch 32 against 64
  execute     bf16 / fp32    an inference engine's loop: record_function(f"execute_{i}") around one
                             request (a transformer forward, waiting for the GPU inside), 2 ms of
                             host idle between requests; bf16 against fp32
  moe         e4 / e8        record_function("MoE[layer]") around a mixture-of-experts layer whose
                             tokens go through every expert in turn: 4 experts against 8
  graph       g1024 / g2048  one CUDA graph replay per iteration (a chain of 8 matmuls captured
                             once), no annotation; width 1024 against 2048
  graphnull   s1 / s2        the same graph on both sides: a null pair
  optim       h1024 / h4096  a training loop with no annotation but the optimizer's own
                             (`Optimizer.step#SGD.step`): an MLP of hidden 1024 against 4096
  optimnull   s1 / s2        the same loop on both sides: a null pair

Usage (on the GPU host, beside kineto_capture.py):  python3 kineto_round5.py --all --out DIR
"""
from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any, Callable

import kineto_capture as kc

ROUND5 = {"annotated": ("w2048", "w3072"), "annotnull": ("s1", "s2"), "forward": ("b32", "b64"),
          "execute": ("bf16", "fp32"), "moe": ("e4", "e8"), "graph": ("g1024", "g2048"),
          "graphnull": ("s1", "s2"), "optim": ("h1024", "h4096"), "optimnull": ("s1", "s2")}
DESIGNED = {"annotated": "b_slower", "annotnull": "same", "forward": "b_slower", "execute": "b_slower",
            "moe": "b_slower", "graph": "b_slower", "graphnull": "same", "optim": "b_slower", "optimnull": "same"}
ITERATIONS = 10
IDLE_S = 0.002


def profile_loop(iteration: Callable[[int], None], path: Path, n: int, idle_s: float = 0.0) -> dict[str, Any]:
    """n iterations under torch.profiler with no schedule (so no ProfilerStep); each one's wall
    time is taken here around it, up to its torch.cuda.synchronize."""
    torch = kc._torch()
    from torch.profiler import ProfilerActivity, profile

    walls = []
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True) as prof:
        for i in range(n):
            t0 = time.perf_counter()
            iteration(i)
            torch.cuda.synchronize()
            walls.append((time.perf_counter() - t0) * 1e3)
            if idle_s:
                time.sleep(idle_s)
    prof.export_chrome_trace(str(path))
    kc.ensure_gzip(path)
    return {"annotated": False, "profiler_steps": 0, "steps": n, "step_wall_ms": [round(w, 4) for w in walls],
            "profiler_api": "torch.profiler.profile(activities=[CPU, CUDA]) without a schedule",
            "host_idle_s_between": idle_s}


def _side(pair: str, side: str, out: Path, iteration: Callable[[int], None], config: dict[str, Any],
          idle_s: float = 0.0) -> dict[str, Any]:
    for i in range(3):  # warm-up
        iteration(i)
    unprof = kc.timed_steps(lambda: iteration(0), 5)
    path = out / f"{pair}-{side}.json.gz"
    prof = profile_loop(iteration, path, ITERATIONS, idle_s)
    return kc.side_record(pair, side, path, prof, unprof, config, {"profiler_steps": 0, "streams_min": 1})


def _chain(width: int):
    torch = kc._torch()
    torch.backends.cuda.matmul.allow_tf32 = False
    return kc.matmul_chain(2048, width, 6, torch.float32)


def _annotated(pair: str, side: str, out: Path, width: int) -> dict[str, Any]:
    torch = kc._torch()
    ws, x = _chain(width)

    def iteration(i: int) -> None:
        with torch.profiler.record_function(f"iteration_{i}"):
            y = x
            for w in ws:
                y = torch.relu(y @ w)
            torch.cuda.synchronize()

    return _side(pair, side, out, iteration, {"model": f"6 fp32 (2048x{width})@({width}x{width}) matmuls + ReLU",
                                               "marks": "record_function('iteration_N'), synchronize inside"})


def run_annotated(args, side: str, out: Path) -> dict[str, Any]:
    return _annotated("annotated", side, out, int(side[1:]))


def run_annotnull(args, side: str, out: Path) -> dict[str, Any]:
    return _annotated("annotnull", side, out, 2048)


def _mlp(hidden: int, width: int = 1024, depth: int = 4):
    torch = kc._torch()
    layers = []
    for i in range(depth):
        layers += [torch.nn.Linear(width if i == 0 else hidden, hidden), torch.nn.ReLU()]
    layers.append(torch.nn.Linear(hidden, 10))
    return torch.nn.Sequential(*layers).cuda()


def run_forward(args, side: str, out: Path) -> dict[str, Any]:
    torch = kc._torch()
    torch.manual_seed(0)
    batch = int(side[1:]) * 64
    model = _mlp(4096)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(batch, 1024, device="cuda")
    y = torch.randint(0, 10, (batch,), device="cuda")

    def iteration(i: int) -> None:
        opt.zero_grad(set_to_none=True)
        with torch.profiler.record_function("forward"):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()

    return _side("forward", side, out, iteration,
                 {"model": "MLP 1024-4096x4-10, SGD", "batch": batch, "marks": "record_function('forward'), no wait"})


def run_execute(args, side: str, out: Path) -> dict[str, Any]:
    torch = kc._torch()
    torch.manual_seed(0)
    dtype = torch.bfloat16 if side == "bf16" else torch.float32
    torch.backends.cuda.matmul.allow_tf32 = False
    model = kc.transformer(1024, 16, 4096, 4, fused_ops=False).to("cuda", dtype).eval()
    x = torch.randn(8, 512, 1024, device="cuda", dtype=dtype)

    def iteration(i: int) -> None:
        with torch.profiler.record_function(f"execute_{i}"), torch.no_grad():
            model(x)
            torch.cuda.synchronize()

    return _side("execute", side, out, iteration,
                 {"model": "4 transformer blocks d=1024 heads=16 mlp=4096", "input": [8, 512, 1024],
                  "dtype": str(dtype), "marks": "record_function('execute_N'), synchronize inside",
                  "host_idle_s_between_requests": IDLE_S}, idle_s=IDLE_S)


def run_moe(args, side: str, out: Path) -> dict[str, Any]:
    torch = kc._torch()
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False
    experts = int(side[1:])
    d, hidden, tokens = 1024, 4096, 4096
    w1 = [torch.randn(d, hidden, device="cuda") / d ** 0.5 for _ in range(experts)]
    w2 = [torch.randn(hidden, d, device="cuda") / hidden ** 0.5 for _ in range(experts)]
    x = torch.randn(tokens, d, device="cuda")

    def iteration(i: int) -> None:
        with torch.profiler.record_function("MoE[layer]"):
            y = torch.zeros_like(x)
            for a, b in zip(w1, w2):
                y += torch.relu(x @ a) @ b
            torch.cuda.synchronize()

    return _side("moe", side, out, iteration,
                 {"model": f"{experts} experts, each ({tokens}x{d})@({d}x{hidden}) ReLU @({hidden}x{d}), fp32",
                  "marks": "record_function('MoE[layer]') (one name, not numbered), synchronize inside"})


def _graph(pair: str, side: str, out: Path, width: int) -> dict[str, Any]:
    torch = kc._torch()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.manual_seed(0)
    ws = [torch.randn(width, width, device="cuda") / width ** 0.5 for _ in range(8)]
    x = torch.randn(1024, width, device="cuda")
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):  # warm-up before capture
            y = x
            for w in ws:
                y = y @ w
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = x
        for w in ws:
            y = y @ w

    def iteration(i: int) -> None:
        graph.replay()

    return _side(pair, side, out, iteration,
                 {"model": f"a CUDA graph of 8 fp32 (1024x{width})@({width}x{width}) matmuls",
                  "marks": "none: one graph launch per iteration"})


def run_graph(args, side: str, out: Path) -> dict[str, Any]:
    return _graph("graph", side, out, int(side[1:]))


def run_graphnull(args, side: str, out: Path) -> dict[str, Any]:
    return _graph("graphnull", side, out, 2048)


def _optim(pair: str, side: str, out: Path, hidden: int) -> dict[str, Any]:
    torch = kc._torch()
    torch.manual_seed(0)
    model = _mlp(hidden)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(2048, 1024, device="cuda")
    y = torch.randint(0, 10, (2048,), device="cuda")

    def iteration(i: int) -> None:
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    return _side(pair, side, out, iteration, {"model": f"MLP 1024-{hidden}x4-10, SGD momentum 0.9", "batch": 2048,
                                              "marks": "the optimizer's own annotations only"})


def run_optim(args, side: str, out: Path) -> dict[str, Any]:
    return _optim("optim", side, out, int(side[1:]))


def run_optimnull(args, side: str, out: Path) -> dict[str, Any]:
    return _optim("optimnull", side, out, 2048)


def install() -> None:
    """Make kineto_capture's driver run this round's pairs (its dicts are the driver's tables)."""
    kc.PAIRS.clear()
    kc.PAIRS.update(ROUND5)
    kc.DESIGNED.update(DESIGNED)
    kc.TWO_PROCESSES.update({"annotnull", "graphnull", "optimnull"})
    kc.SCENARIOS.update(annotated=run_annotated, annotnull=run_annotnull, forward=run_forward, execute=run_execute,
                        moe=run_moe, graph=run_graph, graphnull=run_graphnull, optim=run_optim,
                        optimnull=run_optimnull)


if __name__ == "__main__":
    install()
    sys.exit(kc.main())
