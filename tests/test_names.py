"""Readable kernel names (rootcause.names) on the kernels of real traces: short, no parameter list,
and distinct where the signatures differ outside their parameter lists."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

from rootcause.names import readable, short

ROOT = Path(__file__).resolve().parents[1]
TRACES = [ROOT / "fixtures/captures/kineto-2021-tb-plugin/resnet50_num_workers_0.worker0.1623143089861.pt.trace.json.gz",
          *sorted((ROOT / "fixtures/captures/h200-2026-12-03-kineto").glob("*.json.gz"))]


def _kernel_names() -> set[str]:
    names = set()
    for path in TRACES:
        with gzip.open(path, "rt") as f:
            names |= {e["name"] for e in json.load(f)["traceEvents"] if e.get("cat") in ("kernel", "Kernel")}
    return names


def _without_params(name: str) -> str:
    """The signature up to its parameter list, found by counting brackets (independent of names.py)."""
    depth = 0
    for i, ch in enumerate(name):
        depth += {"<": 1, ">": -1}.get(ch, 0)
        if ch == "(" and depth == 0 and i and not name[:i].endswith("anonymous namespace") and name[i:i + 10] != "(anonymou":
            return name[:i]
    return name


def test_short_names_fit_and_drop_parameters():
    names = _kernel_names()
    assert len(names) > 50
    for n in names:
        s = short(n, 64)
        assert len(s) <= 64
        if "::" not in n and "<" not in n:
            assert s == n[:63] + "\u2026" if len(n) > 64 else s == n
        else:
            assert "(int" not in s and "const*" not in s


def test_distinct_signatures_stay_distinct():
    """Two kernels whose signatures differ before their parameter lists keep different readable
    names in nearly every case (template arguments nested two deep may be elided)."""
    names = _kernel_names()
    heads = {_without_params(n) for n in names}
    readable_names = {readable(n, 96) for n in names}
    assert len(readable_names) >= 0.95 * len(heads)


def test_the_two_sides_of_a_v100_h200_pair_are_told_apart():
    a = ("void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float>, at::detail::Array<char*, 3> >"
         "(int, at::native::AddFunctor<float>, at::detail::Array<char*, 3>)")
    b = ("void at::native::vectorized_elementwise_kernel<8, at::native::CUDAFunctor_add<c10::BFloat16>, "
         "std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul>)")
    assert short(a, 64) != short(b, 64)
    assert short(a, 64).startswith("vectorized_elementwise_kernel<4, ")
