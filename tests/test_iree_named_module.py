"""A module as JAX exports it (`module @jit_model`): IREE names every dumped file after the module,
and the catalog still finds each dispatch's source, configuration and binary. Truth: the same
function in an unnamed module, built alike, and the construction (a max over 256 x 512 points is
131,072 comparisons)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROWMAX = """func.func @main(%x: tensor<256x512xf32>) -> tensor<256xf32> {
  %ninf = arith.constant 0xFF800000 : f32
  %e = tensor.empty() : tensor<256xf32>
  %f = linalg.fill ins(%ninf : f32) outs(%e : tensor<256xf32>) -> tensor<256xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0)>],
                       iterator_types = ["parallel", "reduction"]}
       ins(%x : tensor<256x512xf32>) outs(%f : tensor<256xf32>) {
  ^bb0(%in: f32, %out: f32):
    %m = arith.maximumf %in, %out : f32
    linalg.yield %m : f32
  } -> tensor<256xf32>
  return %r : tensor<256xf32>
}
"""
SPEC = """[base]
name = "rowmax"
frontend = "iree"
source = "{source}"
target = "cuda:sm_80"
entry = "main"
[base.iree]
function = "main"
[[base.inputs]]
shape = [256, 512]
dtype = "float32"
distribution = "normal"
seed = 0
[variants.v]
name = "rowmax-{tag}"
"""


def _build(tmp: Path, tag: str, text: str) -> dict:
    (tmp / f"{tag}.mlir").write_text(text)
    (tmp / f"{tag}.toml").write_text(SPEC.format(source=f"{tag}.mlir", tag=tag))
    out = tmp / f"bundle-{tag}"
    done = subprocess.run([sys.executable, "-m", "rootcause", "build", str(tmp / f"{tag}.toml#v"), "--out", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads((out / "manifest.json").read_text())


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("named")
    return _build(tmp, "plain", ROWMAX), _build(tmp, "named", "module @jit_model {\n" + ROWMAX + "}\n")


def test_named_module_keeps_its_catalog(built):
    plain, named = built
    assert any(p.startswith("binaries/jit_model_") for p in named["binaries"])  # IREE named the dumps so
    (k_plain,), (k_named,) = plain["kernels"], named["kernels"]
    assert k_named["flops"] == 256 * 512
    assert k_named["resources"]["registers"] == k_plain["resources"]["registers"]
    assert k_named["resources"]["registers"] is not None
    assert k_named["schedule"]["lowering_config"] == k_plain["schedule"]["lowering_config"]
    assert not [n for n in named["notes"] if "not counted" in n or "no dumped binary" in n]
