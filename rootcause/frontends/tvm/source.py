"""Source loading: the IRModule of a spec's TVMScript or Python file."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from rootcause.child import first_error_line
from rootcause.errors import UsageError
from rootcause.spec import VariantSpec

_TVMSCRIPT_RE = re.compile(r"^@(I|tvm\.script\.ir|ir)\.ir_module", re.M)


def load_source(spec: VariantSpec) -> Any:
    """The IRModule of a TVMScript file, or of a Python file exposing Module / mod / a factory."""
    import tvm

    text = spec.source.read_text(encoding="utf-8")
    if _TVMSCRIPT_RE.search(text):
        mod = parse_tvmscript(text, spec.source)
    else:
        mod = _from_python(spec.source)
    if not isinstance(mod, tvm.IRModule):
        raise UsageError(f"{spec.source}: does not define an IRModule")
    if spec.entry not in [gv.name_hint for gv in mod.get_global_vars()]:
        raise UsageError(f"{spec.where('', 'entry')}: no function \"{spec.entry}\" in {spec.source.name}; "
                         f"functions: {', '.join(sorted(gv.name_hint for gv in mod.get_global_vars()))}")
    return mod


def parse_tvmscript(text: str, file: Path) -> Any:
    """Parse TVMScript text (leading import lines dropped) with I, R, T bound and s_tir on."""
    import tvm
    from tvm.script import ir as I, relax as R, tirx as T

    lines = text.splitlines()
    start = 0
    while start < len(lines) and (not lines[start].strip() or lines[start].startswith(("from ", "import ", "#"))):
        start += 1
    try:
        return tvm.script.from_source("\n".join(lines[start:]) + "\n", extra_vars=dict(I=I, R=R, T=T),
                                      s_tir=True)
    except Exception as err:  # TVM raises DiagnosticError and others; one line is what we owe
        raise UsageError(f"{file}: TVMScript does not parse: {first_error_line(str(err) or type(err).__name__)}") \
            from None


def _from_python(path: Path) -> Any:
    import runpy

    import tvm

    try:
        namespace = runpy.run_path(str(path))
    except Exception as err:
        raise UsageError(f"{path}: running it failed: {type(err).__name__}: {err}") from None
    for key in ("Module", "mod"):
        if isinstance(namespace.get(key), tvm.IRModule):
            return namespace[key]
    for key in ("make_module", "get_module", "module", "build_module"):
        if callable(namespace.get(key)):
            return namespace[key]()
    raise UsageError(f"{path}: defines no IRModule 'Module' or 'mod' and no factory "
                     "make_module()/get_module()")
