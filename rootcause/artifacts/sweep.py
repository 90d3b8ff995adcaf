"""The files of a sweep (`rootcause sweep`): OUT/sweep.json, and per pair its stage records.

OUT/sweep.json (schema 1): {schema_version, name, sweep_file, pairs_root, created_utc,
updated_utc, executor, rows: [row, ...]}, one row per pair in the sweep file's order (the
keys rootcause.report.sweep.pair_row writes, plus id, a, b, target, status, stage, error,
report). It is rewritten after every finished pair, so an interrupted sweep leaves the rows
that were done.

A pair's folder (PAIRS/<id>/) has the layout of `rootcause analyze --out`; each stage
publishes its part whole (a renamed staging folder, or one atomic file) with a record of
the stage key it was made for:
- PAIRS/<id>/sweep-build.json: the build stage's key (beside plan.json and bundles/);
- PAIRS/<id>/run/.sweep-run.json: the run stage's key (inside the run directory);
- PAIRS/<id>/result.json: the pair's row and the attribution stage's key, written last.
A stage whose record is missing or names another key is done again.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from rootcause.artifacts import schema
from rootcause.artifacts.schema import NUM, Opt
from rootcause.fileio import read_json, write_json

SCHEMA_VERSION = 1
STAGES = ("build", "run", "attribute")  # a pair's stages, in order
SWEEP = "sweep.json"
BUILD_RECORD = "sweep-build.json"
RUN_RECORD = ".sweep-run.json"
RESULT = "result.json"


def write_sweep(out: Path, doc: dict[str, Any]) -> Path:
    return write_json(Path(out) / SWEEP, {"schema_version": SCHEMA_VERSION, **doc})


def read_sweep(out: Path) -> dict[str, Any]:
    return read_json(Path(out) / SWEEP, "no sweep.json here")


def stage_key(path: Path) -> str | None:
    """The key a stage record names; None when the record is missing or unreadable."""
    try:
        doc = read_json(path, "missing")
    except Exception:  # a half-written or foreign file: the stage is done again
        return None
    return doc.get("key") if isinstance(doc, dict) else None


def write_record(path: Path, key: str, **extra: Any) -> Path:
    return write_json(path, {"key": key, **extra})


# What the summary reads of a pair's row (rootcause.sweep and report/sweep): a row of another shape
# (a file edited by hand, another release's) is no record, and its stage is done again.
_S, _N = Opt(str), Opt(NUM)
ROW_SHAPE = {"id": str, "a": str, "b": str, "target": str, "report": str, "status": str, "stage": _S,
             "error": _S, "verdict?": _S, "significant?": Opt(bool), "ratio?": _N, "ratio_low?": _N,
             "ratio_high?": _N, "delta_ns?": _N, "delta_low_ns?": _N, "delta_high_ns?": _N, "top_unit?": _S,
             "top_unit_kernels?": Opt({"a": [str], "b": [str]}), "units?": [{"unit": int, "a": [str], "b": [str]}],
             "cause?": [str], "confirmation?": Opt([{"name": _S, "kind": _S, "verdict": _S}]), "closure?": _N}


def read_result(folder: Path) -> dict[str, Any] | None:
    try:
        doc = read_json(Path(folder) / RESULT, "missing")
        if not isinstance(doc, dict) or not isinstance(doc.get("row"), dict):
            return None
        schema.check(doc["row"], ROW_SHAPE, str(Path(folder) / RESULT))
    except Exception:  # a half-written, foreign or edited file: the stage is done again
        return None
    return doc
