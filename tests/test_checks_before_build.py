"""What a frontend checks with its installed compiler is checked for both variants before the
first build starts: a typo in B's pass or flag names is one line and exit 2, with nothing built
and nothing written under --out (it was found after building A, with A's bundle left behind)."""
import os
import shutil
import subprocess
import sys
from pathlib import Path


ROOT = Path(__file__).resolve().parent.parent
POOL = ROOT / "fixtures" / "cases" / "pool_fusion"
EINSUM = ROOT / "fixtures" / "cases" / "einsum_fusion"


def analyze(tmp_path: Path, spec: Path, a: str, b: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "ROOTCAUSE_CACHE": str(tmp_path / "cache")}
    return subprocess.run([sys.executable, "-m", "rootcause", "analyze", f"{spec}#{a}", f"{spec}#{b}",
                           "--target", "llvm", "--out", str(tmp_path / "out")],
                          env=env, capture_output=True, text=True, timeout=600)


def assert_refused_before_building(proc: subprocess.CompletedProcess, tmp_path: Path) -> str:
    errors = [line for line in proc.stderr.splitlines() if line.startswith("rootcause analyze:")]
    assert proc.returncode == 2 and len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "building" not in proc.stderr, proc.stderr
    assert not (tmp_path / "out").exists()
    assert not list((tmp_path / "cache").glob("builds/*/manifest.json"))
    return errors[0]


def test_a_pass_name_typo_in_b_is_found_before_a_is_built(tmp_path):
    case = tmp_path / "case"
    shutil.copytree(POOL, case)
    spec = case / "variants.toml"
    spec.write_text(spec.read_text().replace('skip_passes = ["FuseOps", "FuseTIR"]',
                                             'skip_passes = ["FuseOp", "FuseTIR"]'))
    line = assert_refused_before_building(analyze(tmp_path, spec, "on", "off"), tmp_path)
    assert 'variants.toml: [variants.off.tvm].skip_passes[0]: unknown pass "FuseOp"' in line
    assert '(did you mean "FuseOps"?)' in line


def test_an_iree_flag_name_typo_in_b_is_found_before_a_is_built(tmp_path):
    """The truth is iree-compile's own option list (--help-hidden): the misspelt name is not in it,
    the one suggested is."""
    from rootcause.frontends.iree.compile import iree_compile_path

    right = "--iree-dispatch-creation-topk-split-reduction"
    typo = right[:-1]
    help_text = subprocess.run([str(iree_compile_path()), "--help-hidden"], capture_output=True, text=True).stdout
    assert f"  {right}=" in help_text and f"  {typo}=" not in help_text
    case = tmp_path / "case"
    shutil.copytree(EINSUM, case)
    spec = case / "variants.toml"
    text = spec.read_text()
    assert "[variants.fused_small.iree]" not in text
    spec.write_text(text + f'\n[variants.fused_small.iree]\nflags = ["{typo}=2"]\n')
    line = assert_refused_before_building(analyze(tmp_path, spec, "split_small", "fused_small"), tmp_path)
    assert f"[variants.fused_small.iree].flags[0]: {typo} is not an option of this iree-compile" in line
    assert f'(did you mean "{right}"?)' in line
