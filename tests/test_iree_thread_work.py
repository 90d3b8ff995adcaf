"""Threads that do work in IREE TileAndFuse dispatches (rootcause.frontends.iree.work), on the
catalogs of the zoo's split-k captures (iree-compile 3.13's configured dispatches).

Truth: the matmul's shapes from the case's own spec (its inputs, not the dispatch name) and the
thread tile IREE configured: an 8x8 output over 256 threads whose thread tile is 1 row x 16
columns leaves 8 threads an element, each walking all of K for its outputs (issue 11 measured the
same: "each scanning 131,072 elements serially")."""
import math
import tomllib
from pathlib import Path

import pytest

from rootcause.artifacts.bundle import read_bundle
from rootcause.frontends.iree.work import threads_doing_work

ZOO = Path(__file__).resolve().parent.parent / "fixtures" / "zoo"


def serial_kernel(case: str, bundle: str):
    (k,) = read_bundle(ZOO / case / "capture" / "analyze" / "bundles" / bundle).kernels()
    return k


@pytest.mark.parametrize("case, bundle", [("iree_splitk_matmul", "splitk_matmul-serial"),
                                          ("iree_splitk_tallk", "splitk_tallk-serial")])
def test_serial_matmul_leaves_most_threads_idle(case, bundle):
    spec = tomllib.loads((ZOO / case / "variants.toml").read_text())
    (m, k_dim), (_, n) = (row["shape"] for row in spec["base"]["inputs"])
    k = serial_kernel(case, bundle)
    tile = k.schedule["lowering_config"]["thread"]  # [rows, cols, 0] per thread
    work = threads_doing_work(k.name, k.schedule)
    outputs_each = tile[0] * min(tile[1], n)
    assert work["threads_per_workgroup"] == math.prod(k.schedule["workgroup_size"]) == 256
    assert work["threads_with_work"] == m * n // outputs_each
    assert work["serial_elements_per_thread"] == outputs_each * k_dim
    if case == "iree_splitk_matmul":
        assert (work["threads_with_work"], work["serial_elements_per_thread"]) == (8, 131_072)


def test_tiles_that_do_not_give_the_workgroup_size_are_not_modelled():
    """VectorDistribute's lane and subgroup bases distribute otherwise: nothing is claimed."""
    (k,) = read_bundle(ZOO / "iree_reduction_twostage" / "capture" / "analyze" / "bundles" / "rowsum-serial").kernels()
    assert threads_doing_work(k.name, k.schedule) is None
    bad = {**k.schedule, "pipeline": "TileAndFuse", "workgroup_size": [64, 1, 1],
           "lowering_config": {"workgroup": [128, 0], "thread": [4, 0], "reduction": [0, 4]}}
    assert threads_doing_work("main_dispatch_0_reduction_2048x16384_f32", bad) is None  # 128/4 = 32, not 64
