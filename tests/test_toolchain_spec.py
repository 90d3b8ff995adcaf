"""The `toolchain` and `python` keys of a variant spec: what is accepted, and each refusal as
one line naming the TOML place (exit status 2 through the real CLI). Nothing here touches the
package registry: specs are only loaded."""
from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from rootcause import spec as spec_mod
from rootcause.errors import UsageError

ROOT = Path(__file__).resolve().parent.parent
HEAD = '''[base]
name = "t"
frontend = "iree"
source = "model.mlir"
target = "llvm"
entry = "main"
'''
MLIR = "func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {\n  return %x : tensor<4xf32>\n}\n"
WHEEL = "iree_base_compiler-3.9.0-cp311-cp311-manylinux_2_28_x86_64.whl"


def _write(folder: Path, variant: str, top: str = "") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model.mlir").write_text(MLIR)
    path = folder / "spec.toml"
    path.write_text(top + HEAD + "[variants.v]\n" + variant)
    return path


@pytest.mark.parametrize("value, want", [
    ('"iree-base-compiler==3.12.0"', ["iree-base-compiler==3.12.0"]),
    ('"IREE_Base.Compiler==3.7.1"', ["iree-base-compiler==3.7.1"]),  # PEP 503 names compare normalized
    ('["iree-base-compiler==3.7.1", "iree-base-runtime==3.7.0"]', ["iree-base-compiler==3.7.1",
                                                                  "iree-base-runtime==3.7.0"]),
    ('"iree-base-compiler==3.4.0rc20250415"', ["iree-base-compiler==3.4.0rc20250415"]),
])
def test_pins_accepted(tmp_path: Path, value: str, want: list[str]) -> None:
    spec = spec_mod.load(f"{_write(tmp_path, f'toolchain = {value}')}#v")
    assert spec.toolchain == want and spec.python is None
    assert spec_mod.VariantSpec.from_dict(spec.to_dict()).toolchain == want  # the build child's copy


def test_wheel_inside_the_folder(tmp_path: Path) -> None:
    (tmp_path / "wheels").mkdir()
    (tmp_path / "wheels" / WHEEL).write_bytes(b"PK")
    path = _write(tmp_path, 'toolchain = "wheels/' + WHEEL + '"')
    spec = spec_mod.load(f"{path}#v")
    assert spec.toolchain == [str((tmp_path / 'wheels' / WHEEL).resolve())]


def test_python_of_an_environment(tmp_path: Path) -> None:
    venv.create(tmp_path / "env", with_pip=False)
    path = _write(tmp_path, 'python = "env/bin/python"')
    spec = spec_mod.load(f"{path}#v")
    assert spec.python == tmp_path / "env" / "bin" / "python"  # the venv's link, not its target
    assert spec.toolchain == []


REFUSED = [
    ('toolchain = "numpy==2.0.0"', "[variants.v].toolchain", "numpy refused"),
    ('toolchain = "iree-base-compiler>=3.0"', "[variants.v].toolchain", "refused"),
    ('toolchain = "iree-base-compiler"', "[variants.v].toolchain", "refused"),
    ('toolchain = "iree-base-compiler==3.0.0 --index-url http://x"', "[variants.v].toolchain", "refused"),
    ('toolchain = "git+https://github.com/iree-org/iree"', "[variants.v].toolchain", "refused"),
    ('toolchain = "iree-base-runtime==3.3.0"', "[variants.v].toolchain", "names no compiler"),
    ('toolchain = ["iree-base-compiler==3.3.0", "iree-base-compiler==3.4.0"]', "[variants.v].toolchain[1]",
     "named twice"),
    ('toolchain = ["iree-base-compiler==3.3.0", "apache-tvm==0.26.0"]', "[variants.v].toolchain[1]",
     "apache-tvm refused"),
    ("toolchain = []", "[variants.v].toolchain", "must be"),
    ("toolchain = 3", "[variants.v].toolchain", "must be"),
    ('toolchain = "missing.whl"', "[variants.v].toolchain", "file not found"),
    ('toolchain = "../outside/' + WHEEL + '"', "[variants.v].toolchain", "outside the spec's folder"),
    ('toolchain = "wheels/numpy-2.0.0-cp311-cp311-linux_x86_64.whl"', "[variants.v].toolchain", "numpy refused"),
    ('python = "/usr/bin/python3"', "[variants.v].python", "outside the spec's folder"),
    ('python = "nothing/bin/python"', "[variants.v].python", "no executable python"),
    ('python = "model.mlir"', "[variants.v].python", "no executable python"),
    ('toolchain = "iree-base-compiler==3.3.0"\npython = "env/bin/python"', "[variants.v].python", "not both"),
]


@pytest.mark.parametrize("variant, place, words", REFUSED, ids=[r[0][:50] for r in REFUSED])
def test_refused_in_one_line(tmp_path: Path, variant: str, place: str, words: str) -> None:
    folder = tmp_path / "case"
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / WHEEL).write_bytes(b"PK")
    (folder / "wheels").mkdir(parents=True)
    (folder / "wheels" / "numpy-2.0.0-cp311-cp311-linux_x86_64.whl").write_bytes(b"PK")
    path = _write(folder, variant)
    with pytest.raises(UsageError) as err:
        spec_mod.load(f"{path}#v")
    assert str(err.value).startswith(f"spec.toml: {place}: ") and words in str(err.value), str(err.value)


def test_tvm_toolchain_names_tvm_only(tmp_path: Path) -> None:
    path = _write(tmp_path, 'toolchain = "iree-base-compiler==3.3.0"')
    path.write_text(path.read_text().replace('"iree"', '"tvm"'))
    with pytest.raises(UsageError, match="may name only apache-tvm"):
        spec_mod.load(f"{path}#v")


def test_outside_python_allowed_when_the_spec_says_so(tmp_path: Path) -> None:
    path = _write(tmp_path, f'python = "{sys.executable}"', top="")
    path.write_text(path.read_text().replace("[base]\n", "[base]\nallow_outside_paths = true\n"))
    assert spec_mod.load(f"{path}#v").python == Path(sys.executable)


def test_cli_exit_2_one_line(tmp_path: Path) -> None:
    path = _write(tmp_path, 'toolchain = "torch==2.5.0"')
    proc = subprocess.run([sys.executable, "-m", "rootcause", "build", f"{path}#v", "--out", str(tmp_path / "b")],
                          capture_output=True, text=True, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "spec.toml: [variants.v].toolchain: torch refused" in lines[0], proc.stderr
