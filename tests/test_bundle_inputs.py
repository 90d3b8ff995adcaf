"""Bundle inputs: storing is decided from shape x dtype before anything is drawn. the einsum_fusion case's real
size (fixtures/cases/einsum_fusion, real iree-compile for cuda:sm_80, a fresh build cache) has
four 702x702x128 f32 inputs (241 MiB each) over the 64 MiB limit and five small ones; the build
must record the digest of the small ones as numpy default_rng(seed) draws them (and store none:
every reader draws them again), never make the big ones, and not compute a reference it would
need them for."""
from __future__ import annotations

import hashlib
import json
import math
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
CASE = ROOT / "fixtures" / "cases" / "einsum_fusion" / "variants.toml"
# peak RSS of the building Python itself (iree-compile is a grandchild, not counted): about 105 MB
# when nothing big is made; drawing one 241 MiB input (float64 first) already passes 700 MB
MAX_RSS = 512 << 20
# VmHWM, not getrusage: Linux carries ru_maxrss across fork and exec, so a child of a large
# pytest process would report the parent's footprint; VmHWM is this process image's own peak.
_BUILD = ("import re, sys; from rootcause import cli; rc = cli.main(sys.argv[1:]); "
          "hwm = re.search(r'VmHWM:\\s+(\\d+) kB', open('/proc/self/status').read()).group(1); "
          "print('peak_rss_kb', hwm, file=sys.stderr); sys.exit(rc)")


def _draw(i: dict) -> np.ndarray:
    rng = np.random.default_rng(i["seed"])
    if i["distribution"] == "normal":
        return rng.normal(i.get("mean", 0.0), i.get("std", 1.0), i["shape"]).astype(i["dtype"])
    return rng.uniform(i.get("low", 0.0), i.get("high", 1.0), i["shape"]).astype(i["dtype"])


def test_real_size_einsum_build_stores_only_small_inputs(tmp_path):
    env = {**os.environ, "ROOTCAUSE_CACHE": str(tmp_path / "cache")}  # no cache hit: write_bundle runs
    r = subprocess.run([sys.executable, "-c", _BUILD, "build", f"{CASE}#fused", "--out", str(tmp_path / "b")],
                       capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr
    rss = int(re.search(r"peak_rss_kb (\d+)", r.stderr).group(1)) * 1024
    assert rss < MAX_RSS, f"build peaked at {rss >> 20} MiB: an unstored input was generated"

    toml = tomllib.loads(CASE.read_text())["base"]["inputs"]
    m = json.loads((tmp_path / "b" / "manifest.json").read_text())
    assert len(m["inputs"]) == len(toml) == 9
    big = []
    for n, (row, i) in enumerate(zip(m["inputs"], toml)):
        assert (row["shape"], row["dtype"], row["seed"]) == (i["shape"], i["dtype"], i["seed"])
        if math.prod(i["shape"]) * np.dtype(i["dtype"]).itemsize > 64 << 20:
            assert row["file"] is None
            big.append(n)
            assert "sha256" not in row  # never drawn at build
        else:  # drawn, not stored: the digest of numpy's draw
            assert row["file"] is None and row["sha256"] == hashlib.sha256(_draw(i).tobytes()).hexdigest()
    assert big == [1, 3, 5, 7]
    assert not (tmp_path / "b" / "inputs").exists()
    # the spec has a [reference], which would need the big inputs: not computed, and said
    assert m["reference"] is None and not (tmp_path / "b" / "reference").exists()
    assert any(note.startswith("reference not computed: inputs[1] 702x702x128 float32") for note in m["notes"])
