"""The checks of a spec's [[inputs]] (shapes, dtypes, distributions, files, the memory they take),
its [reference] and of the entry's parameters against them (rootcause.spec)."""
from __future__ import annotations

import dataclasses
import keyword
from typing import Any

from rootcause import inputs as inputs_mod
from rootcause.errors import UsageError
from rootcause.spec.types import (
    DISTRIBUTIONS, INPUT_KEYS, INT64_MAX, IDENTIFIER, REFERENCE_KEYS, InputSpec, ReferenceSpec, SpecFiles,
    VariantSpec, supported_dtypes, table_keys)


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
    if count > INT64_MAX or size > INT64_MAX:
        raise UsageError(f"{where}.shape: {'x'.join(map(str, shape))} {dtype} is {count} elements, "
                         f"{size} bytes: overflows int64")


def input_spec(i: int, item: Any, files: SpecFiles, probe: VariantSpec, frontend: str,
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


def check_memory(inputs: list[InputSpec], probe: VariantSpec) -> None:
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


def reference_spec(d: Any, files: SpecFiles, probe: VariantSpec) -> ReferenceSpec | None:
    if d is None:
        return None
    where = probe.where("reference", None)
    table_keys(d, REFERENCE_KEYS, where)
    text = d.get("python")
    if not isinstance(text, str) or ":" not in text:
        raise UsageError(f"{probe.where('reference', 'python')}: must be 'file.py:function', got {text!r}")
    rel, _, function = text.rpartition(":")
    if not IDENTIFIER.match(function) or keyword.iskeyword(function):
        raise UsageError(f"{probe.where('reference', 'python')}: {function!r} is not a Python function name")
    path = files.existing(rel, probe.where("reference", "python"))
    if path.suffix != ".py":
        raise UsageError(f"{probe.where('reference', 'python')}: must be a .py file, got {rel}")
    rtol, atol = _number(d, "rtol", 1e-5, where), _number(d, "atol", 1e-6, where)
    if rtol < 0 or atol < 0:
        raise UsageError(f"{probe.where('reference', 'rtol' if rtol < 0 else 'atol')}: must be >= 0")
    return ReferenceSpec(text, path, function, rtol=rtol, atol=atol)
