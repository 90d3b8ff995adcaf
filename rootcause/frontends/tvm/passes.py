"""The passes of the Relax pipeline a TVM build runs for a target, asked of TVM in a child before
anything is built, so that a pass name the spec skips is checked in a second, not after a build.

    python -m rootcause.frontends.tvm.passes TARGET    prints the pass names as a JSON list
"""
from __future__ import annotations

import json
import os
import sys

from rootcause import child
from rootcause.errors import ToolFailed
from rootcause.spec import VariantSpec


def check_skips(spec: VariantSpec) -> None:
    """UsageError for a skip_passes name that is not a pass of the spec's target pipeline."""
    from rootcause.frontends.tvm.build import check_skips as check

    if not spec.options.skip_passes:
        return
    proc = child.run([sys.executable, "-m", __name__, spec.target], env=child.python_env(base=dict(os.environ)))
    try:
        names = json.loads(proc.stdout) if proc.returncode == 0 else None
    except json.JSONDecodeError:
        names = None
    if not isinstance(names, list):
        raise ToolFailed(f"TVM could not list the {spec.target} pipeline's passes: "
                         f"{child.first_error_line(proc.stdout + proc.stderr)}")
    check(spec, names)


def _main(target: str) -> int:
    from rootcause.frontends.tvm.build import pipeline_passes

    print(json.dumps(pipeline_passes(target)))
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1]))
