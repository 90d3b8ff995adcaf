"""Variant spec loading and its one-line errors (no compiler needed)."""
from pathlib import Path

import pytest

from rootcause import spec
from rootcause.errors import UsageError

CASE = Path(__file__).resolve().parent.parent / "fixtures" / "cases" / "pool_fusion"
VARIANTS = CASE / "variants.toml"


def write(tmp_path: Path, text: str, name: str = "spec.toml") -> Path:
    (tmp_path / "graph.py").write_text((CASE / "graph_tvmscript.py").read_text())
    path = tmp_path / name
    path.write_text(text)
    return path


GOOD = '''name = "g"
frontend = "tvm"
source = "graph.py"
target = "llvm"
entry = "main"
[[inputs]]
shape = [1, 16, 64, 64]
'''


def test_each_variant_is_base_merged_with_its_table():
    off = spec.load(f"{VARIANTS}#off")
    assert off.options.skip_passes == ["FuseOps", "FuseTIR"]
    assert off.source == CASE / "graph_tvmscript.py"
    assert off.inputs[0].shape == [1, 16, 64, 64] and off.inputs[0].low == -0.5  # from [base]
    assert off.reference.function == "reference" and off.reference.rtol == 2e-4
    assert spec.load(f"{VARIANTS}#partial").options.dataflow_boundaries_after == ["pool2d"]
    serial = spec.load(f"{VARIANTS}#serial")
    assert serial.options.schedule_overrides == {"fused_pool2d_add2": CASE / "serial_kernel.py"}
    on = spec.load(f"{VARIANTS}#on")
    assert on.options.skip_passes == [] and on.target == "cuda:sm_90" and on.name == "pool_fusion-on"


def test_round_trip_through_dict():
    s = spec.load(f"{VARIANTS}#serial")
    assert spec.VariantSpec.from_dict(s.to_dict()) == s


def test_multi_variant_file_without_selection_lists_names():
    with pytest.raises(UsageError, match=r"variants.toml: holds several variants.*off, partial, on, serial"):
        spec.load(VARIANTS)
    with pytest.raises(UsageError, match=r"no variant 'fast'; variants: off, partial, on, serial"):
        spec.load(f"{VARIANTS}#fast")


def test_deep_merge_replaces_lists_and_merges_tables():
    merged = spec.deep_merge({"tvm": {"opt_level": 3, "skip_passes": ["A"]}}, {"tvm": {"skip_passes": ["B"]}})
    assert merged == {"tvm": {"opt_level": 3, "skip_passes": ["B"]}}


@pytest.mark.parametrize("extra, message", [
    ('colour = "red"\n', r'spec.toml: inputs\[0\]: unknown key "colour"; valid: shape, dtype'),
    ('[tvm]\nskip = ["FuseOps"]\n', r'spec.toml: \[tvm\].skip: unknown key; valid: opt_level, skip_passes'),
    ('[tvm]\nskip_passes = "FuseOps"\n', r'\[tvm\].skip_passes: must be an array of strings'),
    ('[reference]\npython = "nope.py:ref"\n', r'\[reference\].python: file not found: nope.py'),
    ('[tvm.schedule_overrides]\nf = "missing.py"\n', r'\[tvm\].schedule_overrides.f: file not found: missing.py'),
])
def test_bad_keys_name_the_place(tmp_path, extra, message):
    with pytest.raises(UsageError, match=message):
        spec.load(write(tmp_path, GOOD + extra))


@pytest.mark.parametrize("old, new, message", [
    ('frontend = "tvm"', 'frontend = "tensorrt"', r'frontend: unknown frontend "tensorrt"; valid: tvm, iree, xla'),
    ('target = "llvm"', 'target = "cuda:90"', r'target: unknown target "cuda:90"; valid:'),
    ('source = "graph.py"', 'source = "other.py"', r'spec.toml: source: file not found: other.py'),
    ('shape = [1, 16, 64, 64]', 'shape = [1, -16]', r'inputs\[0\].shape: must be an array of non-negative'),
    ('shape = [1, 16, 64, 64]', 'shape = [1]\ndistribution = "gauss"', r'inputs\[0\].distribution: unknown'),
])
def test_bad_values_name_the_place(tmp_path, old, new, message):
    with pytest.raises(UsageError, match=message):
        spec.load(write(tmp_path, GOOD.replace(old, new)))


def test_unknown_top_level_key(tmp_path):
    with pytest.raises(UsageError, match=r'spec.toml: unknown key "colour"; valid: name, frontend, source'):
        spec.load(write(tmp_path, 'colour = "red"\n' + GOOD))


def test_variant_errors_name_the_variant_table(tmp_path):
    text = (VARIANTS.read_text().replace('source = "graph_tvmscript.py"', 'source = "graph.py"')
            + '\n[variants.bad.tvm]\nopt_level = 9\n')
    for name in ("reference.py", "serial_kernel.py"):
        (tmp_path / name).write_text((CASE / name).read_text())
    path = write(tmp_path, text, "variants.toml")
    with pytest.raises(UsageError, match=r"variants.toml: \[variants.bad.tvm\].opt_level: must be an integer 0..4"):
        spec.load(f"{path}#bad")
    assert spec.load(f"{path}#on").where("tvm", "skip_passes") == "variants.toml: [base.tvm].skip_passes"


def test_an_unknown_key_is_named_in_the_table_it_was_written_in(tmp_path):
    """A typo under [variants.off.tvm] is reported there, not under [base.tvm] (the merged table's
    first place), with the valid key it is closest to; one under [base.tvm] is named there."""
    for name in ("graph_tvmscript.py", "reference.py", "serial_kernel.py"):
        (tmp_path / name).write_text((CASE / name).read_text())
    typo = VARIANTS.read_text().replace('[variants.off.tvm]\nskip_passes', '[variants.off.tvm]\nskip_pass')
    assert typo != VARIANTS.read_text()
    path = write(tmp_path, typo, "variants.toml")
    with pytest.raises(UsageError, match=r'^variants.toml: \[variants.off.tvm\].skip_pass: unknown key '
                                         r'\(did you mean "skip_passes"\?\)'):
        spec.load(f"{path}#off")
    in_base = VARIANTS.read_text().replace("[base.tvm]\nopt_level = 3", "[base.tvm]\nopt_levl = 3")
    path = write(tmp_path, in_base, "variants.toml")
    with pytest.raises(UsageError, match=r"^variants.toml: \[base.tvm\].opt_levl: unknown key"):
        spec.load(f"{path}#off")
    top = VARIANTS.read_text().replace("[variants.on.tvm]", "[variants.on]\ntarget_cpu = 1\n\n[variants.on.tvm]")
    path = write(tmp_path, top, "variants.toml")
    with pytest.raises(UsageError, match=r"^variants.toml: \[variants.on\].target_cpu: unknown key"):
        spec.load(f"{path}#on")


def test_not_toml_and_missing_file(tmp_path):
    with pytest.raises(UsageError, match=r"spec.toml: not valid TOML"):
        spec.load(write(tmp_path, "name = \n"))
    with pytest.raises(UsageError, match=r"nothere.toml: spec file not found"):
        spec.load(tmp_path / "nothere.toml")


def test_with_target_checks_the_target():
    s = spec.load(f"{VARIANTS}#on")
    assert spec.with_target(s, "llvm").target == "llvm"
    with pytest.raises(UsageError, match=r'--target: unknown target "gpu"'):
        spec.with_target(s, "gpu")
