"""attribution.json: the analysis result, its schema, its version and the migration of older files.

The one owner of the file. Writers (rootcause.pipeline) build the document with
Attribution.to_dict() plus the sections below; readers (rootcause report, the gallery, tests)
get it through `load`, which checks it and migrates schema 1 to 2 once, so renderers read
only the document and never another file.

Schema 2 (additive over 1): required keys are _REQUIRED (a unit's, _UNIT_REQUIRED); optional
sections, checked when present: kernels (per-kernel launch statistics: variant, kernel, unit,
launches_per_call, duration_ns, time_per_call_ns, grid, block, registers, shared_bytes,
local_bytes), timeline ({a|b: one call's kernels}), device (a rootcause.gpus.DEVICES key),
measurement ({file, protocol, rounds, budget_s, variants}), command, confirmation
(analysis.confirm.evaluate), environment (env.json of the run), withdrawals (each verdict a check
took back: the check's name, its reason, the unit or none for the whole graph), catalogs ({a|b: {kernels:
{name: CatalogKernel dict}, versions: {...}, toolchain: the manifest's compiler and runtime record,
error: str | None}}: what the catalogs say of each kernel, embedded so a report needs no bundle). Schema 1 files lack 'catalogs' (and sometimes
'environment'): `load` reads them from the variants' catalog paths and the env.json beside
their profiles; a schema 1 file without 'kernels' or 'timeline' is refused.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from rootcause.artifacts import bundle, rundir, schema
from rootcause.artifacts.schema import ANY, NUM, Map, Opt
from rootcause.errors import UsageError
from rootcause.fileio import json_text, read_json, settle

FILE = "attribution.json"
# The folder an analysis writes: the document and its two renderings, replaced as one set.
REPORT_FILES = (FILE, "report.html", "report.md")
SCHEMA_VERSION = 2
SUPPORTED_SCHEMAS = (1, 2)  # 1 is migrated to 2 on load

# Keys every report needs: (dotted path, expected type). Everything else is optional.
_REQUIRED: tuple[tuple[str, type | tuple[type, ...]], ...] = (
    ("schema_version", int),
    ("variants", dict), ("variants.a", dict), ("variants.b", dict),
    ("whole_graph", dict), ("whole_graph.a.median", (int, float)), ("whole_graph.b.median", (int, float)),
    ("whole_graph.delta_ns.median", (int, float)),
    ("units", list),
    ("residual", dict), ("residual.delta_ns.median", (int, float)),
)
# Sections compare and analyze add (schema 1, additive): checked when present and not null.
_OPTIONAL: tuple[tuple[str, type], ...] = (
    ("kernels", list), ("timeline", dict), ("device", str), ("measurement", dict), ("command", str),
    ("confirmation", dict), ("catalogs", dict), ("environment", dict),
)
_UNIT_REQUIRED: tuple[tuple[str, type | tuple[type, ...]], ...] = (
    ("unit", int), ("kernels_a", list), ("kernels_b", list),
    ("time_a_ns.median", (int, float)), ("time_b_ns.median", (int, float)),
    ("delta_ns.median", (int, float)),
)


# The shape of every section a report or a later stage reads (artifacts.schema): a field of
# another type stops `load` in one line instead of failing inside a renderer.
STAT = {"median": NUM, "low?": NUM, "high?": NUM, "level?": Opt(NUM)}  # an interval has both ends
FINDING = {"rule": str, "sentence": str, "unit?": Opt(int), "evidence?": ANY}
UNIT = {"unit": int, "kernels_a": [str], "kernels_b": [str], "time_a_ns": STAT, "time_b_ns": STAT,
        "delta_ns": STAT, "significant?": bool, "flagged?": bool, "method?": str, "share?": Opt(NUM),
        "launches_a?": Opt(NUM), "launches_b?": Opt(NUM), "idle_before_a_ns?": Opt(NUM), "idle_before_b_ns?": Opt(NUM),
        "source_ops?": [str], "findings?": [FINDING],
        "module_paths?": [str], "instances?": [str], "repeats?": int}
VARIANT = {"label?": str, "calls?": Opt(int), "launches_per_call?": Opt(NUM), "source?": [str],
           "span_ns?": Opt(STAT), "kernel_busy_ns?": Opt(STAT), "profile?": Opt(str), "catalog?": Opt(str),
           "entry?": Opt(str)}
KERNEL_ROW = {"variant": str, "kernel": str, "unit?": Opt(int), "launches_per_call": NUM,
              "duration_ns?": Opt(NUM), "time_per_call_ns?": Opt(NUM), "grid?": Opt([NUM]), "block?": Opt([NUM]),
              "registers?": Opt(NUM), "shared_bytes?": Opt(NUM), "local_bytes?": Opt(NUM)}  # traces give floats
CALL = {"call?": Opt(int), "calls?": Opt(int),
        "kernels": [{"kernel": str, "start_ns": NUM, "end_ns": NUM, "stream?": Opt((int, str))}]}
HYBRID = {"name": str, "kind?": str, "base?": str, "description?": str, "sentence?": str, "verdict?": str,
          "unit?": Opt(int), "error?": Opt(str), "recovered?": Opt(dict), "recovered_unit?": Opt(dict),
          "recovered_graph?": Opt(dict), "median_s?": Opt(Map(NUM)), "speedup?": Opt(Map(NUM))}
GPU = {"name?": Opt(str), "sm_clock_mhz?": Opt(NUM), "sm_clock_max_mhz?": Opt(NUM), "mem_clock_mhz?": Opt(NUM),
       "temperature_c?": Opt(NUM), "power_w?": Opt(NUM), "clock_event_reasons?": Opt([str])}
SNAPSHOT = {"gpus?": Opt([GPU]), "cpu?": Opt(dict), "time_utc?": Opt(str)}  # rootcause.host_state.snapshot()
# a verdict a check took back (analysis.result.Withdrawal): unit absent for the whole graph's
WITHDRAWAL = {"check": str, "why": str, "unit?": int, "measured?": bool}
SHAPE = {
    "schema_version": int,
    "variants": {"a": VARIANT, "b": VARIANT},
    "whole_graph": {"a": STAT, "b": STAT, "delta_ns": STAT, "significant?": bool, "ratio?": Opt(NUM),
                    "note?": Opt(str), "source?": Opt(str), "undetermined?": Opt(str), "unit_delta_sum_ns?": Opt(NUM),
                    "basis?": Opt(Map(str)), "delta_interval?": str, "ratio_b_over_a?": STAT},
    "units": [UNIT],
    "residual": {"a?": STAT, "b?": STAT, "delta_ns": STAT, "significant?": bool, "share?": Opt(NUM),
                 "launches_per_call?": Opt(Map(NUM)), "what?": str},
    "concurrency?": Opt({"a?": STAT, "b?": STAT, "delta_ns?": STAT, "significant?": bool, "what?": str}),
    "closure?": Opt(NUM),
    "findings?": [FINDING],
    "cannot_conclude?": [str],
    "withdrawals?": [WITHDRAWAL],
    "notes?": [str],
    "kernels?": Opt([KERNEL_ROW]),
    "timeline?": Opt(Map(Opt(CALL))),
    "device?": Opt(str),
    "device_b?": Opt(str),
    "host?": Opt({"what?": str, "steps?": Map(int), "units_total?": int,
                  "units?": [{"name": str, "a": STAT, "b": STAT, "delta_ns": STAT, "significant": bool}]}),
    "measurement?": Opt({"file?": Opt(str), "protocol?": Opt((dict, str)), "rounds?": Opt((int, list, dict)),
                         "budget_s?": Opt(NUM), "variants?": Opt([str])}),
    "command?": Opt(str),
    "catalogs?": Opt(Map({"kernels?": Map(bundle.CATALOG_KERNEL), "versions?": Opt(Map(Opt(str))),
                          "toolchain?": Opt(bundle.TOOLCHAIN), "error?": Opt(str)})),
    "confirmation?": Opt({"hybrids?": [HYBRID], "notes?": [str], "rule?": str, "formula?": str,
                          "threshold?": Opt(NUM)}),
    "environment?": Opt({"before?": Opt(SNAPSHOT), "measure_start?": Opt(SNAPSHOT), "after?": Opt(SNAPSHOT),
                         "warnings?": Opt([str])}),
}


def _require(doc: Any, path: str, kind, file: str, where: str = "") -> None:
    value, cur = doc, ""
    for key in path.split("."):
        cur = f"{cur}.{key}" if cur else key
        if not isinstance(value, dict) or key not in value:
            raise UsageError(f"{file}: key '{where}{cur}': missing")
        value = value[key]
    if isinstance(value, bool) or not isinstance(value, kind):
        name = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise UsageError(f"{file}: key '{where}{path}': expected {name}, got {type(value).__name__}")
    if isinstance(value, float) and not math.isfinite(value):
        raise UsageError(f"{file}: key '{where}{path}': {value} is not a finite number")


def check(doc: Any, file: str = "attribution.json") -> None:
    """Raise UsageError (one line: file and key) unless doc is an attribution a report can show.
    Committed documents of before 2026-12-05 hold residual.significant as a string: read as a bool.
    The document checked last is not checked again (writing the three reports of one document
    asks three times; a document is not changed between them)."""
    if doc is _LAST_CHECKED[0]:
        return
    _unquote_significance(doc)
    if not isinstance(doc, dict):
        raise UsageError(f"{file}: not an attribution: the top level is a {type(doc).__name__}, not an object")
    _require(doc, "schema_version", int, file)
    if doc["schema_version"] not in SUPPORTED_SCHEMAS:
        raise UsageError(f"{file}: key 'schema_version': {doc['schema_version']} is not a schema this "
                         f"report reads (supported: {', '.join(map(str, SUPPORTED_SCHEMAS))})")
    for path, kind in _REQUIRED:
        _require(doc, path, kind, file)
    for path, kind in _OPTIONAL:
        if doc.get(path) is not None:
            _require(doc, path, kind, file)
    for i, unit in enumerate(doc["units"]):
        if not isinstance(unit, dict):
            raise UsageError(f"{file}: key 'units[{i}]': expected an object")
        for path, kind in _UNIT_REQUIRED:
            _require(unit, path, kind, file, f"units[{i}].")
    schema.check(doc, SHAPE, file)
    _LAST_CHECKED[0] = doc


_LAST_CHECKED: list[Any] = [None]  # the document check() passed last (one: a sweep checks many)


def load(path: str | Path) -> dict[str, Any]:
    """Read, check and migrate attribution.json; bad JSON or schema -> UsageError naming file and key."""
    p = Path(path)
    if p.is_dir():
        raise UsageError(f"{p}: is a directory; give its attribution.json")
    settle(p.parent)  # a set whose writer was killed mid-rename is finished before it is read
    doc = read_json(p, "no such attribution file")
    check(doc, str(p))
    if doc["schema_version"] == 1:
        doc = migrate_v1(doc, p.parent, str(p))
    return doc


def _unquote_significance(doc: Any) -> None:
    """Files written before json_text wrote NumPy booleans as booleans hold residual.significant
    as the string "True" or "False" (and "False" would read as true): read them as booleans."""
    residual = doc.get("residual") if isinstance(doc, dict) else None
    if isinstance(residual, dict) and residual.get("significant") in ("True", "False"):
        residual["significant"] = residual["significant"] == "True"


def dumps(doc: dict[str, Any], path: Path) -> str:
    """The checked document as the text of attribution.json (path names it in errors)."""
    check(doc, str(path))
    return json_text(doc)


def migrate_v1(doc: dict[str, Any], base: Path, file: str) -> dict[str, Any]:
    """Schema 1 -> 2: embed the catalogs (and environment) that 1 left in other files."""
    for key in ("kernels", "timeline"):
        if doc.get(key) is None:
            raise UsageError(f"{file}: key '{key}': missing (schema 1 written before rootcause recorded it); "
                             "run `rootcause compare` again to write a current attribution")
    doc = dict(doc, schema_version=SCHEMA_VERSION)
    doc["catalogs"] = {v: catalog_section(get(doc, f"variants.{v}.catalog"), base) for v in "ab"}
    if not doc.get("environment"):
        doc["environment"] = _environment_beside(doc, base)
    return doc


def catalog_section(path: str | None, base: Path | None = None) -> dict[str, Any]:
    """What attribution.json embeds of one variant's catalog (module doc)."""
    entry: dict[str, Any] = {"kernels": {}, "versions": {}, "toolchain": {}, "error": None}
    if not path:
        entry["error"] = "no catalog (bundle manifest) was given to compare"
        return entry
    p = _found(path, base)
    try:
        kernels, manifest = bundle.load_catalog(p)
    except UsageError as err:
        entry["error"] = str(err)
        return entry
    for k in kernels or []:
        entry["kernels"].setdefault(k.name, k.to_dict())
    entry["versions"] = {str(k): str(v) for k, v in (manifest.get("versions") or {}).items()}
    entry["toolchain"] = manifest.get("toolchain") if isinstance(manifest.get("toolchain"), dict) else {}
    return entry


def get(doc: Any, path: str, default: Any = None) -> Any:
    """doc['a']['b'] for path 'a.b', or default when any step is missing."""
    for key in path.split("."):
        if not isinstance(doc, dict) or key not in doc:
            return default
        doc = doc[key]
    return doc


def _found(path: str, base: Path | None) -> Path:
    """path as given (relative to where it was written), else relative to base or a parent of it."""
    p = Path(path)
    if p.exists() or base is None:
        return p
    return next((r / path for r in (base.resolve(), *base.resolve().parents) if (r / path).exists()), p)


def _environment_beside(doc: dict[str, Any], base: Path) -> dict[str, Any] | None:
    for v in "ab":
        profile = get(doc, f"variants.{v}.profile")
        if not isinstance(profile, str):
            continue
        folder = _found(profile.partition("#")[0], base).parent
        try:
            env = rundir.read_env(folder)
        except UsageError:
            env = None
        if env is not None:
            return env
    return None
