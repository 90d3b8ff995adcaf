"""Schedule choices: one executable serving call sites of several shapes, vector tiles, loop
strides, a library call against generated code, and differing schedule rules or pipelines."""
from __future__ import annotations


from rootcause import frontends
from rootcause.analysis.align import base_kernel
from rootcause.analysis.result import Finding
from rootcause.analysis.rules.common import Context, finding, number_text, op_evidence_tiers, pair, slow_enough
from rootcause.model import CatalogKernel

# A CPU kernel whose vector tiles hold this many times fewer elements than those of the other
# side's kernel for the same ops steps through its loops that many times more often for the same work.
VECTOR_TILE_FACTOR = 4


# A CPU loop stepping this many bytes between iterations gives every element a cache line of its
# own (and no vector lanes): the x86 and Arm cores this runs on have 64-byte lines.
CACHE_LINE_BYTES = 64


def _owner(name: str) -> str | None:
    """The function a kernel symbol was named after, as its frontend reads it (dispatch_owner)."""
    return next((o for hook in frontends.hooks("dispatch_owner") if (o := hook(name))), None)


def shared_executable(ctx: Context) -> list[Finding]:
    """One executable serving call sites of different shapes (the prefill_dedup case), lowering_config named."""
    out = []
    for side, other in ((ctx.a, ctx.b), (ctx.a, ctx.b)[::-1]):
        for name in side.kernels.kernel:
            sites = side.shared.get(name)
            owner = _owner(name)
            by_name = owner and side.entry and owner != side.entry
            if not sites and not by_name:
                continue
            mine = other.dominant()
            cat, cat_other = side.cat(name), other.cat(mine["kernel"]) if mine is not None else None
            la = (cat.schedule or {}).get("lowering_config") if cat else None
            lb = (cat_other.schedule or {}).get("lowering_config") if cat_other else None
            site_text = ", ".join(sites) if sites else f"{owner} and {side.entry}"
            sentence = (f"In {side.label}, `{name}` is one executable serving {site_text}"
                        + (f"; this call ({side.entry}) runs it" if side.entry else ""))
            diff = {}
            if la is not None and lb is not None:
                diff = {k: {"a_side" if side is ctx.a else "b_side": la.get(k), "other": lb.get(k)}
                        for k in sorted(set(la) | set(lb)) if la.get(k) != lb.get(k)}
                if diff:
                    sentence += (" with lowering_config " + ", ".join(f"{k}={la.get(k)}" for k in diff)
                                 + f", where {other.label}'s `{mine['kernel']}` uses "
                                 + ", ".join(f"{k}={lb.get(k)}" for k in diff))
                else:
                    sentence += f" with the same lowering_config as {other.label}'s `{mine['kernel']}`"
            else:
                sentence += " (no catalog lowering_config to name the difference)"
            out.append(finding(ctx, "shared-executable", sentence + ".", source="static catalog" if la else "kernel name",
                                variant=side.label, kernel=name, call_sites=list(sites or [owner, side.entry]),
                                lowering_config=la, other_lowering_config=lb, differs=diff))
    return out


def _vector_step(cat: CatalogKernel | None) -> tuple[int, dict[str, list[int]]] | None:
    """(elements one vector step computes, the vector tile levels read) of a CPU kernel, as its
    frontend reads its catalog schedule (vector_step); None where none does."""
    schedule = (cat.schedule or {}) if cat is not None else {}
    return next((step for hook in frontends.hooks("vector_step") if (step := hook(schedule))), None) if schedule else None


def vector_tiles(ctx: Context) -> list[Finding]:
    """CPU: the slow side's kernel computes VECTOR_TILE_FACTOR times fewer elements a vector step
    than the other side's kernel for the same ops (its vector tile sizes, read from the catalog by
    its frontend's vector_step), so its loops take that many more steps for the same work; a step of one element uses no
    vector lanes. Only between dispatches paired by the ops they compute, and only where the unit is
    MECHANISM_MIN_SPEEDUP times slower (else a cannot-conclude line)."""
    p = pair(ctx) if ctx.unit.method in op_evidence_tiers() else None
    if p is None:
        return []
    slow, focus, fast, counterpart = p
    step_slow, step_fast = _vector_step(slow.cat(focus["kernel"])), _vector_step(fast.cat(counterpart["kernel"]))
    if step_slow is None or step_fast is None or step_fast[0] < VECTOR_TILE_FACTOR * step_slow[0]:
        return []
    tiles = {side: ", ".join(f"{k} {v}" for k, v in step[1].items()) for side, step in (("slow", step_slow), ("fast", step_fast))}
    speedup = slow_enough(ctx, slow, focus, f"computes {number_text(step_slow[0])} element(s) a vector step where "
                           f"{fast.label}'s computes {number_text(step_fast[0])}", "its vector tiles")
    if speedup is None:
        return []
    one = " (no vector lanes: its loops step one element at a time)" if step_slow[0] == 1 else ""
    text = (f"{slow.label}'s `{focus['kernel']}` computes {number_text(step_slow[0])} element(s) a vector step{one}, by its "
            f"vector tiles ({tiles['slow']}), where {fast.label}'s `{counterpart['kernel']}` computes "
            f"{number_text(step_fast[0])} ({tiles['fast']}): for the same ops its loops take {step_fast[0] // step_slow[0]}x "
            f"the steps, and the unit is {speedup:.1f}x slower")
    return [finding(ctx, "vector-tiles", text + ".", source="static catalog lowering_config",
                     kernel=focus["kernel"], other_kernel=counterpart["kernel"], elements_per_step=step_slow[0],
                     other_elements_per_step=step_fast[0], speedup=speedup)]


def loop_stride(ctx: Context) -> list[Finding]:
    """CPU: the slow side's kernel steps through a buffer CACHE_LINE_BYTES or more from one iteration
    of its hot loop to the next, where the other side's kernel for the same ops steps through every
    buffer less than a line at a time (catalog `access`, read from the lowered TIR: static, exact
    for affine indices). Only between kernels paired by the ops they compute, and only where the
    unit is MECHANISM_MIN_SPEEDUP times slower on the slow side (else a cannot-conclude line: a
    strided loop that costs little is not what made the unit slower)."""
    p = pair(ctx) if ctx.unit.method in op_evidence_tiers() else None
    if p is None:
        return []
    slow, focus, fast, counterpart = p
    cat_slow, cat_fast = slow.cat(focus["kernel"]), fast.cat(counterpart["kernel"])
    hot_slow, hot_fast = (cat_slow.access if cat_slow else {}), (cat_fast.access if cat_fast else {})
    if not hot_slow.get("strides_bytes") or not hot_fast.get("strides_bytes"):
        return []
    far = {b: n for b, n in hot_slow["strides_bytes"].items() if n >= CACHE_LINE_BYTES}
    near = max(hot_fast["strides_bytes"].values())
    if not far or near >= CACHE_LINE_BYTES:
        return []
    speedup = slow_enough(ctx, slow, focus, f"steps through memory {number_text(max(far.values()))} bytes at a time in its "
                           f"innermost loop where {fast.label}'s steps at most {number_text(near)}", "the loop's stride")
    if speedup is None:
        return []
    names = ", ".join(f"`{b}`" for b in sorted(far))
    text = (f"{slow.label}'s `{focus['kernel']}` steps through {names} {number_text(max(far.values()))} bytes apart from one "
            f"iteration of its innermost loop (`{hot_slow['loop']}`, {number_text(hot_slow['extent'])} iterations) to the next, "
            f"a cache line for every element; {fast.label}'s `{counterpart['kernel']}` steps through its buffers at "
            f"most {number_text(near)} bytes apart (`{hot_fast['loop']}`)")
    if near:
        text += f", {CACHE_LINE_BYTES // near} elements to a line"
    if cat_slow.bytes_moved and cat_slow.bytes_moved == cat_fast.bytes_moved:
        text += (f". Both move {number_text(cat_slow.bytes_moved)} bytes: the loop order, not the work, makes the unit "
                 f"{speedup:.1f}x slower")
    else:
        text += f"; the unit is {speedup:.1f}x slower"
    return [finding(ctx, "loop-stride", text + ".", source="static lowered TIR (catalog access)",
                     kernel=focus["kernel"], other_kernel=counterpart["kernel"], speedup=speedup,
                     **{slow.label: hot_slow, fast.label: hot_fast})]


def _schedule_keys() -> tuple[str, ...]:
    """The catalog schedule keys every registered frontend names (rootcause.frontends.base)."""
    return tuple(dict.fromkeys(k for keys in frontends.hooks("schedule_keys") for k in keys))


def library_call(ctx: Context) -> list[Finding]:
    """The faster side runs the unit's work as a library call (its catalog's schedule names the
    library: XLA's custom calls and custom fusions, YNNPACK, oneDNN, cuBLAS) where the slower side
    runs code its compiler generated for the same module: which of the two each producer chose, and
    what the unit's time was on each side. Named only that way round: a library call on the slower
    side says nothing about why it is slower."""
    slow, fast = (ctx.b, ctx.a) if ctx.unit.delta_ns.median > 0 else (ctx.a, ctx.b)
    libs = {r.kernel: (fast.cat(base_kernel(r.kernel)[0]) or CatalogKernel("", "")).schedule.get("library")
            for r in fast.kernels.itertuples(index=False)}
    called = {k: lib for k, lib in libs.items() if lib}
    if not called or any((slow.cat(base_kernel(r.kernel)[0]) or CatalogKernel("", "")).schedule.get("library")
                         for r in slow.kernels.itertuples(index=False)):
        return []
    top = slow.dominant()
    generated = (slow.cat(base_kernel(top["kernel"])[0]) or CatalogKernel("", "")).schedule if top is not None else {}
    how = next((f"{k} '{generated[k]}'" for k in ("pipeline", "rule") if generated.get(k)), "its own code")
    kernel, lib = next(iter(called.items()))
    ts, tf = slow.kernels.time_per_call_ns.sum(), fast.kernels.time_per_call_ns.sum()
    sentence = (f"{fast.label} runs `{kernel}` as a library call ({lib}) where {slow.label} generates "
                f"`{top['kernel']}` ({how}): {tf / 1e3:,.1f} us a call in {fast.label} against {ts / 1e3:,.1f} us "
                f"in {slow.label} for the same module.")
    return [finding(ctx, "library-call", sentence, source="static catalog (schedule.library)",
                     library=lib, library_kernel=kernel, generated_kernel=top["kernel"] if top is not None else None)]


def schedule_rule(ctx: Context) -> list[Finding]:
    """The scheduling choice (TVM rule, IREE pipeline / workgroup size) differs."""
    p = pair(ctx)
    if p is None:
        return []
    ka, kb = (p[3], p[1]) if p[0] is ctx.b else (p[1], p[3])
    ca, cb = ctx.a.cat(ka["kernel"]), ctx.b.cat(kb["kernel"])
    if ca is None or cb is None:
        return []
    sa, sb = ca.schedule or {}, cb.schedule or {}
    if not set(sa) & set(sb) & set(_schedule_keys()):
        return []  # two producers' schedules name different things (library_call compares them)
    diff = {k: (sa.get(k), sb.get(k)) for k in _schedule_keys()
            if (k in sa or k in sb) and sa.get(k) != sb.get(k)}
    if not diff:
        return []
    text = ", ".join(f"{k} {a!r} in {ctx.a.label} vs {b!r} in {ctx.b.label}" for k, (a, b) in diff.items())
    sentence = f"The schedule of `{cb.function or kb['kernel']}` differs from `{ca.function or ka['kernel']}`: {text}."
    return [finding(ctx, "schedule", sentence, source="static catalog",
                     a={"kernel": ka["kernel"], **sa}, b={"kernel": kb["kernel"], **sb})]
