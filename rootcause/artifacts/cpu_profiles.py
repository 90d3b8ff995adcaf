"""OUT/cpu-profiles/: the per-kernel CPU profiles `analyze` takes of A and B when the run stage
recorded none (llvm bundles). profiles.json indexes them: {measurement_sha256: the run's
measurement.json digest, records: {variant: the frontend's profile record, 'file' relative to
the folder, 'repeat': the second profile's record, under repeat/}}."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from rootcause.artifacts import schema
from rootcause.artifacts.schema import Map
from rootcause.errors import UsageError
from rootcause.fileio import mark_owned, read_json, write_json

FOLDER = "cpu-profiles"
INDEX = "profiles.json"
REPEAT = "repeat"  # the second pair of profiles, taken in the mirrored order
SHAPE = {"measurement_sha256": str, "records": Map(dict)}


def folder(out: Path) -> Path:
    return Path(out) / FOLDER


def reusable(out: Path, digest: str, names: tuple[str, ...]) -> dict[str, dict[str, Any]] | None:
    """The records indexed for this run (the same measurement digest), when every named variant
    has both profiles on disk; None otherwise (an index of another run, or none)."""
    index = folder(out) / INDEX
    if not index.is_file():
        return None
    try:
        doc = read_json(index, "no such file")
        schema.check(doc, SHAPE, str(index))
    except UsageError:  # an index that cannot be read is retaken, never trusted
        return None
    records = doc["records"]
    if doc["measurement_sha256"] != digest or not all(
            _on_disk(out, records.get(n)) and _on_disk(out, (records.get(n) or {}).get("repeat")) for n in names):
        return None
    return records


def finish(out: Path, digest: str, records: dict[str, dict[str, Any]]) -> None:
    """The index, when every profile was taken (else the next analysis takes them again), and
    the folder marked as rootcause's own, so a later publish (a sweep's attribution stage) may
    replace it whole."""
    if all(r.get("ok") for r in records.values()):
        write_json(folder(out) / INDEX, {"measurement_sha256": digest, "records": records})
    mark_owned(folder(out))


def _on_disk(out: Path, record: Any) -> bool:
    return isinstance(record, dict) and bool(record.get("ok")) and (folder(out) / str(record.get("file"))).is_file()


def absolute(out: Path, record: dict[str, Any]) -> dict[str, Any]:
    """A profile record with its 'file' (and its repeat's) as absolute paths."""
    if not record.get("ok"):
        return record
    result = dict(record, file=str((folder(out) / record["file"]).resolve()))
    if isinstance(record.get("repeat"), dict):
        result["repeat"] = absolute(out, record["repeat"])
    return result
