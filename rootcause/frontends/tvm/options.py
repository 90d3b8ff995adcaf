"""The spec's [tvm] table: what the TVM frontend is told beyond source, target and inputs."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from rootcause.errors import UsageError
from rootcause.spec import SpecFiles, string_list, table_keys

KEYS = ("opt_level", "skip_passes", "dataflow_boundaries_after", "schedule_overrides")


@dataclass
class TvmOptions:
    opt_level: int = 3
    skip_passes: list[str] = field(default_factory=list)
    dataflow_boundaries_after: list[str] = field(default_factory=list)
    schedule_overrides: dict[str, Path] = field(default_factory=dict)  # function -> file


def from_dict(d: dict[str, Any]) -> TvmOptions:
    """Inverse of dataclasses.asdict (a spec handed to a child as JSON)."""
    return TvmOptions(**{**d, "schedule_overrides": {k: Path(v) for k, v in d.get("schedule_overrides", {}).items()}})


def check(table: Any, place: Callable[[str | None], str], files: SpecFiles) -> TvmOptions:
    """[tvm] checked as far as it can be without the compiler (pass and function names are
    checked by the build, which knows the pass list and the fused module)."""
    table_keys(table, KEYS, place)
    opt = table.get("opt_level", 3)
    if not isinstance(opt, int) or isinstance(opt, bool) or not 0 <= opt <= 4:
        raise UsageError(f"{place('opt_level')}: must be an integer 0..4, got {opt!r}")
    where = place("schedule_overrides")
    raw = table.get("schedule_overrides", {})
    if not isinstance(raw, dict):
        raise UsageError(f"{where}: must be a table function = 'file.py'")
    overrides = {}
    for fn, rel in raw.items():
        path = files.existing(rel, f"{where}.{fn}")
        if path.suffix != ".py":
            raise UsageError(f"{where}.{fn}: must be a .py file, got {rel}")
        overrides[fn] = path
    return TvmOptions(opt, string_list(table, "skip_passes", place("skip_passes")),
                      string_list(table, "dataflow_boundaries_after", place("dataflow_boundaries_after")),
                      overrides)
