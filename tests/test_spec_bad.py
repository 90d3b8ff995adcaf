"""Bad specs through the real CLI: each one exits with status 2 and ONE line on stderr that names
the spec file and the place, never a traceback (`python -m rootcause build SPEC --out DIR` and
`python -m rootcause analyze SPEC GOOD --out DIR`).

The cases are written here by hand, one per way a spec can be wrong: keys, types, dtypes, sizes
(10^12 elements, int64 overflow), distributions NumPy would reject, paths that leave the spec's
folder, iree-compile flags that load, run or write something, and references that raise or
return the wrong thing. Most are refused when the spec is loaded (before any compiler runs or
anything is allocated); the last group needs a real TVM build of a small bf16 model first.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
POOL = ROOT / "fixtures" / "cases" / "pool_fusion"
LOWP = ROOT / "fixtures" / "cases" / "bf16_matmul"

HEAD = '''name = "bad"
frontend = "tvm"
source = "model.py"
target = "llvm"
entry = "main"
'''
INPUTS = '''[[inputs]]
shape = [16, 32]
dtype = "bfloat16"
[[inputs]]
shape = [32, 8]
dtype = "bfloat16"
'''
IREE_HEAD = HEAD.replace('"tvm"', '"iree"').replace("model.py", "model.mlir")
GOOD = HEAD + INPUTS


def _input(**fields: str) -> str:
    """A spec with one [[inputs]] table of the given TOML values."""
    return HEAD + "[[inputs]]\n" + "".join(f"{k} = {v}\n" for k, v in fields.items())


# (id, spec text, place the one line must name). The spec is written as spec.toml into a folder
# holding model.py, model.mlir, reference.py, x.npy and a sub-folder; outside.py lies beside it.
CASES = [
    # ---- top level
    ("unknown-key", HEAD + "colour = 1\n" + INPUTS, "spec.toml: unknown key \"colour\""),
    ("missing-frontend", GOOD.replace('frontend = "tvm"\n', ""), "frontend: missing required key"),
    ("unknown-frontend", GOOD.replace('"tvm"', '"tensorrt"'), "frontend: unknown frontend"),
    ("name-not-string", GOOD.replace('name = "bad"', "name = 3"), "name: must be a non-empty string"),
    ("target-typo", GOOD.replace('"llvm"', '"cuda:sm90"'), "target: unknown target"),
    ("target-unknown", GOOD.replace('"llvm"', '"vulkan"'), "target: unknown target"),
    ("not-toml", "name = \n", "not valid TOML"),
    ("not-utf8", b"name = \"\xff\xfe\"\n", "not valid TOML"),
    ("variants-without-name", "[base]\nname = \"x\"\n[variants.a]\n[variants.b]\n", "choose one"),
    ("key-beside-base", "colour = 1\n[base]\nname = \"x\"\n[variants.a]\n", "colour"),
    ("variant-not-table", "[base]\nname = \"x\"\n[variants]\na = 3\n", "[variants]"),
    ("allow-outside-not-bool", HEAD + "allow_outside_paths = \"yes\"\n" + INPUTS,
     "allow_outside_paths: must be true or false"),
    # ---- source path
    ("source-missing", GOOD.replace("model.py", "nope.py"), "source: file not found"),
    ("source-etc-passwd", GOOD.replace("model.py", "../../../../etc/passwd"), "source: ../../../../etc/passwd is outside"),
    ("source-absolute", GOOD.replace("model.py", "/etc/passwd"), "source: /etc/passwd is outside"),
    ("source-parent", GOOD.replace("model.py", "../outside.py"), "source: ../outside.py is outside"),
    ("source-symlink-out", GOOD.replace("model.py", "link.py"), "source: link.py is outside"),
    ("source-not-string", GOOD.replace('"model.py"', "5"), "source: must be a non-empty string"),
    ("source-empty", GOOD.replace('"model.py"', '""'), "source: must be a non-empty string"),
    # ---- inputs: dtypes
    ("dtype-float128", _input(shape="[4]", dtype='"float128"'), "inputs[0].dtype: unknown dtype 'float128'"),
    ("dtype-typo", _input(shape="[4]", dtype='"bfloat17"'), "inputs[0].dtype: unknown dtype"),
    ("dtype-number", _input(shape="[4]", dtype="32"), "inputs[0].dtype: unknown dtype"),
    ("dtype-complex", _input(shape="[4]", dtype='"complex64"'), "inputs[0].dtype: unknown dtype"),
    # ---- inputs: sizes
    ("elements-1e12", _input(shape="[1000000, 1000000]"), "inputs[0].shape"),
    ("int64-overflow", _input(shape="[1099511627776, 1099511627776]"), "inputs[0].shape"),
    ("bytes-overflow", _input(shape="[4294967296, 1073741824]", dtype='"float64"'), "overflows int64"),
    ("shape-negative", _input(shape="[-1, 4]"), "inputs[0].shape: must be an array of non-negative integers"),
    ("shape-string", _input(shape='"16x32"'), "inputs[0].shape: must be an array"),
    ("shape-float", _input(shape="[1.5]"), "inputs[0].shape: must be an array"),
    ("shape-bool", _input(shape="[true]"), "inputs[0].shape: must be an array"),
    ("shape-missing", _input(dtype='"float32"'), "inputs[0].shape: must be an array"),
    # ---- inputs: distributions
    ("distribution-unknown", _input(shape="[4]", distribution='"cauchy"'), "inputs[0].distribution: unknown"),
    ("low-above-high", _input(shape="[4]", low="2.0", high="1.0"), "inputs[0].low: 2 is above high 1"),
    ("low-nan", _input(shape="[4]", low="nan"), "inputs[0].low: must be finite"),
    ("high-inf", _input(shape="[4]", high="inf"), "inputs[0].high: must be finite"),
    ("std-negative", _input(shape="[4]", distribution='"normal"', std="-1.0"), "inputs[0].std: must be >= 0"),
    ("int-fraction-bounds", _input(shape="[4]", dtype='"int32"', low="0.5", high="3.0"), "inputs[0].low: uniform int32"),
    ("uint8-out-of-range", _input(shape="[4]", dtype='"uint8"', low="0", high="1000"), "inputs[0].high"),
    ("fp8-out-of-range", _input(shape="[4]", dtype='"float8_e4m3fn"', low="-1000.0", high="1000.0"),
     "inputs[0].high: [-1000, 1000] is outside float8_e4m3fn's finite range"),
    ("low-not-number", _input(shape="[4]", low='"a"'), "inputs[0].low: must be a number"),
    ("seed-negative", _input(shape="[4]", seed="-1"), "inputs[0].seed: must be a non-negative integer"),
    ("seed-string", _input(shape="[4]", seed='"0"'), "inputs[0].seed: must be a non-negative integer"),
    ("input-unknown-key", _input(shape="[4]", colour="1"), "inputs[0]: unknown key \"colour\""),
    ("inputs-not-array", HEAD + "inputs = 3\n", "inputs: must be an array"),
    ("input-not-table", HEAD + "inputs = [3]\n", "inputs[0]: must be a table"),
    # ---- inputs: files
    ("file-not-npy", _input(file='"model.py"'), "inputs[0].file: must be a .npy file"),
    ("file-missing", _input(file='"nope.npy"'), "inputs[0].file: file not found"),
    ("file-garbage", _input(file='"garbage.npy"'), "garbage.npy: not a readable .npy"),
    ("file-outside", _input(file='"../outside.npy"'), "inputs[0].file: ../outside.npy is outside"),
    ("file-dtype-differs", _input(file='"x.npy"', dtype='"float16"'), "inputs[0].dtype: float16, but x.npy holds float32"),
    ("file-shape-differs", _input(file='"x.npy"', shape="[3]"), "inputs[0].shape: [3], but x.npy holds [16, 32]"),
    ("file-complex", _input(file='"c.npy"'), "inputs[0].file: c.npy holds complex64"),
    ("file-with-seed", _input(file='"x.npy"', seed="3"), "inputs[0].seed: a file input takes only"),
    # ---- reference
    ("reference-no-colon", GOOD + '[reference]\npython = "reference.py"\n', "[reference].python: must be 'file.py:function'"),
    ("reference-missing-file", GOOD + '[reference]\npython = "nope.py:f"\n', "[reference].python: file not found"),
    ("reference-bad-name", GOOD + '[reference]\npython = "reference.py:not-a-name"\n', "[reference].python: 'not-a-name'"),
    ("reference-outside", GOOD + '[reference]\npython = "../outside.py:f"\n', "[reference].python: ../outside.py is outside"),
    ("reference-not-py", GOOD + '[reference]\npython = "x.npy:f"\n', "[reference].python: must be a .py file"),
    ("reference-rtol-negative", GOOD + '[reference]\npython = "reference.py:ok"\nrtol = -1.0\n', "[reference].rtol: must be >= 0"),
    ("reference-rtol-string", GOOD + '[reference]\npython = "reference.py:ok"\nrtol = "x"\n', "[reference].rtol: must be a number"),
    ("reference-unknown-key", GOOD + '[reference]\npython = "reference.py:ok"\ncolour = 1\n', "[reference]: unknown key"),
    ("reference-not-table", HEAD + 'reference = "reference.py:ok"\n' + INPUTS, "[reference]: must be a table"),
    # ---- [tvm]
    ("opt-level-9", GOOD + "[tvm]\nopt_level = 9\n", "[tvm].opt_level: must be an integer 0..4"),
    ("opt-level-bool", GOOD + "[tvm]\nopt_level = true\n", "[tvm].opt_level: must be an integer 0..4"),
    ("skip-passes-string", GOOD + '[tvm]\nskip_passes = "FuseOps"\n', "[tvm].skip_passes: must be an array of strings"),
    ("overrides-not-table", GOOD + '[tvm]\nschedule_overrides = "x.py"\n', "[tvm].schedule_overrides: must be a table"),
    ("override-outside", GOOD + '[tvm]\nschedule_overrides = { f = "../../evil.py" }\n',
     "[tvm].schedule_overrides.f: ../../evil.py is outside"),
    ("override-missing", GOOD + '[tvm]\nschedule_overrides = { f = "nope.py" }\n', "[tvm].schedule_overrides.f: file not found"),
    ("override-not-py", GOOD + '[tvm]\nschedule_overrides = { f = "x.npy" }\n', "[tvm].schedule_overrides.f: must be a .py"),
    ("tvm-unknown-key", GOOD + "[tvm]\nopt = 3\n", "[tvm].opt: unknown key"),
    # ---- [iree]: flags that load, run or write something, and other bad values
    *[(f"iree-flag-{n}", IREE_HEAD + INPUTS + f"[iree]\nflags = [\"{flag}\"]\n", "[iree].flags[0]")
      for n, flag in enumerate([
          "--iree-llvmcpu-embedded-linker-path=/bin/sh",
          "--iree-llvmcpu-system-linker-path=/tmp/evil",
          "--iree-llvmcpu-wasm-linker-path=/tmp/evil",
          "--iree-llvmcpu-link-embedded=false",
          "--iree-hal-dump-executable-sources-to=/tmp/x",
          "--iree-hal-dump-executable-binaries-to=/tmp/x",
          "--iree-hal-executable-object-search-path=/tmp",
          "--iree-hal-preprocess-executables-with=sh -c id",
          "--iree-hal-substitute-executable-source=a=/tmp/x.mlir",
          "--iree-codegen-transform-dialect-library=/tmp/x.mlir",
          "--iree-codegen-tuning-spec-path=/tmp/x.mlir",
          "--iree-preprocessing-pass-pipeline=builtin.module()",
          "--iree-plugin=x",
          "--iree-load-plugin=/tmp/x.so",
          "--load-pass-plugin=/tmp/x.so",
          "--load-dialect-plugin=/tmp/x.so",
          "--mlir-pass-pipeline-crash-reproducer=/tmp/x",
          "--mlir-print-ir-tree-dir=/tmp/x",
          "--dump-compilation-phases-to=/tmp/x",
          "--iree-vm-bytecode-source-listing=/tmp/x",
          "-o=/tmp/out.vmfb",
          "--output-format=vm-c",
          "extra.mlir",
      ])],
    ("iree-flags-string", IREE_HEAD + INPUTS + '[iree]\nflags = "--iree-x"\n', "[iree].flags: must be an array of strings"),
    ("iree-unchecked-bare", IREE_HEAD + INPUTS + '[iree]\nunchecked_flags = ["x.mlir"]\n', "[iree].unchecked_flags[0]"),
    ("iree-input-type-injection", IREE_HEAD + INPUTS + '[iree]\ninput_type = "torch --iree-plugin=x"\n',
     "[iree].input_type: must be a name"),
    ("iree-substitute-outside", IREE_HEAD + INPUTS + '[iree]\nsubstitute_configurations = { e = "../x.mlir" }\n',
     "[iree].substitute_configurations.e: ../x.mlir is outside"),
    ("iree-substitute-not-mlir", IREE_HEAD + INPUTS + '[iree]\nsubstitute_configurations = { e = "model.py" }\n',
     "[iree].substitute_configurations.e: must be a .mlir"),
    ("iree-unknown-key", IREE_HEAD + INPUTS + "[iree]\nflag = []\n", "[iree].flag: unknown key"),
    # ---- IREE inputs against the .mlir function's signature (read from the text, no compiler)
    ("iree-dtype-vs-signature", IREE_HEAD + INPUTS.replace('"bfloat16"', '"int32"', 1),
     "inputs[0].dtype: int32, but main's parameter 0 is bfloat16"),
    ("iree-fp8-kind-vs-signature", IREE_HEAD + INPUTS.replace('"bfloat16"', '"float8_e4m3fn"', 1),
     "inputs[0].dtype: float8_e4m3fn, but main's parameter 0 is bfloat16"),
    ("iree-input-count", IREE_HEAD + INPUTS.split("[[inputs]]")[0] + "[[inputs]]" + INPUTS.split("[[inputs]]")[1],
     "inputs: 1 inputs, but main takes 2 parameters"),
]


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    return {**os.environ, "ROOTCAUSE_CACHE": str(tmp_path_factory.mktemp("cache")),
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}


def _folder(tmp_path: Path, text: str | bytes) -> Path:
    """tmp/outside.py, outside.npy, x.mlir and tmp/case/{spec.toml, model.py, model.mlir, ...}."""
    case = tmp_path / "case"
    case.mkdir()
    (tmp_path / "outside.py").write_text("def f(*a):\n    return a[0]\n")
    (tmp_path / "x.mlir").write_text("module {}\n")
    np.save(tmp_path / "outside.npy", np.zeros(4, np.float32))
    shutil.copy(LOWP / "tvm_bf16.py", case / "model.py")
    shutil.copy(LOWP / "iree_bf16.mlir", case / "model.mlir")
    (case / "reference.py").write_text(REFERENCES)
    np.save(case / "x.npy", np.zeros((16, 32), np.float32))
    np.save(case / "c.npy", np.zeros(4, np.complex64))
    (case / "garbage.npy").write_bytes(b"\x93NUMPY\x01\x00garbage")
    (case / "link.py").symlink_to(tmp_path / "outside.py")
    spec = case / "spec.toml"
    spec.write_bytes(text if isinstance(text, bytes) else text.encode())
    return spec


REFERENCES = '''import numpy as np


def ok(a, b):
    return a.astype(np.float32) @ b.astype(np.float32)


def raises(a, b):
    return 1 / 0


def wrong_shape(a, b):
    return np.zeros((3, 3), np.float32)


def returns_none(a, b):
    return None


def two_outputs(a, b):
    return ok(a, b), ok(a, b)
'''


def cli(env: dict[str, str], *args: object) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rootcause", *map(str, args)], env=env, capture_output=True,
                          text=True, timeout=600)


def assert_one_line(proc: subprocess.CompletedProcess, place: str, file: str = "spec.toml") -> str:
    """Exit 2, no traceback, and exactly one error line (analyze's '[analyze ...]' progress
    lines aside) naming the file and the place."""
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip() and not line.startswith("[analyze")
             and not line.startswith("reused cached build")]
    assert len(lines) == 1, proc.stderr
    assert file in lines[0] and place in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize("name,text,place", CASES, ids=[c[0] for c in CASES])
def test_bad_spec_build(env, tmp_path, name, text, place):
    spec = _folder(tmp_path, text)
    assert_one_line(cli(env, "build", spec, "--out", tmp_path / "out"), place)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("name,text,place", CASES, ids=[c[0] for c in CASES])
def test_bad_spec_analyze(env, tmp_path, name, text, place):
    spec = _folder(tmp_path, text)
    good = tmp_path / "case" / "good.toml"
    good.write_text(GOOD.replace('"bad"', '"good"'))
    assert_one_line(cli(env, "analyze", spec, good, "--out", tmp_path / "out", "--target", "llvm"), place)


def test_bad_spec_count():
    assert len(CASES) >= 50 and len({c[0] for c in CASES}) == len(CASES)


def test_spec_missing(env, tmp_path):
    line = assert_one_line(cli(env, "build", tmp_path / "nope.toml", "--out", tmp_path / "out"),
                           "spec file not found", file="nope.toml")
    assert str(tmp_path) in line


def test_pool_fusion_int32(env, tmp_path):
    """The shipped pool_fusion spec with only "float32" changed to "int32" (its low/high of
    -0.5, 0.5 give an integer draw nothing to draw from)."""
    case = tmp_path / "pool_fusion"
    shutil.copytree(POOL, case)
    text = (case / "variants.toml").read_text()
    assert text.count('dtype = "float32"') == 1
    (case / "variants.toml").write_text(text.replace('dtype = "float32"', 'dtype = "int32"'))
    for args in (("build", f"{case / 'variants.toml'}#on", "--out", tmp_path / "out"),
                 ("analyze", f"{case / 'variants.toml'}#on", f"{case / 'variants.toml'}#off", "--out", tmp_path / "o")):
        assert_one_line(cli(env, *args), "[base].inputs[0].low: uniform int32", file="variants.toml")


def test_opt_out_keys_are_recorded(tmp_path):
    """The two opt-outs load, and the spec keeps them for the report."""
    from rootcause import spec as spec_mod

    text = IREE_HEAD.replace('source = "model.mlir"', 'source = "../x.mlir"') + 'allow_outside_paths = true\n' + \
        INPUTS + \
        '[iree]\nflags = ["--iree-opt-level=O2"]\nunchecked_flags = ["--iree-llvmcpu-keep-linker-artifacts"]\n'
    loaded = spec_mod.load(_folder(tmp_path, text))
    assert loaded.allow_outside_paths and loaded.source == tmp_path / "x.mlir"
    assert loaded.options.flags == ["--iree-opt-level=O2", "--iree-llvmcpu-keep-linker-artifacts"]
    assert loaded.options.unchecked_flags == ["--iree-llvmcpu-keep-linker-artifacts"]
    again = spec_mod.VariantSpec.from_dict(loaded.to_dict())
    assert again.allow_outside_paths and again.options.unchecked_flags == loaded.options.unchecked_flags


# ---- references and inputs that only fail once the model is built (a real TVM build, llvm)

# A reference that raises or returns nothing is one line at build (verify.reference_outputs runs it).


@pytest.mark.parametrize("function,place", [
    pytest.param("raises", "[reference].python: reference.py:raises raised ZeroDivisionError"),
    pytest.param("returns_none", "reference.py:returns_none: output 0 is NoneType"),
    ("missing_function", "no function \"missing_function\" in reference.py"),
])
def test_reference_fails_at_build(env, tmp_path, function, place):
    spec = _folder(tmp_path, GOOD + f'[reference]\npython = "reference.py:{function}"\n')
    assert_one_line(cli(env, "build", spec, "--out", tmp_path / "out"), place)


@pytest.mark.parametrize("function,place", [
    ("wrong_shape", "reference.py:wrong_shape: output 0 has shape [3, 3], the model's (bad) [16, 8]"),
    ("two_outputs", "reference.py:two_outputs returns 2 outputs, the model (bad) 1"),
])
@pytest.mark.slow
def test_reference_wrong_outputs_at_analyze(env, tmp_path, function, place):
    spec = _folder(tmp_path, GOOD + f'[reference]\npython = "reference.py:{function}"\n')
    good = tmp_path / "case" / "good.toml"
    good.write_text(GOOD.replace('"bad"', '"good"'))
    assert_one_line(cli(env, "analyze", spec, good, "--out", tmp_path / "out", "--target", "llvm", "--no-confirm",
                        "--budget-s", "0.2"), place)


def test_inputs_the_model_refuses(env, tmp_path):
    """int32 inputs to a bfloat16 model: the spec is valid on its own, and the TVM frontend checks
    the inputs against the entry function's parameters before building (check_signature)."""
    text = HEAD + '[[inputs]]\nshape = [16, 32]\ndtype = "int32"\nlow = 0\nhigh = 4\n' \
                  '[[inputs]]\nshape = [32, 8]\ndtype = "bfloat16"\n'
    spec = _folder(tmp_path, text)
    assert_one_line(cli(env, "build", spec, "--out", tmp_path / "bundle"),
                    "inputs[0].dtype: int32, but main's parameter 0 is bfloat16")