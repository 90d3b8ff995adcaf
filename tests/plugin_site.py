"""A site folder where the npgraph frontend (tests/plugins/npgraph) is installed as a plug-in
would be: a distribution whose only metadata is its entry point in 'rootcause.frontends'.
Processes that have PLUGINS and the site folder on their path find it; no file of rootcause
names it."""
from __future__ import annotations

import os
from pathlib import Path

from rootcause import frontends

PLUGINS = Path(__file__).resolve().parent / "plugins"

SOURCE = '''
import numpy as np
STAGES = [
    ("scale", lambda x: x * 2.0),
    ("shift", lambda x: x + 1.0),
    ("square", lambda x: x * x),
]
'''
REFERENCE = "import numpy as np\n\ndef reference(x):\n    return ((x * 2.0) + 1.0) ** 2\n"


def install(site: Path) -> Path:
    """The distribution 'npgraph-frontend' as pip would write its metadata; the site folder."""
    info = site / "npgraph_frontend-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: npgraph-frontend\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{frontends.ENTRY_POINT_GROUP}]\nnpgraph = npgraph\n")
    return site


def activate(site: Path, monkeypatch) -> None:
    """npgraph found as an installed plug-in is found: on this process's path and on that of
    every process it starts (measuring children, Ray nodes), through PYTHONPATH."""
    for folder in (PLUGINS, site):
        monkeypatch.syspath_prepend(str(folder))
    paths = [str(PLUGINS), str(site), *filter(None, [os.environ.get("PYTHONPATH")])]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(paths))


def spec_text(shape: tuple[int, int] = (256, 256), seed: int = 1) -> str:
    """Two variants of the stages: unfused (a kernel each) and fused (one kernel)."""
    return f"""
[base]
name = "npg"
frontend = "npgraph"
source = "graph.py"
target = "llvm"
entry = "main"
[[base.inputs]]
shape = [{shape[0]}, {shape[1]}]
dtype = "float32"
seed = {seed}
[base.reference]
python = "reference.py:reference"
rtol = 1e-5
atol = 1e-6
[variants.unfused.npgraph]
fuse = false
[variants.fused.npgraph]
fuse = true
"""


def write_case(folder: Path, shape: tuple[int, int] = (256, 256), seed: int = 1) -> Path:
    """A case folder (graph.py, reference.py, variants.toml); the spec file."""
    folder.mkdir(parents=True)
    (folder / "graph.py").write_text(SOURCE)
    (folder / "reference.py").write_text(REFERENCE)
    (folder / "variants.toml").write_text(spec_text(shape, seed))
    return folder / "variants.toml"
