"""bfloat16 and the fp8 types end to end, on the CPU: spec names, drawing, bundle storage, the TVM
and IREE runtime boundaries, the NumPy reference and verify.

The source of truth is ml_dtypes (the types' own conversions) and NumPy float32 arithmetic, never
rootcause's output. The end-to-end cases are fixtures/cases/bf16_matmul (README there).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from rootcause import inputs, spec as spec_mod, verify
from rootcause.errors import UsageError

pytestmark = pytest.mark.slow  # the slow tier (README): minutes of builds and analyses

ROOT = Path(__file__).resolve().parent.parent
LOWP = ROOT / "fixtures" / "cases" / "bf16_matmul"
FP8 = ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz")
MLIR = {"bfloat16": "bf16", "float8_e4m3fn": "f8E4M3FN", "float8_e5m2": "f8E5M2",
        "float8_e4m3fnuz": "f8E4M3FNUZ", "float8_e5m2fnuz": "f8E5M2FNUZ"}


def _all_values(name: str) -> np.ndarray:
    """Every bit pattern of an fp8 type; for bfloat16 every 16-bit pattern."""
    bits = np.arange(256, dtype=np.uint8) if name in FP8 else np.arange(65536, dtype=np.uint32).astype(np.uint16)
    return bits.view(getattr(ml_dtypes, name))


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a.view(np.uint8), b.view(np.uint8))


@pytest.mark.parametrize("name", list(MLIR))
def test_names_are_ml_dtypes_types(name):
    want = np.dtype(getattr(ml_dtypes, name))
    assert inputs.to_dtype(name) == want and inputs.to_dtype(MLIR[name]) == want
    assert inputs.mlir_name(want) == MLIR[name]


def test_unknown_dtype_lists_the_valid_ones():
    with pytest.raises(UsageError) as err:
        inputs.to_dtype("float8_e4m3", "x.toml: inputs[0].dtype")
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("x.toml: inputs[0].dtype: unknown dtype 'float8_e4m3'")
    assert all(n in msg for n in MLIR) and "f8E4M3FNUZ" in msg


@pytest.mark.parametrize("name", list(MLIR))
@pytest.mark.parametrize("distribution", ["uniform", "normal"])
def test_drawn_in_float32_then_cast(name, distribution):
    rng = np.random.default_rng(7)
    drawn = rng.uniform(-2.0, 3.0, (5, 6)) if distribution == "uniform" else rng.normal(0.5, 2.0, (5, 6))
    want = drawn.astype(np.float32).astype(getattr(ml_dtypes, name))
    got = inputs.generate([5, 6], name, distribution, low=-2.0, high=3.0, mean=0.5, std=2.0, seed=7)
    assert _same_bits(got, want)


@pytest.mark.parametrize("name", list(MLIR))
def test_npy_round_trip_as_the_bundle_stores_it(tmp_path, name):
    """bundle.py saves with np.save; float8_e5m2's header ('<f1') is one NumPy cannot read back."""
    values = _all_values(name)
    np.save(tmp_path / "x.npy", values, allow_pickle=False)
    row = {"file": "x.npy", "dtype": str(values.dtype), "shape": list(values.shape)}
    assert _same_bits(inputs.make_input(row, tmp_path), values)
    assert inputs.shape_dtype(row, tmp_path) == (values.shape, values.dtype)


def test_memory_checked_before_drawing():
    with pytest.raises(UsageError, match="more than this host's available memory"):
        inputs.generate([10**6, 10**6], "bfloat16", where="inputs[0]")
    with pytest.raises(UsageError, match="overflow int64"):
        inputs.generate([2**40, 2**40], "float8_e4m3fn", where="inputs[0]")


@pytest.mark.parametrize("name", list(MLIR))
def test_tvm_runtime_boundary(name):
    tvm = pytest.importorskip("tvm")
    values = _all_values(name)
    back = tvm.runtime.tensor(values, device=tvm.cpu()).numpy()
    assert _same_bits(back, values)


@pytest.mark.parametrize("name", list(MLIR))
def test_iree_runtime_boundary(name):
    ireert = pytest.importorskip("iree.runtime")
    values = _all_values(name)
    config = ireert.Config("local-task")
    assert _same_bits(ireert.asdevicearray(config.device, values).to_host(), values)


def test_reference_gets_float32_and_fails_in_one_line(tmp_path):
    (tmp_path / "ref.py").write_text("import numpy as np\n"
                                     "def seen(a, b):\n    return np.array([a.dtype == np.float32, b.dtype == np.int8])\n"
                                     "def boom(a, b):\n    raise ValueError('no\\nsuch')\n")
    (tmp_path / "m.py").write_text("")
    (tmp_path / "s.toml").write_text('name = "s"\nfrontend = "tvm"\nsource = "m.py"\ntarget = "llvm"\nentry = "main"\n'
                                     '[reference]\npython = "ref.py:seen"\n')
    spec = spec_mod.load(tmp_path / "s.toml")
    a, b = np.ones(3, ml_dtypes.bfloat16), np.ones(3, np.int8)
    assert verify.reference_outputs(spec, [a, b])[0].tolist() == [True, True]
    spec.reference.function = "boom"
    with pytest.raises(UsageError) as err:
        verify.reference_outputs(spec, [a, b])
    assert str(err.value) == "s.toml: [reference].python: ref.py:boom raised ValueError: no"


def test_check_signature_names_the_input(tmp_path):
    (tmp_path / "m.mlir").write_text("")
    (tmp_path / "s.toml").write_text('name = "s"\nfrontend = "iree"\nsource = "m.mlir"\ntarget = "llvm"\n'
                                     'entry = "main"\ninputs = [{ shape = [4, 8], dtype = "bf16" }]\n')
    spec = spec_mod.load(tmp_path / "s.toml")
    assert spec.inputs[0].dtype == "bfloat16"
    spec_mod.check_signature(spec, [([4, 8], "bf16")])
    spec_mod.check_signature(spec, [(["n", 8], "bfloat16")])  # a symbolic dim matches any size
    with pytest.raises(UsageError, match=r"^s.toml: inputs\[0\].dtype: bfloat16, but main's parameter 0 is float32$"):
        spec_mod.check_signature(spec, [([4, 8], "f32")])
    with pytest.raises(UsageError, match=r"inputs\[0\].shape: \[4, 8\], but main's parameter 0 has shape \[4, 9\]"):
        spec_mod.check_signature(spec, [([4, 9], "bf16")])


@pytest.mark.xfail(strict=True, reason="TVM 0.27.0 llvm: float8_e4m3fn -> float32 is wrong for zero, the "
                   "subnormals and NaN (0x00 -> 0.0078125); the fixture keeps its fp8 input to normal values")
def test_tvm_llvm_fp8_cast_matches_ml_dtypes():
    tvm = pytest.importorskip("tvm")
    from tvm import relax
    from tvm.script import ir as I, relax as R

    @I.ir_module
    class Cast:
        @R.function
        def main(a: R.Tensor((256,), dtype="float8_e4m3fn")) -> R.Tensor((256,), dtype="float32"):
            with R.dataflow():
                c = R.astype(a, "float32")
                R.output(c)
            return c

    vm = relax.VirtualMachine(relax.build(Cast, target="llvm"), tvm.cpu())
    values = _all_values("float8_e4m3fn")
    got = vm["main"](tvm.runtime.tensor(values)).numpy()
    np.testing.assert_array_equal(got, values.astype(np.float32))


def test_iree_llvm_fp8_cast_matches_ml_dtypes(tmp_path):
    """All 256 f8E4M3FNUZ patterns (seed 001's weight type) widened by IREE on local-task."""
    ireert = pytest.importorskip("iree.runtime")
    compiler = Path(sys.executable).parent / "iree-compile"
    if not compiler.is_file():
        pytest.skip("iree-compile not installed")
    (tmp_path / "c.mlir").write_text(
        "func.func @main(%a: tensor<256xf8E4M3FNUZ>) -> tensor<256xf32> {\n"
        "  %e = tensor.empty() : tensor<256xf32>\n"
        "  %r = linalg.generic {indexing_maps = [affine_map<(i) -> (i)>, affine_map<(i) -> (i)>],\n"
        "      iterator_types = [\"parallel\"]} ins(%a : tensor<256xf8E4M3FNUZ>) outs(%e : tensor<256xf32>) {\n"
        "  ^bb0(%x: f8E4M3FNUZ, %y: f32):\n    %w = arith.extf %x : f8E4M3FNUZ to f32\n    linalg.yield %w : f32\n"
        "  } -> tensor<256xf32>\n  return %r : tensor<256xf32>\n}\n")
    subprocess.run([str(compiler), str(tmp_path / "c.mlir"), "--iree-hal-target-device=local",
                    "--iree-hal-local-target-device-backends=llvm-cpu", "--iree-llvmcpu-target-cpu=generic",
                    "-o", str(tmp_path / "c.vmfb")], check=True, capture_output=True)
    config = ireert.Config("local-task")
    context = ireert.SystemContext(config=config)
    module = ireert.VmModule.mmap(config.vm_instance, str(tmp_path / "c.vmfb"))
    context.add_vm_module(module)
    values = _all_values("float8_e4m3fnuz")
    got = context.modules.module["main"](ireert.asdevicearray(config.device, values)).to_host()
    np.testing.assert_array_equal(got, values.astype(np.float32))


# ---- end to end through the CLI: build, run (verify against the reference), then an independent check

@pytest.fixture(scope="module")
def env(tmp_path_factory):
    return {**os.environ, "ROOTCAUSE_CACHE": str(tmp_path_factory.mktemp("cache")),
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}


def _cli(env, *args):
    return subprocess.run([sys.executable, "-m", "rootcause", *map(str, args)], env=env, capture_output=True,
                          text=True, timeout=600)


@pytest.mark.parametrize("variant,dtypes,out_dtype", [
    ("tvm_bf16", ["bfloat16", "bfloat16"], "bfloat16"),
    ("iree_bf16", ["bfloat16", "bfloat16"], "bfloat16"),
    ("tvm_fp8", ["float8_e4m3fn", "float32"], "float32"),
    ("iree_fp8", ["float8_e4m3fnuz", "float32"], "float32"),
])
def test_low_precision_model_built_run_verified(env, tmp_path, variant, dtypes, out_dtype):
    bundle, run = tmp_path / "bundle", tmp_path / "run"
    proc = _cli(env, "build", f"{LOWP / 'variants.toml'}#{variant}", "--out", bundle)
    assert proc.returncode == 0, proc.stderr
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert [row["dtype"] for row in manifest["inputs"]] == dtypes
    proc = _cli(env, "run", bundle, "--out", run, "--budget-s", "0.3", "--profile", "none")
    assert proc.returncode == 0, proc.stderr
    check, = json.loads((run / "measurement.json").read_text())["verification"]["checks"]
    assert check["against"] == "reference" and check["outputs"][0]["dtype"] == out_dtype
    assert all(o["ok"] for o in check["outputs"])
    # independently: the inputs (drawn again from the rows, digests checked), widened by ml_dtypes, multiplied in float32 by NumPy,
    # against the model's output read back through the runner
    from rootcause.artifacts.bundle import bundle_inputs
    from rootcause.inputs import make_input
    from rootcause.sessions import load_session

    stored = [make_input(row, bundle) for row in manifest["inputs"]]
    assert [a.dtype.name for a in stored] == dtypes
    want = stored[0].astype(np.float32) @ stored[1].astype(np.float32)
    session = load_session(bundle, "cpu")
    session.set_inputs(bundle_inputs(session.bundle))
    session.call()
    got, = session.outputs()
    assert got.dtype == np.dtype(getattr(ml_dtypes, out_dtype, out_dtype))
    if out_dtype == "bfloat16":  # one rounding of the float32 sum: within one bf16 ulp (2^-7 relative)
        np.testing.assert_allclose(got.astype(np.float32), want, rtol=2**-7, atol=1e-6)
    else:
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_mismatched_outputs_still_exit_1(env, tmp_path):
    """verify keeps its exit 1 for low-precision outputs that really differ: the bf16 model
    against a reference that is off by 5%."""
    case = tmp_path / "case"
    case.mkdir()
    for f in ("tvm_bf16.py", "variants.toml"):
        (case / f).write_text((LOWP / f).read_text())
    (case / "reference.py").write_text("import numpy as np\ndef matmul(a, b):\n"
                                       "    return 1.05 * (a.astype(np.float32) @ b.astype(np.float32))\n")
    bundle = tmp_path / "bundle"
    assert _cli(env, "build", f"{case / 'variants.toml'}#tvm_bf16", "--out", bundle).returncode == 0
    proc = _cli(env, "run", bundle, "--out", tmp_path / "run", "--budget-s", "0.2", "--profile", "none")
    assert proc.returncode == 1 and "outputs differ" in proc.stderr, proc.stderr


@pytest.mark.parametrize("a,b", [("tvm_bf16", "tvm_bf16_unfused"), ("iree_bf16", "iree_bf16_untiled")])
def test_analyze_a_bf16_pair_on_the_cpu(env, tmp_path, a, b):
    """The whole pipeline (build, verify, time, CPU profile, attribute, report) on bfloat16."""
    spec = LOWP / "variants.toml"
    proc = _cli(env, "analyze", f"{spec}#{a}", f"{spec}#{b}", "--target", "llvm", "--no-confirm", "--budget-s", "0.5",
                "--out", tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    measurement = json.loads((tmp_path / "out" / "run" / "measurement.json").read_text())
    assert measurement["verification"]["ok"]
    assert {c["against"] for c in measurement["verification"]["checks"]} == {"reference", f"lowp-{a}"}
    assert (tmp_path / "out" / "attribution.json").is_file()
