"""What TVM's kernel names tell alignment across two builds: FuseOps names a fused PrimFunc
after the ops it fuses ('fused_pool2d_add2' computes what 'pool2d' and 'add2' compute unfused)."""
from __future__ import annotations

from typing import Any

from rootcause.model import AlignmentTier, strip_kernel


def fused_ops(name: str, vocabulary: set[str], longest: int | None = None) -> list[str]:
    """Op names a TVM fused kernel covers: 'fused_pool2d_add2' -> ['pool2d', 'add2'].

    The body is split at '_' into the fewest pieces found in `vocabulary` (the unfused
    kernels' names), so an op whose own name holds '_' stays whole; pieces not in the
    vocabulary stay single tokens.
    """
    base = strip_kernel(name)
    if not base.startswith("fused_"):
        return [base]
    tokens = base[len("fused_"):].split("_")
    n = len(tokens)
    if longest is None:  # most '_'-pieces in a vocabulary word (pass it when calling in a loop)
        longest = max((w.count("_") + 1 for w in vocabulary), default=1)
    best: list[list[str] | None] = [None] * (n + 1)
    best[0] = []
    for i in range(n):
        if best[i] is None:
            continue
        for j in range(i + 1, min(n, i + longest) + 1):
            piece = "_".join(tokens[i:j])
            if piece in vocabulary or j == i + 1:
                cand = best[i] + [piece]
                if best[j] is None or len(cand) < len(best[j]):
                    best[j] = cand
    return best[n] or tokens


def _fused_name_keys(names: dict[str, list[str]], left: dict[str, list[str]],
                     info: dict[str, dict[str, Any]]) -> tuple[dict[str, list[str]], set[str]]:
    """Kernels through the op names their names hold. An unfused kernel already matched by name
    joins too: in the pool_fusion case, OFF's add2_kernel (launched for lv17 and lv18) belongs
    with ON's fused_pool2d_add2 (lv17) and add2 (lv18) in one unit."""
    vocab = {strip_kernel(n) for v in "ab" for n in names[v] if not n.startswith("fused_")}
    active = {f"{v}:{n}" for v in "ab" for n in left[v]}
    longest = max((w.count("_") + 1 for w in vocab), default=1)
    keys = {f"{v}:{n}": fused_ops(n, vocab, longest) for v in "ab" for n in names[v]
            if f"{v}:{n}" in active or (not n.startswith("fused_") and not info[f"{v}:{n}"]["source_ops"])}
    return keys, active


TIERS = (AlignmentTier("fused-name", _fused_name_keys, keys_are_ops=True),)
