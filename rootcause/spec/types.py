"""The typed variant spec (rootcause.spec): what load() returns, the files a spec names, and the
keys each of its tables may hold."""
from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from rootcause import frontends, inputs as inputs_mod
from rootcause.errors import UsageError
from rootcause.names import did_you_mean


DISTRIBUTIONS = ("uniform", "normal", "zeros", "ones")
TOP_KEYS = ("name", "frontend", "source", "target", "entry", "inputs", "reference",
            "allow_outside_paths", "toolchain", "python", "model")  # + a table per registered frontend
INPUT_KEYS = ("shape", "dtype", "distribution", "low", "high", "mean", "std", "seed", "file")
REFERENCE_KEYS = ("python", "rtol", "atol")
MODEL_KEYS = ("exporter", "factory", "weights")
WEIGHT_KEYS = tuple(k for k in INPUT_KEYS if k not in ("shape", "dtype", "file"))  # both from the export


def supported_dtypes(frontend: str) -> tuple[str, ...]:
    """The input dtypes a frontend's compiler and runtime take (its `dtypes`; all by default)."""
    return tuple(getattr(frontends.get(frontend), "dtypes", None) or inputs_mod.DTYPES)


INT64_MAX = 2**63 - 1
IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
TARGET_RE = re.compile(r"^(cuda:sm_\d+[af]?|rocm:gfx[0-9a-f]+|llvm|auto)$")


@dataclass
class InputSpec:
    shape: list[int]
    dtype: str = "float32"
    distribution: str = "uniform"
    low: float = 0.0
    high: float = 1.0
    mean: float = 0.0
    std: float = 1.0
    seed: int = 0
    file: Path | None = None

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "InputSpec":
        """Inverse of asdict (a spec or a build result handed over as JSON)."""
        return cls(**{**d, "file": Path(d["file"]) if d.get("file") else None})


@dataclass
class ReferenceSpec:
    python: str  # 'file.py:function', file relative to the spec file
    file: Path  # absolute path of the Python file
    function: str
    rtol: float = 1e-5
    atol: float = 1e-6


@dataclass
class ModelSpec:
    """[model]: the source is a Python file defining a model (rootcause.exporters), not compiler IR.
    weights: how every learned parameter is drawn (its shape and dtype come from the export; the
    n-th weight gets seed + n)."""
    exporter: str  # 'torch' | 'jax'
    factory: str = "make_model"
    weights: InputSpec = field(default_factory=lambda: InputSpec([], distribution="normal", std=0.02, seed=1000))


@dataclass
class VariantSpec:
    name: str
    frontend: str
    source: Path
    target: str
    entry: str
    inputs: list[InputSpec]
    reference: ReferenceSpec | None
    spec_file: Path
    variant: str | None = None  # the NAME of 'file.toml#NAME', None for a one-variant file
    variant_table: dict[str, Any] = field(default_factory=dict, repr=False)
    allow_outside_paths: bool = False  # the spec opted out of the inside-its-folder rule
    # The [FRONTEND] table as the frontend's check_options returned it (its own options type).
    options: Any = None
    # What builds it instead of the compiler installed beside rootcause: 'PKG==VERSION' releases
    # and absolute wheel paths (the frontend's compiler, optionally its runtime), or `python`,
    # an existing environment's interpreter. Both empty: the installed compiler.
    toolchain: list[str] = field(default_factory=list)
    python: Path | None = None
    model: ModelSpec | None = None

    def where(self, section: str, key: str | None = None) -> str:
        """'spec.toml: [variants.off.tvm].skip_passes' style place for error messages."""
        table = self.variant_table.get(section, {}) if section else self.variant_table
        if self.variant is None:
            prefix = f"[{section}]" if section else ""
        elif key is not None and isinstance(table, dict) and key in table:
            prefix = f"[variants.{self.variant}.{section}]" if section else f"[variants.{self.variant}]"
        else:
            prefix = f"[base.{section}]" if section else "[base]"
        place = f"{prefix}.{key}" if key and prefix else (key or prefix)
        return f"{self.spec_file.name}: {place}"

    def to_dict(self) -> dict[str, Any]:
        """The resolved spec as plain JSON data (paths as strings)."""
        return _paths_to_str(asdict(self))

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "VariantSpec":
        """Inverse of to_dict (used to hand a spec to a build subprocess)."""
        ref = d.get("reference")
        return cls(
            name=d["name"], frontend=d["frontend"], source=Path(d["source"]), target=d["target"],
            entry=d["entry"],
            inputs=[InputSpec.from_dict(i) for i in d["inputs"]],
            reference=ReferenceSpec(**{**ref, "file": Path(ref["file"])}) if ref else None,
            spec_file=Path(d["spec_file"]),
            variant=d.get("variant"), variant_table=d.get("variant_table", {}),
            allow_outside_paths=bool(d.get("allow_outside_paths", False)), options=_options_from_dict(d),
            toolchain=list(d.get("toolchain", [])), python=Path(d["python"]) if d.get("python") else None,
            model=_model_from_dict(d.get("model")))


def _options_from_dict(d: dict[str, Any]) -> Any:
    """The frontend's options from a spec dict; plans written before the options moved into the
    frontends keep them under the frontend's name."""
    raw = d.get("options")
    if not raw and isinstance(d.get(d["frontend"]), dict):
        raw = d[d["frontend"]]
    decode = getattr(frontends.get(d["frontend"]), "options_from_dict", None)
    return decode(raw or {}) if decode else raw


def _model_from_dict(d: dict[str, Any] | None) -> ModelSpec | None:
    if not d:
        return None
    return ModelSpec(d["exporter"], d["factory"], InputSpec.from_dict(d["weights"]))


def _paths_to_str(obj: Any) -> Any:
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, dict):
        return {k: _paths_to_str(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_paths_to_str(v) for v in obj]
    return obj


def table_keys(d: Any, valid: tuple[str, ...], where: str | Callable[[str | None], str]) -> None:
    """Every key of table d is one of valid. where: the table's place, or place(key), which names
    a key in the table it was written in ([variants.NAME.tvm] or [base.tvm])."""
    if not isinstance(d, dict):
        raise UsageError(f"{where(None) if callable(where) else where}: must be a table")
    for key in d:
        if key not in valid:
            hint = did_you_mean(str(key), valid)
            place = f"{where(str(key))}: unknown key" if callable(where) else f"{where}: unknown key \"{key}\""
            raise UsageError(f"{place}{hint}; valid: {', '.join(valid)}")


def array(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise UsageError(f"{where}: must be an array")
    return value


@dataclass
class SpecFiles:
    """Files a spec names: resolved against its folder and kept inside it (symlinks followed)
    unless the spec set allow_outside_paths: a spec is data, and the files it names are run."""

    base_dir: Path
    allow_outside: bool

    def existing(self, rel: Any, where: str) -> Path:
        if not isinstance(rel, str) or not rel or "\0" in rel:
            raise UsageError(f"{where}: must be a file path (string)")
        path = (self.base_dir / rel).resolve()
        if not self.allow_outside and not path.is_relative_to(self.base_dir.resolve()):
            raise UsageError(f"{where}: {rel} is outside the spec's folder {self.base_dir}; move it there or "
                             "set allow_outside_paths = true in the spec")
        if not path.is_file():
            raise UsageError(f"{where}: file not found: {rel} (looked in {self.base_dir})")
        return path

    def interpreter(self, rel: Any, where: str) -> Path:
        """An environment's python: its own path kept (a venv's bin/python is a link to the base
        interpreter, and the link is what selects the environment), its folder checked."""
        if not isinstance(rel, str) or not rel or "\0" in rel:
            raise UsageError(f"{where}: must be the path of an environment's python (string)")
        path = Path(os.path.abspath(self.base_dir / Path(rel).expanduser()))
        if not self.allow_outside and not path.parent.resolve().is_relative_to(self.base_dir.resolve()):
            raise UsageError(f"{where}: {rel} is outside the spec's folder {self.base_dir}; set "
                             "allow_outside_paths = true in the spec to use that environment")
        if not path.is_file() or not os.access(path, os.X_OK):
            raise UsageError(f"{where}: {rel}: no executable python there")
        return path
