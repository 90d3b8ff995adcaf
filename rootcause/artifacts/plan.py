"""OUT/plan.json: what `analyze` built. Keys: a, b (variant names), target, specs ({a, b}:
VariantSpec.to_dict()), hybrids (Hybrid.to_dict() each), failed ({name: why}), notes, bundles
({name: path relative to OUT})."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from rootcause.fileio import read_json, write_json

PLAN = "plan.json"


def write_plan(out: Path, plan: dict[str, Any]) -> Path:
    return write_json(Path(out) / PLAN, plan)


def read_plan(out: Path) -> dict[str, Any]:
    return read_json(Path(out) / PLAN, f"no plan here; run `rootcause analyze A B --bundle-only --out {out}` "
                                       "first (or pass the --out used then)")
