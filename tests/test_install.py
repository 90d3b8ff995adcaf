"""An install without a working C compiler: `pip install -e .` still succeeds (the compiled
readers are optional), says which readers it uses, and `rootcause inspect` gives the same rows as
the install with the compiled readers."""
from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ROOTCAUSE = Path(sys.executable).parent / "rootcause"


def test_install_without_a_c_compiler_reads_the_same_rows(tmp_path):
    tree = tmp_path / "src"
    files = subprocess.run(["git", "ls-files", "-z", "rootcause", "parsers", "pyproject.toml", "setup.py", "README.md"],
                           cwd=ROOT, capture_output=True, text=True, check=True).stdout.split("\0")
    for name in filter(None, files):
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        (tree / name).write_bytes((ROOT / name).read_bytes())
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    # the dependencies come from this environment: a .pth to its site-packages
    site = subprocess.run([venv / "bin" / "python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    Path(site, "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    env = {**os.environ, "CC": "/bin/false", "CXX": "/bin/false"}
    # as a user installs: build isolation brings setuptools from the registry, as .ci/run does
    install = subprocess.run([venv / "bin" / "python", "-m", "pip", "install", "-q", "--no-deps", "-e", tree],
                             capture_output=True, text=True, env=env, cwd=tmp_path)
    assert install.returncode == 0, install.stderr[-2000:]
    assert not list((tree / "parsers").glob("*.so"))  # nothing was compiled
    version = subprocess.run([venv / "bin" / "rootcause", "--version"], capture_output=True, text=True, cwd=tmp_path)
    assert "cubin python" in version.stdout and "ncu-csv python" in version.stdout, version
    binaries = sorted(str(p) for p in (ROOT / "fixtures").rglob("*.cubin"))[:20]
    assert binaries
    pure = subprocess.run([venv / "bin" / "rootcause", "inspect", *binaries, "--format", "json"],
                          capture_output=True, text=True, cwd=tmp_path)
    here = subprocess.run([ROOTCAUSE, "inspect", *binaries, "--format", "json"], capture_output=True, text=True,
                          cwd=tmp_path)
    assert pure.returncode == here.returncode == 0, pure.stderr + here.stderr
    assert pure.stdout == here.stdout and pure.stdout.count('"name"') >= len(binaries)
