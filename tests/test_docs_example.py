"""docs/USAGE.md's worked example: its spec loads as written, its reference agrees with what the
MLIR computes (NumPy against the IREE build, in the spec's tolerance), and the error line the
page quotes is the one rootcause prints for that mistake."""
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

from rootcause import spec as spec_mod
from rootcause.errors import UsageError

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "docs" / "example"
USAGE = ROOT / "docs" / "USAGE.md"


def test_the_example_spec_loads_and_the_variants_differ_in_one_flag():
    a = spec_mod.load(f"{EXAMPLE / 'variants.toml'}#default")
    b = spec_mod.load(f"{EXAMPLE / 'variants.toml'}#undistributed")
    assert (a.source, a.inputs, a.reference.file) == (b.source, b.inputs, b.reference.file)
    assert a.options.flags == [] and b.options.flags == ["--iree-llvmcpu-disable-distribution"]


def test_the_unknown_key_line_the_page_quotes_is_what_rootcause_says(tmp_path):
    quoted = re.search(r"\(`(\[variants\.undistributed\.iree\]\.flag: unknown key [^`]*)`\)", USAGE.read_text())
    assert quoted
    shutil.copytree(EXAMPLE, tmp_path / "example")
    path = tmp_path / "example" / "variants.toml"
    path.write_text(path.read_text().replace('[variants.undistributed.iree]\nflags', '[variants.undistributed.iree]\nflag'))
    try:
        spec_mod.load(f"{path}#undistributed")
    except UsageError as err:
        assert str(err).startswith(f"variants.toml: {quoted.group(1)}"), str(err)
    else:
        raise AssertionError("the misspelt key was accepted")


def test_the_reference_is_what_the_mlir_computes(tmp_path):
    """The reference against NumPy's own formula on the spec's inputs, and the IREE build's outputs
    against the reference: `rootcause run` verifies them (exit 0; 1 where they differ)."""
    from rootcause.inputs import make_input

    spec = spec_mod.load(f"{EXAMPLE / 'variants.toml'}#default")
    x, w, b = (make_input(i) for i in spec.inputs)
    out = tmp_path / "bundle"
    build = subprocess.run([sys.executable, "-m", "rootcause", "build", f"{EXAMPLE / 'variants.toml'}#default",
                            "--out", str(out)], capture_output=True, text=True, cwd=tmp_path)
    assert build.returncode == 0, build.stderr
    np.testing.assert_allclose(np.load(out / "reference" / "0.npy"), np.maximum(x @ w + b, 0.0), rtol=1e-5, atol=1e-5)
    run = subprocess.run([sys.executable, "-m", "rootcause", "run", str(out), "--out", str(tmp_path / "run"),
                          "--profile", "none", "--device", "cpu", "--budget-s", "0.5", "--warmup-calls", "1"],
                         capture_output=True, text=True, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
