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

types.py holds the typed spec (VariantSpec and its parts, SpecFiles: the files it names) and
its key lists; inputs.py checks [[inputs]], [reference] and the entry's signature.
"""
from __future__ import annotations

import copy
import dataclasses
import re
import tomllib
from pathlib import Path
from typing import Any

from rootcause import envs, frontends
from rootcause.errors import UsageError
from rootcause.exporters import EXPORTERS
from rootcause.spec.inputs import check_memory, check_signature, input_spec, model_inputs, reference_spec
from rootcause.spec.types import (
    DISTRIBUTIONS, INPUT_KEYS, IDENTIFIER, MODEL_KEYS, REFERENCE_KEYS, TARGET_RE, TOP_KEYS, WEIGHT_KEYS, InputSpec,
    ModelSpec, ReferenceSpec, SpecFiles, VariantSpec, array, supported_dtypes, table_keys)

__all__ = [
    "DISTRIBUTIONS", "INPUT_KEYS", "MODEL_KEYS", "REFERENCE_KEYS", "TOP_KEYS", "WEIGHT_KEYS", "InputSpec",
    "ModelSpec", "ReferenceSpec", "SpecFiles", "VariantSpec", "check_signature", "deep_merge", "load",
    "model_inputs", "pinned", "resolve_target", "string_list", "supported_dtypes", "table_keys",
    "toolchain_packages", "variant_names", "with_target"]


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
    if not TARGET_RE.match(target):
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
    if not TARGET_RE.match(d["target"]):
        raise UsageError(f"{probe.where('', 'target')}: unknown target \"{d['target']}\"; valid: "
                         "'cuda:sm_XX' (e.g. cuda:sm_90), 'rocm:gfxNNN' (e.g. rocm:gfx942), 'llvm', 'auto'")
    outside = d.get("allow_outside_paths", False)
    if not isinstance(outside, bool):
        raise UsageError(f"{probe.where('', 'allow_outside_paths')}: must be true or false, got {outside!r}")
    files = SpecFiles(spec_file.parent, outside)
    source = files.existing(d["source"], probe.where("", "source"))
    inputs = [input_spec(i, item, files, probe, d["frontend"])
              for i, item in enumerate(array(d.get("inputs", []), probe.where("", "inputs")))]
    check_memory(inputs, probe)
    reference = reference_spec(d.get("reference"), files, probe)
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
    if not isinstance(factory, str) or not IDENTIFIER.match(factory):
        raise UsageError(f"{probe.where('model', 'factory')}: must be a Python function name, got {factory!r}")
    if source.suffix != ".py":
        raise UsageError(f"{probe.where('', 'source')}: a [model] source is the Python file defining the model, "
                         f"got {source.name}")
    weights = d.get("weights", {})
    table_keys(weights, WEIGHT_KEYS, probe.where("model", "weights"))
    # checked as an input of one element: the same distributions, parameters and seed rules
    drawn = input_spec(0, {"distribution": default.weights.distribution, "std": default.weights.std,
                       "seed": default.weights.seed, **weights, "shape": [1]},
                   SpecFiles(source.parent, True), probe, frontend, probe.where("model", "weights"))
    return ModelSpec(exporter, factory, dataclasses.replace(drawn, shape=[]))


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
