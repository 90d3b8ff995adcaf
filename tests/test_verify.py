"""verify and `rootcause run` on real bundles (TVM llvm, IREE llvm-cpu) built by the real
compilers: two compilers agree, a wrong variant and a wrong reference are caught with the
error NumPy computes for them, and the run command writes valid results.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

from rootcause import cli
from rootcause.sessions import load_session
from rootcause.errors import OutputsDiffer
from rootcause.verify import common_inputs, compare, verify
from test_runners import _independent_inputs, build_iree_bundle, build_tvm_bundle, numpy_reference


@pytest.fixture(scope="module")
def bundles(tmp_path_factory):
    root = tmp_path_factory.mktemp("verify_bundles")
    x, w = _independent_inputs()
    right = [r.astype("float32") for r in numpy_reference(x, w)]
    wrong_ref = [right[0], np.maximum(x, 0) * 3]  # the spec author's reference is wrong on output 1
    return {
        "tvm": build_tvm_bundle(root / "tvm", reference=right),
        "iree": build_iree_bundle(root / "iree", reference=right),
        "tvm_offset": build_tvm_bundle(root / "tvm_offset", name="tvm_offset", offset=0.25),
        "iree_wrong_ref": build_iree_bundle(root / "iree_wrong_ref", name="iree_wrong_ref", reference=wrong_ref),
    }


def _sessions(bundles, *keys):
    return [load_session(bundles[k]) for k in keys]


def test_two_compilers_agree_with_each_other_and_numpy(bundles):
    sessions = _sessions(bundles, "tvm", "iree")
    record = verify(sessions, common_inputs([s.bundle for s in sessions]))
    assert record["ok"]
    kinds = sorted((c["variant"], c["against"]) for c in record["checks"])
    assert kinds == [("iree_llvm_cpu", "reference"), ("iree_llvm_cpu", "tvm_llvm"), ("tvm_llvm", "reference")]


def test_variant_computing_something_else_raises(bundles):
    sessions = _sessions(bundles, "tvm", "tvm_offset")
    with pytest.raises(OutputsDiffer) as err:
        verify(sessions, common_inputs([s.bundle for s in sessions]))
    message = str(err.value)
    assert "tvm_offset vs tvm_llvm" in message and "output 0" in message and "output 1" not in message
    rows = {(c["variant"], c["against"]): c["outputs"] for c in err.value.record["checks"]}
    row = rows[("tvm_offset", "tvm_llvm")][0]
    assert not row["ok"] and row["max_abs"] == pytest.approx(0.25, rel=1e-5)  # the offset built in
    assert rows[("tvm_offset", "tvm_llvm")][1]["ok"]


def test_wrong_reference_raises_with_numpy_error(bundles):
    sessions = _sessions(bundles, "iree_wrong_ref")
    x, w = _independent_inputs()
    want_abs = float(np.max(np.abs(np.maximum(x, 0) * 2 - np.maximum(x, 0) * 3)))
    with pytest.raises(OutputsDiffer, match="iree_wrong_ref vs reference") as err:
        verify(sessions, common_inputs([s.bundle for s in sessions]))
    row = err.value.record["checks"][0]["outputs"][1]
    assert row["max_abs"] == pytest.approx(want_abs, rel=1e-6)
    assert row["max_rel"] == pytest.approx(1 / 3, rel=1e-5)  # |2r - 3r| / |3r|


def test_variants_computing_nan_are_named_not_compared(bundles):
    """A NaN in x gives NaN outputs in both compilers' builds: the error names the variants and
    their NaN counts (read here from the outputs themselves), not a comparison of NaN with NaN."""
    sessions = _sessions(bundles, "tvm", "iree")
    x, w = common_inputs([s.bundle for s in sessions])
    x = x.copy()
    x[0, 0] = np.nan
    with pytest.raises(OutputsDiffer) as err:
        verify(sessions, [x, w])
    counted = {}
    for s in sessions:
        s.set_inputs([x, w])
        s.call()
        counted[s.bundle.name] = [{"output": i, "nan": int(np.isnan(o).sum()), "size": o.size}
                                  for i, o in enumerate(s.outputs()) if np.isnan(o).any()]
    assert err.value.record["nan"] == counted and all(counted.values())
    message = str(err.value)
    assert message.startswith("NaN in the outputs of ") and "max abs" not in message
    assert all(name in message for name in counted)


def test_compare_rules():
    a = np.array([1.0, 2.0, np.nan], dtype="float32")
    assert not compare([a], [a], 1e-5, 1e-5)[0]["ok"]  # NaN never passes
    assert compare([a[:2]], [a[:2] + 1e-6], 1e-5, 0)[0]["ok"]
    assert not compare([a[:2]], [a[:2] + 1e-3], 1e-5, 0)[0]["ok"]
    assert compare([a[:2]], [a[:2].reshape(2, 1)], 1, 1)[0]["problem"] == "shape [2] vs [2, 1]"
    assert compare([a], [], 1, 1)[-1]["problem"] == "1 outputs vs 0"


def test_run_command_writes_results(bundles, tmp_path):
    out = tmp_path / "run"
    rc = cli.main(["run", str(bundles["tvm"]), str(bundles["iree"]), "--out", str(out), "--profile", "cupti",
                   "--budget-s", "1"])
    assert rc == 0
    m = json.loads((out / "measurement.json").read_text())
    assert m["verification"]["ok"]
    variants = m["measurement"]["variants"]
    assert set(variants) == {"tvm_llvm", "iree_llvm_cpu"}
    for v in variants.values():
        assert v["samples_s"] and v["median_s"] == pytest.approx(float(np.median(v["samples_s"])))
    # CUPTI cannot profile a CPU run: the failure is named, not skipped, and nothing is faked.
    for name in variants:
        assert m["profiles"][name]["ok"] is False and m["profiles"][name]["error"]
        assert not (out / f"{name}.cupti.json").exists()
    e = json.loads((out / "env.json").read_text())
    assert e["before"]["cpu"]["logical_cpus"] >= 1
    if e["before"]["nvml"] != "ok":
        assert e["before"]["nvml"].startswith("NVML unavailable: ") and "gpus" not in e["before"]


def test_run_command_exit_status_on_mismatch_and_bad_input(bundles, tmp_path, capsys):
    out = tmp_path / "differ"
    rc = cli.main(["run", str(bundles["tvm"]), str(bundles["tvm_offset"]), "--out", str(out), "--profile", "none"])
    assert rc == 1
    assert json.loads((out / "measurement.json").read_text())["verification"]["ok"] is False
    assert "outputs differ" in capsys.readouterr().err
    rc = cli.main(["run", str(tmp_path / "nothing"), "--out", str(tmp_path / "x")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "not a bundle" in err and len(err.splitlines()) == 1
