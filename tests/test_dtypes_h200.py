"""The H200 capture of the low-precision case (fixtures/captures/h200-2026-12-03-dtypes): every
bundle's outputs verified against the NumPy reference on the GPU, with the inputs the spec declares
(dtype and shape read from the spec file itself) and CUPTI kernel records of the run."""
import json
import tarfile
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CAPTURE = ROOT / "fixtures" / "captures" / "h200-2026-12-03-dtypes"
SPEC = ROOT / "fixtures" / "cases" / "bf16_matmul" / "variants.toml"
ALIASES = {"bf16": "bfloat16"}  # IREE spells it the MLIR way


def _member(name: str) -> bytes:
    with tarfile.open(CAPTURE / "results.tar.gz") as tar:
        return tar.extractfile(name).read()


@pytest.mark.parametrize("variant", ["tvm_bf16", "tvm_fp8", "iree_bf16"])
def test_verified_on_the_h200_with_the_declared_inputs(variant):
    m = json.loads(_member(f"results/{variant}/measurement.json"))
    declared = tomllib.loads(SPEC.read_text())["variants"][variant]["inputs"]
    got = m["verification"]["inputs"]
    assert [i["shape"] for i in got] == [d["shape"] for d in declared]
    assert [i["dtype"] for i in got] == [ALIASES.get(d["dtype"], d["dtype"]) for d in declared]
    checks = m["verification"]["checks"]
    assert checks and all(o["ok"] and o["max_abs"] <= c["atol"] + c["rtol"] for c in checks for o in c["outputs"])
    assert m["devices"] == {f"lowp-{variant}": "cuda"}
    env = json.loads(_member(f"results/{variant}/env.json"))
    assert "H200" in json.dumps(env)
    records = json.loads(_member(f"results/{variant}/lowp-{variant}.cupti.json"))
    assert len(records) > 0
