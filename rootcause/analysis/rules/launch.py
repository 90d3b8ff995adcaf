"""Rules on how kernels are launched: grid and block against the other side's, how many
launches a call, theoretical occupancy and its limiter."""
from __future__ import annotations

from typing import Any

import pandas as pd

from rootcause.analysis.result import Finding
from rootcause.analysis.rules.common import (
    Context,
    Side,
    finding,
    number_text,
    pair,
    product,
    resident_waves,
    time_text,
    zero_if_na,
)


def _launch_text(ctx: Context, side: Side, k: pd.Series) -> tuple[str, dict[str, Any]]:
    blocks, threads = product(k["grid"]), product(k["block"])
    if ctx.cpu:  # a CPU dispatch's grid is its workgroups, tasks for the runtime's threads
        text = f"{side.label}'s `{k['kernel']}` runs {number_text(blocks)} workgroup{'s' if blocks != 1 else ''}"
        return text, {"kernel": k["kernel"], "grid": list(k["grid"]), "block": list(k["block"]),
                      "workgroups": blocks}
    w = resident_waves(side, k)
    text = f"{side.label}'s `{k['kernel']}` launches {number_text(blocks)} blocks x {number_text(threads)} threads"
    if w and w["waves"] < 1:
        text += (f" (a partial wave: {w['waves']:.0%} of the {number_text(w['blocks_per_wave'])} resident "
                 f"block slots of the {side.device}'s {side.sms} SMs)")
    elif w:
        text += (f" ({w['waves']:.2f} waves of {number_text(w['blocks_per_wave'])} resident blocks on the "
                 f"{side.device}'s {side.sms} SMs, last wave {w['tail']:.0%} full)")
    return text, {"kernel": k["kernel"], "grid": list(k["grid"]), "block": list(k["block"]),
                  "blocks": blocks, "threads_per_block": threads, "waves": w}


def launch_config(ctx: Context) -> list[Finding]:
    """The slow side's dominant kernel is launched unlike every kernel of the other side;
    waves per SM and tail when the device is known."""
    p = pair(ctx)
    if p is None or any(k[c] is None for k in (p[1], p[3]) for c in ("grid", "block")):
        return []  # a launch the profile does not describe (no grid or block) is not compared
    slow, focus, fast, counterpart = p
    config = (tuple(focus["grid"]), tuple(focus["block"]))
    if any(r.grid is not None and (tuple(r.grid), tuple(r.block)) == config
           for r in fast.kernels.itertuples(index=False)):
        return []
    text_slow, ev_slow = _launch_text(ctx, slow, focus)
    text_fast, ev_fast = _launch_text(ctx, fast, counterpart)
    sentence = f"{text_slow}, where {text_fast}."
    evidence = {"source": "profiled", slow.label: ev_slow, fast.label: ev_fast}
    # the pool_fusion case's signature: one block per element the other side computes with one thread.
    if (not ctx.cpu and counterpart["block"] is not None and product(focus["block"]) > 1
            and product(focus["grid"]) == product(counterpart["grid"]) * product(counterpart["block"])):
        sentence += (f" That is one block of {number_text(product(focus['block']))} threads per element that "
                     f"`{counterpart['kernel']}` computes with one thread ({number_text(product(focus['grid']))} elements).")
        evidence["one_block_per_element"] = True
    return [finding(ctx, "launch-config", sentence, **evidence)]


def launch_count(ctx: Context) -> list[Finding]:
    """The slow side launches many more kernels for the same ops."""
    la, lb = ctx.unit.launches_a, ctx.unit.launches_b
    slow, fast, ls, lf = (ctx.b, ctx.a, lb, la) if ctx.unit.delta_ns.median > 0 else (ctx.a, ctx.b, la, lb)
    if ls < 2 * max(lf, 1):
        return []
    t = ctx.unit.time_ns("a" if slow is ctx.a else "b").median
    sentence = (f"{slow.label} launches {number_text(ls)} kernels per call for these ops ({slow.kernels['kernel'].nunique()} "
                f"distinct, {time_text(t)} in total) where {fast.label} launches {number_text(lf)}.")
    return [finding(ctx, "launch-count", sentence, source="profiled",
                     launches_per_call={ctx.a.label: la, ctx.b.label: lb})]


def occupancy_limiter(ctx: Context) -> list[Finding]:
    """Theoretical occupancy or its limiter differ between the dominant kernels."""
    p = pair(ctx)
    if p is None:
        return []
    ka, kb = (p[3], p[1]) if p[0] is ctx.b else (p[1], p[3])
    wa, wb = resident_waves(ctx.a, ka), resident_waves(ctx.b, kb)
    if not wa or not wb:
        return []
    if abs(wa["occupancy"] - wb["occupancy"]) < 0.05 and wa["limiter"] == wb["limiter"]:
        return []
    sentence = (f"Theoretical occupancy goes from {wa['occupancy']:.0%} ({wa['limiter']}-limited, "
                f"`{ka['kernel']}`: {number_text(ka['registers'])} registers, {number_text(zero_if_na(ka['shared_bytes']))} B "
                f"shared) in {ctx.a.label} to {wb['occupancy']:.0%} ({wb['limiter']}-limited, `{kb['kernel']}`: "
                f"{number_text(kb['registers'])} registers, {number_text(zero_if_na(kb['shared_bytes']))} B shared) in {ctx.b.label}.")
    return [finding(ctx, "occupancy", sentence, source="profiled resources, gpus.occupancy",
                     a={**wa, "kernel": ka["kernel"]}, b={**wb, "kernel": kb["kernel"]})]
