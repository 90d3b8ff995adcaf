"""Variant specs: one TOML file names a source model, a target and how to compile it.

A file holds either one variant (top-level keys) or a [base] table plus [variants.NAME]
tables; each variant is base deep-merged with its own table, selected as 'file.toml#NAME'.
Checks that need no compiler live here (keys, types, files, target syntax, dtypes, sizes,
paths); each frontend checks its own [NAME] table (its check_options, which returns the typed
options kept in VariantSpec.options) and, with its compiler, what needs the pass list or IR
(pass names, function names after fusion, the entry's parameter types), naming the TOML place
with `VariantSpec.where()`.

Nothing the spec names may run or be read from outside the spec's folder unless the spec says
`allow_outside_paths = true`.
"""
from __future__ import annotations

import copy
import dataclasses
import keyword
import os
import re
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from rootcause import envs, frontends, inputs as inputs_mod
from rootcause.errors import UsageError
from rootcause.exporters import EXPORTERS
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


_INT64_MAX = 2**63 - 1
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
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
            base_name = data["base"]["name"]
            if not isinstance(base_name, str) or not base_name:
                raise UsageError(f"{name}: [base] name: must be a non-empty string, got {base_name!r}")
            resolved["name"] = f"{base_name}-{variant}"
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
    except RecursionError:
        raise UsageError(f"{path.name}: tables or arrays nested too deeply to be a spec") from None


def _check(d: dict[str, Any], spec_file: Path, variant: str | None, table: dict[str, Any]) -> VariantSpec:
    # A throwaway spec only to phrase places ('[variants.on.tvm]' vs '[base.tvm]').
    probe = VariantSpec("", "", spec_file, "", "", [], None, spec_file, variant, table)
    table_keys(d, TOP_KEYS + frontends.names(), (lambda key: probe.where("", key)) if variant else spec_file.name)
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
    outside = d.get("allow_outside_paths", False)
    if not isinstance(outside, bool):
        raise UsageError(f"{probe.where('', 'allow_outside_paths')}: must be true or false, got {outside!r}")
    files = SpecFiles(spec_file.parent, outside)
    source = files.existing(d["source"], probe.where("", "source"))
    inputs = [_input(i, item, files, probe, d["frontend"])
              for i, item in enumerate(_list(d.get("inputs", []), probe.where("", "inputs")))]
    _check_memory(inputs, probe)
    reference = _reference(d.get("reference"), files, probe)
    options = _options(d, files, probe)
    toolchain, python = _toolchain(d, files, probe)
    model = _model(d.get("model"), source, probe, d["frontend"])
    spec = VariantSpec(d["name"], d["frontend"], source, d["target"], d["entry"], inputs, reference,
                       spec_file, variant, table, outside, options, toolchain, python, model)
    check_source = getattr(frontends.get(spec.frontend), "check_source", None)
    if check_source is not None and inputs:
        check_source(spec)  # what the frontend can check of its source without its compiler
    return spec


def _options(d: dict[str, Any], files: SpecFiles, probe: VariantSpec) -> Any:
    """The spec's own frontend's [NAME] table checked into its options. A [base] may hold the
    tables of several frontends for variants of each: every table present is checked (a typo
    in one is found whichever variant is built), only the own frontend's is kept."""
    kept = None
    for name in frontends.names():
        if name in d or name == d["frontend"]:
            checked = frontends.get(name).check_options(d.get(name, {}), lambda key, n=name: probe.where(n, key),
                                                        files)
            kept = checked if name == d["frontend"] else kept
    return kept


def _model(d: Any, source: Path, probe: VariantSpec, frontend: str) -> ModelSpec | None:
    if d is None:
        return None
    where = probe.where("model")
    table_keys(d, MODEL_KEYS, where)
    exporter = d.get("exporter")
    if exporter not in EXPORTERS:
        raise UsageError(f"{probe.where('model', 'exporter')}: must be one of {', '.join(EXPORTERS)}, got {exporter!r}")
    default = ModelSpec(exporter)
    factory = d.get("factory", default.factory)
    if not isinstance(factory, str) or not _IDENTIFIER.match(factory):
        raise UsageError(f"{probe.where('model', 'factory')}: must be a Python function name, got {factory!r}")
    if source.suffix != ".py":
        raise UsageError(f"{probe.where('', 'source')}: a [model] source is the Python file defining the model, "
                         f"got {source.name}")
    weights = d.get("weights", {})
    table_keys(weights, WEIGHT_KEYS, probe.where("model", "weights"))
    # checked as an input of one element: the same distributions, parameters and seed rules
    drawn = _input(0, {"distribution": default.weights.distribution, "std": default.weights.std,
                       "seed": default.weights.seed, **weights, "shape": [1]},
                   SpecFiles(source.parent, True), probe, frontend, probe.where("model", "weights"))
    return ModelSpec(exporter, factory, dataclasses.replace(drawn, shape=[]))


def model_inputs(spec: VariantSpec, arguments: list[dict[str, Any]]) -> list[InputSpec]:
    """The inputs of an exported model's function, in call order: each weight drawn as [model]
    weights says (seed + its index among the weights), each example input as the spec's own
    [[inputs]] row of that place, whose shape and dtype must be the export's."""
    assert spec.model is not None
    out: list[InputSpec] = []
    given = iter(enumerate(spec.inputs))
    n_inputs = sum(1 for a in arguments if a["role"] == "input")
    if len(spec.inputs) != n_inputs:
        raise UsageError(f"{spec.where('', 'inputs')}: {spec.source.name}'s example inputs are {n_inputs}, "
                         f"the spec gives {len(spec.inputs)} [[inputs]]")
    weights = 0
    for arg in arguments:
        if arg["role"] == "weight":
            out.append(dataclasses.replace(spec.model.weights, shape=list(arg["shape"]), dtype=arg["dtype"],
                                           seed=spec.model.weights.seed + weights))
            weights += 1
            continue
        i, row = next(given)
        if list(row.shape) != list(arg["shape"]) or row.dtype != arg["dtype"]:
            raise UsageError(f"{spec.where('', 'inputs')}[{i}]: {row.shape} {row.dtype}, but the model's example "
                             f"input {i} is {arg['shape']} {arg['dtype']}")
        out.append(row)
    return out


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


def _list(value: Any, where: str) -> list[Any]:
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


_DIST = r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?"
# PEP 440 public versions (N.N.N, a/b/rc, .postN, .devN) with an optional local part
_VERSION = r"[0-9]+(?:\.[0-9]+)*(?:(?:a|b|rc)[0-9]+)?(?:\.post[0-9]+)?(?:\.dev[0-9]+)?(?:\+[A-Za-z0-9.]+)?"
_PIN_RE = re.compile(rf"^({_DIST})==({_VERSION})$")
_WHEEL_RE = re.compile(rf"^({_DIST})-({_VERSION})(?:-[0-9][^-]*)?-[^-]+-[^-]+-[^-]+\.whl$")


def toolchain_packages(frontend: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(compiler, runtime) distributions a frontend's variants may pin in `toolchain`."""
    fe = frontends.get(frontend)
    return tuple(fe.compiler_packages), tuple(getattr(fe, "runtime_packages", ()))


def pinned(requirement: str) -> tuple[str, str] | None:
    """(distribution, version) of a 'PKG==VERSION' or a wheel file name; None for anything else."""
    m = _PIN_RE.match(requirement) or _WHEEL_RE.match(Path(requirement).name if requirement.endswith(".whl")
                                                      else "")
    return (envs.normalize(m.group(1)), m.group(2)) if m else None


def _toolchain(d: dict[str, Any], files: SpecFiles, probe: VariantSpec) -> tuple[list[str], Path | None]:
    """`toolchain` (a string or array of 'PKG==VERSION' and wheel files) and `python` checked: only
    the frontend's compiler and runtime distributions, each at most once, the compiler named."""
    if "toolchain" in d and "python" in d:
        raise UsageError(f"{probe.where('', 'python')}: give toolchain or python, not both")
    if "python" in d:
        return [], files.interpreter(d["python"], probe.where("", "python"))
    if "toolchain" not in d:
        return [], None
    where = probe.where("", "toolchain")
    raw = d["toolchain"]
    items = [raw] if isinstance(raw, str) else raw
    if not isinstance(items, list) or not items or not all(isinstance(i, str) and i for i in items):
        raise UsageError(f"{where}: must be 'PKG==VERSION', a wheel file, or an array of them")
    compiler, runtime = toolchain_packages(d["frontend"])
    allowed = compiler + runtime
    out, seen = [], set()
    for n, item in enumerate(items):
        place = where if isinstance(raw, str) else f"{where}[{n}]"
        if item.endswith(".whl"):
            path = files.existing(item, place)
            got = pinned(str(path))
            if got is None:
                raise UsageError(f"{place}: {item}: not a wheel file name (NAME-VERSION-PY-ABI-PLATFORM.whl)")
            out.append(str(path))
        else:
            got = pinned(item)
            if got is None:
                raise UsageError(f"{place}: {item!r} refused: a toolchain is 'PKG==VERSION' (one released version) "
                                 f"or a .whl file, with PKG one of {', '.join(allowed)}")
            out.append(f"{got[0]}=={got[1]}")
        if got[0] not in allowed:
            raise UsageError(f"{place}: {got[0]} refused: the {d['frontend']} frontend's toolchain may name only "
                             f"{', '.join(allowed)}")
        if got[0] in seen:
            raise UsageError(f"{place}: {got[0]} named twice")
        seen.add(got[0])
    if not seen & set(compiler):
        raise UsageError(f"{where}: names no compiler; add one of {', '.join(compiler)} (PKG==VERSION or a wheel)")
    return out, None


def _number(d: dict[str, Any], key: str, default: float, where: str) -> float:
    value = d.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise UsageError(f"{where}.{key}: must be a number, got {value!r}")
    if not -float("inf") < float(value) < float("inf"):
        raise UsageError(f"{where}.{key}: must be finite, got {value!r}")
    return float(value)


def _dtype(item: dict[str, Any], where: str, frontend: str, default: str | None) -> str:
    value = item.get("dtype", default)
    name = inputs_mod.dtype_name(value)
    if name is None or name not in supported_dtypes(frontend):
        raise UsageError(f"{where}.dtype: unknown dtype {value!r}; valid for {frontend}: "
                         f"{', '.join(supported_dtypes(frontend))} (MLIR names such as bf16, f8E4M3FNUZ too)")
    return name


def _shape(item: dict[str, Any], where: str) -> list[int]:
    shape = item.get("shape")
    if not isinstance(shape, list) or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0
                                              for s in shape):
        raise UsageError(f"{where}.shape: must be an array of non-negative integers, got {shape!r}")
    return shape


def _sized(shape: list[int], dtype: str, where: str) -> None:
    """Element count and bytes must fit int64 (NumPy's sizes) before anything is made."""
    count = inputs_mod.element_count(shape)
    size = count * inputs_mod.to_dtype(dtype).itemsize
    if count > _INT64_MAX or size > _INT64_MAX:
        raise UsageError(f"{where}.shape: {'x'.join(map(str, shape))} {dtype} is {count} elements, "
                         f"{size} bytes: overflows int64")


def _input(i: int, item: Any, files: SpecFiles, probe: VariantSpec, frontend: str,
           where: str | None = None) -> InputSpec:
    where = where or f"{probe.where('', 'inputs')}[{i}]"
    table_keys(item, INPUT_KEYS, where)
    if "file" in item:
        return _file_input(item, files, where, frontend)
    shape = _shape(item, where)
    dtype = _dtype(item, where, frontend, "float32")
    _sized(shape, dtype, where)
    dist = item.get("distribution", "uniform")
    if dist not in DISTRIBUTIONS:
        raise UsageError(f"{where}.distribution: unknown distribution \"{dist}\"; valid: "
                         f"{', '.join(DISTRIBUTIONS)}")
    seed = item.get("seed", i)
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise UsageError(f"{where}.seed: must be a non-negative integer, got {seed!r}")
    spec = InputSpec(shape=shape, dtype=dtype, distribution=dist, low=_number(item, "low", 0.0, where),
                     high=_number(item, "high", 1.0, where), mean=_number(item, "mean", 0.0, where),
                     std=_number(item, "std", 1.0, where), seed=seed)
    _check_distribution(spec, item, where)
    return spec


def _file_input(item: dict[str, Any], files: SpecFiles, where: str, frontend: str) -> InputSpec:
    path = files.existing(item["file"], f"{where}.file")
    if path.suffix != ".npy":
        raise UsageError(f"{where}.file: must be a .npy file, got {item['file']}")
    extra = sorted(set(item) - {"file", "shape", "dtype"})
    if extra:
        raise UsageError(f"{where}.{extra[0]}: a file input takes only file, shape and dtype")
    dtype = _dtype(item, where, frontend, None) if "dtype" in item else None
    shape, stored = inputs_mod.shape_dtype({"file": str(path), "dtype": dtype}, where=f"{where}.file")
    if inputs_mod.dtype_name(stored) is None:
        raise UsageError(f"{where}.file: {item['file']} holds {stored}; valid dtypes: "
                         f"{', '.join(supported_dtypes(frontend))} (bfloat16/fp8 files: give dtype)")
    if dtype is not None and inputs_mod.dtype_name(stored) != dtype:
        raise UsageError(f"{where}.dtype: {dtype}, but {item['file']} holds {stored}")
    if "shape" in item and list(_shape(item, where)) != list(shape):
        raise UsageError(f"{where}.shape: {item['shape']}, but {item['file']} holds {list(shape)}")
    return InputSpec(shape=list(shape), dtype=inputs_mod.dtype_name(stored), file=path)


def _check_distribution(spec: InputSpec, item: dict[str, Any], where: str) -> None:
    """Parameters the draw can honour in the input's dtype (NumPy would raise or overflow)."""
    dtype = inputs_mod.to_dtype(spec.dtype)
    lowest, highest = inputs_mod.finite_range(dtype)
    if spec.distribution == "uniform":
        if spec.low > spec.high:
            raise UsageError(f"{where}.low: {spec.low:g} is above high {spec.high:g}")
        if dtype.kind in "iu":
            if spec.low != int(spec.low) or spec.high != int(spec.high) or spec.low >= spec.high:
                raise UsageError(f"{where}.low: uniform {spec.dtype} draws integers in [low, high): low and high "
                                 f"must be integers with low < high, got {spec.low:g}, {spec.high:g}")
            if spec.low < lowest or spec.high - 1 > highest:
                raise UsageError(f"{where}.high: [{spec.low:g}, {spec.high:g}) is outside {spec.dtype}'s range "
                                 f"[{lowest:g}, {highest:g}]")
        elif spec.low < lowest or spec.high > highest:
            raise UsageError(f"{where}.high: [{spec.low:g}, {spec.high:g}] is outside {spec.dtype}'s finite range "
                             f"[{lowest:g}, {highest:g}]")
    if spec.distribution == "normal":
        if spec.std < 0:
            raise UsageError(f"{where}.std: must be >= 0, got {spec.std:g}")
        if not lowest <= spec.mean <= highest:
            raise UsageError(f"{where}.mean: {spec.mean:g} is outside {spec.dtype}'s range [{lowest:g}, {highest:g}]")


def _check_memory(inputs: list[InputSpec], probe: VariantSpec) -> None:
    """All inputs together must fit this host's memory: analyze draws them here."""
    total = inputs_mod.memory_bytes("MemTotal")
    sizes = [inputs_mod.element_count(i.shape) * inputs_mod.to_dtype(i.dtype).itemsize for i in inputs]
    if total is not None and sum(sizes) > total:
        big = max(range(len(sizes)), key=sizes.__getitem__)
        raise UsageError(f"{probe.where('', 'inputs')}[{big}].shape: the inputs take {sum(sizes) / 2**30:.3g} GiB, "
                         f"more than this host's memory ({total / 2**30:.3g} GiB)")


def check_signature(spec: VariantSpec, params: list[tuple[Any, str]], shapes: bool = True) -> None:
    """The inputs against the entry's parameters, (shape, dtype) each as the frontend reads them
    (shape None or with symbolic dims where unknown; dtype as TVM or MLIR names it)."""
    where = spec.where("", "inputs")
    if len(params) != len(spec.inputs):
        raise UsageError(f"{where}: {len(spec.inputs)} inputs, but {spec.entry} takes {len(params)} parameters")
    for i, (inp, (shape, dtype)) in enumerate(zip(spec.inputs, params)):
        want = inputs_mod.dtype_name(dtype) or str(dtype)
        if inp.dtype != want:
            raise UsageError(f"{where}[{i}].dtype: {inp.dtype}, but {spec.entry}'s parameter {i} is {want}")
        if shapes and shape is not None and (len(shape) != len(inp.shape) or
                                  any(isinstance(s, int) and s != g for s, g in zip(shape, inp.shape))):
            raise UsageError(f"{where}[{i}].shape: {inp.shape}, but {spec.entry}'s parameter {i} has shape "
                             f"{list(shape)}")


def _reference(d: Any, files: SpecFiles, probe: VariantSpec) -> ReferenceSpec | None:
    if d is None:
        return None
    where = probe.where("reference", None)
    table_keys(d, REFERENCE_KEYS, where)
    text = d.get("python")
    if not isinstance(text, str) or ":" not in text:
        raise UsageError(f"{probe.where('reference', 'python')}: must be 'file.py:function', got {text!r}")
    rel, _, function = text.rpartition(":")
    if not _IDENTIFIER.match(function) or keyword.iskeyword(function):
        raise UsageError(f"{probe.where('reference', 'python')}: {function!r} is not a Python function name")
    path = files.existing(rel, probe.where("reference", "python"))
    if path.suffix != ".py":
        raise UsageError(f"{probe.where('reference', 'python')}: must be a .py file, got {rel}")
    rtol, atol = _number(d, "rtol", 1e-5, where), _number(d, "atol", 1e-6, where)
    if rtol < 0 or atol < 0:
        raise UsageError(f"{probe.where('reference', 'rtol' if rtol < 0 else 'atol')}: must be >= 0")
    return ReferenceSpec(text, path, function, rtol=rtol, atol=atol)


def string_list(d: dict[str, Any], key: str, where: str) -> list[str]:
    value = d.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise UsageError(f"{where}: must be an array of strings, got {value!r}")
    return list(value)


def resolve_target(requested: str | None, spec: VariantSpec, bundle_only: bool) -> str:
    """The concrete target a command builds for: requested (a --target), else the spec's with
    bundle_only, else auto: this host's GPU, or llvm where there is none."""
    if requested is None and bundle_only:
        requested = spec.target
    if requested is None:
        requested = "auto"
    if requested != "auto":
        return with_target(spec, requested).target  # validates the syntax
    from rootcause.gpus import detect_gpu

    gpu = detect_gpu()
    if gpu is None:
        return "llvm"
    # A spec written for this kind of GPU keeps its arch (IREE 3.13 has no sm_90: specs say sm_80).
    return spec.target if spec.target.split(":")[0] == gpu.split(":")[0] else gpu
