"""Variant specs: one TOML file names a source model, a target and how to compile it.

A file holds either one variant (top-level keys) or a [base] table plus [variants.NAME]
tables; each variant is base deep-merged with its own table, selected as 'file.toml#NAME'.
Checks that need no compiler live here (keys, types, files, target syntax); checks that need
the compiler's own pass list or IR (pass names, function names after fusion) are made by the
frontend, which reports them with `VariantSpec.where()` so the message names the TOML place.
"""
from __future__ import annotations

import copy
import dataclasses
import re
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rootcause import frontends
from rootcause.errors import UsageError

DISTRIBUTIONS = ("uniform", "normal", "zeros", "ones")
TOP_KEYS = ("name", "frontend", "source", "target", "entry", "inputs", "reference", "tvm", "iree")  # + frontends
INPUT_KEYS = ("shape", "dtype", "distribution", "low", "high", "mean", "std", "seed", "file")
REFERENCE_KEYS = ("python", "rtol", "atol")
TVM_KEYS = ("opt_level", "skip_passes", "dataflow_boundaries_after", "schedule_overrides")
IREE_KEYS = ("flags", "input_type", "function", "substitute_configurations")
_TARGET_RE = re.compile(r"^(cuda:sm_\d+[af]?|rocm:gfx[0-9a-f]+|llvm|auto)$")


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


@dataclass
class ReferenceSpec:
    python: str  # 'file.py:function', file relative to the spec file
    file: Path  # absolute path of the Python file
    function: str
    rtol: float = 1e-5
    atol: float = 1e-6


@dataclass
class TvmOptions:
    opt_level: int = 3
    skip_passes: list[str] = field(default_factory=list)
    dataflow_boundaries_after: list[str] = field(default_factory=list)
    schedule_overrides: dict[str, Path] = field(default_factory=dict)  # function -> file


@dataclass
class IreeOptions:
    flags: list[str] = field(default_factory=list)
    input_type: str | None = None
    function: str | None = None
    # executable -> configured hal.executable .mlir (--iree-hal-substitute-executable-configuration)
    substitute_configurations: dict[str, Path] = field(default_factory=dict)


@dataclass
class VariantSpec:
    name: str
    frontend: str
    source: Path
    target: str
    entry: str
    inputs: list[InputSpec]
    reference: ReferenceSpec | None
    tvm: TvmOptions
    iree: IreeOptions
    spec_file: Path
    variant: str | None = None  # the NAME of 'file.toml#NAME', None for a one-variant file
    variant_table: dict[str, Any] = field(default_factory=dict, repr=False)
    # The [NAME] table of a registered frontend other than tvm and iree, as its check_options returned it.
    options: dict[str, Any] = field(default_factory=dict)

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
        tvm = dict(d["tvm"])
        tvm["schedule_overrides"] = {k: Path(v) for k, v in tvm["schedule_overrides"].items()}
        iree = dict(d["iree"])
        iree["substitute_configurations"] = {k: Path(v) for k, v in iree.get("substitute_configurations", {}).items()}
        return cls(
            name=d["name"], frontend=d["frontend"], source=Path(d["source"]), target=d["target"],
            entry=d["entry"],
            inputs=[InputSpec(**{**i, "file": Path(i["file"]) if i["file"] else None}) for i in d["inputs"]],
            reference=ReferenceSpec(**{**ref, "file": Path(ref["file"])}) if ref else None,
            tvm=TvmOptions(**tvm), iree=IreeOptions(**iree), spec_file=Path(d["spec_file"]),
            variant=d.get("variant"), variant_table=d.get("variant_table", {}), options=d.get("options", {}))


def _paths_to_str(obj: Any) -> Any:
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, dict):
        return {k: _paths_to_str(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_paths_to_str(v) for v in obj]
    return obj


def deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """Tables merge key by key; any other value (lists included) in `over` replaces base's."""
    out = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def variant_names(path: str | Path) -> list[str]:
    """Names of the [variants.NAME] tables of a spec file ([] for a one-variant file)."""
    data = _read_toml(Path(path))
    return list(data.get("variants", {}))


def load(path: str | Path) -> VariantSpec:
    """Read 'file.toml' or 'file.toml#NAME' into a resolved, checked VariantSpec."""
    text = str(path)
    file_part, _, variant = text.partition("#")
    spec_file = Path(file_part).resolve()
    data = _read_toml(spec_file)
    name = spec_file.name
    table: dict[str, Any] = {}
    if "variants" in data or "base" in data:
        extra = sorted(set(data) - {"base", "variants"})
        if extra:
            raise UsageError(f"{name}: {extra[0]}: a file with [base]/[variants] may hold only those "
                             f"two tables; found top-level key '{extra[0]}'")
        variants = data.get("variants", {})
        if not isinstance(variants, dict) or not all(isinstance(v, dict) for v in variants.values()):
            raise UsageError(f"{name}: [variants]: each variant must be a table [variants.NAME]")
        if not variant:
            raise UsageError(f"{name}: holds several variants; choose one as '{file_part}#NAME' with NAME "
                             f"one of: {', '.join(variants) or '(none)'}")
        if variant not in variants:
            raise UsageError(f"{name}: no variant '{variant}'; variants: {', '.join(variants)}")
        table = variants[variant]
        resolved = deep_merge(data.get("base", {}), table)
        resolved.setdefault("name", variant)
        if "name" not in table and "name" in data.get("base", {}):
            resolved["name"] = f"{data['base']['name']}-{variant}"
    else:
        if variant:
            raise UsageError(f"{name}: '#{variant}' given but the file has no [variants] tables")
        resolved = data
        variant = None
    return _check(resolved, spec_file, variant, table)


def with_target(spec: VariantSpec, target: str) -> VariantSpec:
    """The same variant for another target (e.g. a command line --target), checked like the file's."""
    if not _TARGET_RE.match(target):
        raise UsageError(f"--target: unknown target \"{target}\"; valid: 'cuda:sm_XX', 'rocm:gfxNNN', "
                         "'llvm', 'auto'")
    return dataclasses.replace(spec, target=target)


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise UsageError(f"{path}: spec file not found") from None
    except OSError as err:
        raise UsageError(f"{path}: cannot read spec file: {err.strerror}") from None
    try:
        return tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        raise UsageError(f"{path.name}: not valid TOML: {err}") from None


def _check(d: dict[str, Any], spec_file: Path, variant: str | None, table: dict[str, Any]) -> VariantSpec:
    # A throwaway spec only to phrase places ('[variants.on.tvm]' vs '[base.tvm]').
    probe = VariantSpec("", "", spec_file, "", "", [], None, TvmOptions(), IreeOptions(), spec_file,
                        variant, table)
    plugins = tuple(n for n in frontends.names() if not frontends.is_builtin(n))
    _keys(d, TOP_KEYS + plugins, probe.where("", None) if variant else spec_file.name)
    for key in ("name", "frontend", "source", "target", "entry"):
        if key not in d:
            raise UsageError(f"{probe.where('', key)}: missing required key")
        if not isinstance(d[key], str) or not d[key]:
            raise UsageError(f"{probe.where('', key)}: must be a non-empty string")
    if d["frontend"] not in frontends.names():
        raise UsageError(f"{probe.where('', 'frontend')}: unknown frontend \"{d['frontend']}\"; "
                         f"valid: {', '.join(frontends.names())}")
    if not _TARGET_RE.match(d["target"]):
        raise UsageError(f"{probe.where('', 'target')}: unknown target \"{d['target']}\"; valid: "
                         "'cuda:sm_XX' (e.g. cuda:sm_90), 'rocm:gfxNNN' (e.g. rocm:gfx942), 'llvm', 'auto'")
    base_dir = spec_file.parent
    source = _existing(base_dir, d["source"], probe.where("", "source"))
    inputs = [_input(i, item, base_dir, probe) for i, item in enumerate(_list(d.get("inputs", []),
                                                                            probe.where("", "inputs")))]
    reference = _reference(d.get("reference"), base_dir, probe)
    tvm = _tvm(d.get("tvm", {}), base_dir, probe)
    iree = _iree(d.get("iree", {}), base_dir, probe)
    options = {}
    if not frontends.is_builtin(d["frontend"]):
        options = frontends.get(d["frontend"]).check_options(d.get(d["frontend"], {}),
                                                             lambda key: probe.where(d["frontend"], key))
    return VariantSpec(d["name"], d["frontend"], source, d["target"], d["entry"], inputs, reference,
                       tvm, iree, spec_file, variant, table, options)


def _keys(d: Any, valid: tuple[str, ...], where: str) -> None:
    if not isinstance(d, dict):
        raise UsageError(f"{where}: must be a table")
    for key in d:
        if key not in valid:
            raise UsageError(f"{where}: unknown key \"{key}\"; valid: {', '.join(valid)}")


def _list(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise UsageError(f"{where}: must be an array")
    return value


def _existing(base_dir: Path, rel: Any, where: str) -> Path:
    if not isinstance(rel, str) or not rel:
        raise UsageError(f"{where}: must be a file path (string)")
    path = (base_dir / rel).resolve()
    if not path.is_file():
        raise UsageError(f"{where}: file not found: {rel} (looked in {base_dir})")
    return path


def _number(d: dict[str, Any], key: str, default: float, where: str) -> float:
    value = d.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise UsageError(f"{where}.{key}: must be a number, got {value!r}")
    return float(value)


def _input(i: int, item: Any, base_dir: Path, probe: VariantSpec) -> InputSpec:
    where = f"{probe.where('', 'inputs')}[{i}]"
    _keys(item, INPUT_KEYS, where)
    if "file" in item:
        path = _existing(base_dir, item["file"], f"{where}.file")
        if path.suffix != ".npy":
            raise UsageError(f"{where}.file: must be a .npy file, got {item['file']}")
        return InputSpec(shape=list(item.get("shape", [])), dtype=item.get("dtype", ""), file=path)
    shape = item.get("shape")
    if not isinstance(shape, list) or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0
                                              for s in shape):
        raise UsageError(f"{where}.shape: must be an array of non-negative integers, got {shape!r}")
    dtype = item.get("dtype", "float32")
    try:
        import numpy as np

        np.dtype(dtype)
    except TypeError:
        raise UsageError(f"{where}.dtype: unknown dtype \"{dtype}\"") from None
    dist = item.get("distribution", "uniform")
    if dist not in DISTRIBUTIONS:
        raise UsageError(f"{where}.distribution: unknown distribution \"{dist}\"; valid: "
                         f"{', '.join(DISTRIBUTIONS)}")
    seed = item.get("seed", i)
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise UsageError(f"{where}.seed: must be a non-negative integer, got {seed!r}")
    return InputSpec(shape=shape, dtype=dtype, distribution=dist, low=_number(item, "low", 0.0, where),
                     high=_number(item, "high", 1.0, where), mean=_number(item, "mean", 0.0, where),
                     std=_number(item, "std", 1.0, where), seed=seed)


def _reference(d: Any, base_dir: Path, probe: VariantSpec) -> ReferenceSpec | None:
    if d is None:
        return None
    where = probe.where("reference", None)
    _keys(d, REFERENCE_KEYS, where)
    text = d.get("python")
    if not isinstance(text, str) or ":" not in text:
        raise UsageError(f"{probe.where('reference', 'python')}: must be 'file.py:function', got {text!r}")
    rel, _, function = text.rpartition(":")
    path = _existing(base_dir, rel, probe.where("reference", "python"))
    return ReferenceSpec(text, path, function, rtol=_number(d, "rtol", 1e-5, where),
                         atol=_number(d, "atol", 1e-6, where))


def _strings(d: dict[str, Any], key: str, where: str) -> list[str]:
    value = d.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise UsageError(f"{where}: must be an array of strings, got {value!r}")
    return list(value)


def _tvm(d: Any, base_dir: Path, probe: VariantSpec) -> TvmOptions:
    _keys(d, TVM_KEYS, probe.where("tvm", None))
    opt = d.get("opt_level", 3)
    if not isinstance(opt, int) or isinstance(opt, bool) or not 0 <= opt <= 4:
        raise UsageError(f"{probe.where('tvm', 'opt_level')}: must be an integer 0..4, got {opt!r}")
    overrides_raw = d.get("schedule_overrides", {})
    if not isinstance(overrides_raw, dict):
        raise UsageError(f"{probe.where('tvm', 'schedule_overrides')}: must be a table function = 'file.py'")
    overrides = {fn: _existing(base_dir, rel, f"{probe.where('tvm', 'schedule_overrides')}.{fn}")
                 for fn, rel in overrides_raw.items()}
    return TvmOptions(opt, _strings(d, "skip_passes", probe.where("tvm", "skip_passes")),
                      _strings(d, "dataflow_boundaries_after", probe.where("tvm", "dataflow_boundaries_after")),
                      overrides)


def _iree(d: Any, base_dir: Path, probe: VariantSpec) -> IreeOptions:
    _keys(d, IREE_KEYS, probe.where("iree", None))
    for key in ("input_type", "function"):
        if key in d and not isinstance(d[key], str):
            raise UsageError(f"{probe.where('iree', key)}: must be a string")
    where = probe.where("iree", "substitute_configurations")
    raw = d.get("substitute_configurations", {})
    if not isinstance(raw, dict) or not all(isinstance(v, str) for v in raw.values()):
        raise UsageError(f"{where}: must be a table executable = 'configured.mlir'")
    subs = {}
    for exe, rel in raw.items():
        path = _existing(base_dir, rel, f"{where}.{exe}")
        if path.suffix not in (".mlir", ".mlirbc"):
            raise UsageError(f"{where}.{exe}: must be a .mlir or .mlirbc hal.executable, got {rel}")
        subs[exe] = path
    return IreeOptions(_strings(d, "flags", probe.where("iree", "flags")), d.get("input_type"), d.get("function"),
                       subs)
