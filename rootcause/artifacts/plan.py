"""OUT/plan.json: what `analyze` built. Keys: a, b (variant names), target, specs ({a, b}:
VariantSpec.to_dict()), hybrids (Hybrid.to_dict() each), failed ({name: why}), notes, bundles
({name: path relative to OUT})."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from rootcause.artifacts import schema
from rootcause.artifacts.schema import Map
from rootcause.errors import UsageError
from rootcause.fileio import read_json, write_json

PLAN = "plan.json"


def write_plan(out: Path, plan: dict[str, Any]) -> Path:
    return write_json(Path(out) / PLAN, plan)


SHAPE = {"a": str, "b": str, "target?": str, "specs?": Map(dict), "hybrids?": [dict], "failed?": Map(str),
         "notes?": [str], "bundles": Map(str)}


def read_plan(out: Path) -> dict[str, Any]:
    """OUT/plan.json, checked: its shape, and bundle paths that stay inside OUT."""
    file = Path(out) / PLAN
    plan = read_json(file, f"no plan here; run `rootcause analyze A B --bundle-only --out {out}` "
                           "first (or pass the --out used then)")
    schema.check(plan, SHAPE, str(file))
    for name, rel in plan["bundles"].items():
        if Path(rel).is_absolute() or ".." in Path(rel).parts:
            raise UsageError(f"{file}: bundles.{name}: {rel!r} is not a path inside {out}")
    return plan
