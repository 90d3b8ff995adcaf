"""A bisection's files: OUT/bisect.json, the result `rootcause bisect` writes (bisect.Bisection.run's
document), and its measurement cache, <cache>/bisect/KEY.json: one candidate measured against
the good version ({median, low, high, good_median_s} of candidate time / good time, or
{outputs_differ: true}), keyed by both bundles' build keys, the budget and MEASURE_VERSION."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from rootcause.artifacts import schema
from rootcause.artifacts.schema import NUM, Opt
from rootcause.errors import UsageError
from rootcause.fileio import cache_dir, read_json, write_json

RESULT = "bisect.json"
MEASURE_VERSION = 1  # bump when what a cached measurement means changes
MEASURED = {"median?": NUM, "low?": NUM, "high?": NUM, "good_median_s?": Opt(NUM), "outputs_differ?": bool}


def result_path(out: Path) -> Path:
    return Path(out) / RESULT


def write_result(out: Path, doc: dict[str, Any]) -> Path:
    return write_json(result_path(out), doc)


def _cached(build_keys: list[Any], budget_s: float) -> Path:
    key = hashlib.sha256(json.dumps([MEASURE_VERSION, build_keys, budget_s]).encode()).hexdigest()[:16]
    return cache_dir() / "bisect" / f"{key}.json"


def cached_measurement(build_keys: list[Any], budget_s: float) -> dict[str, Any] | None:
    """The cached measurement of these two builds at this budget; None when there is none or
    it cannot be read (then it is measured again and rewritten)."""
    path = _cached(build_keys, budget_s)
    if not path.is_file():
        return None
    try:
        doc = read_json(path, "no cached measurement")
        schema.check(doc, MEASURED, str(path))
    except UsageError:
        return None
    return doc if doc.get("outputs_differ") or {"median", "low", "high"} <= set(doc) else None


def cache_measurement(build_keys: list[Any], budget_s: float, record: dict[str, Any]) -> None:
    write_json(_cached(build_keys, budget_s), record)
