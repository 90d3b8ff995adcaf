"""Verify variants compute the same thing: same inputs, outputs equal to each other and to the
reference when the bundle has one. A mismatch raises OutputsDiffer with the errors per output.

Closeness is NumPy's allclose rule, |got - want| <= atol + rtol * |want|, elementwise, in
float64 (bfloat16 and fp8 outputs included); NaN never passes. Between two variants the looser
of their two tolerances applies.

The spec's NumPy reference is run here too (`reference_outputs`): bfloat16 and fp8 inputs reach
it as float32, and anything it raises or returns that is not an array of outputs is one line
naming the reference file and function. Outputs whose count or shapes differ from the
reference's are the reference's fault, not the variant's: that is bad input (exit 2).
"""
from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import numpy as np

from rootcause.errors import OutputsDiffer, UsageError
from rootcause.artifacts import rundir
from rootcause.artifacts.bundle import Bundle, bundle_inputs, bundle_reference
from rootcause.frontends.base import Session
from rootcause.inputs import LOW_PRECISION, dtype_name, to_dtype


def reference_outputs(spec: Any, inputs: list[np.ndarray]) -> list[np.ndarray] | None:
    """Run the spec's [reference] python function on the inputs (CPU, NumPy); None without one."""
    if spec.reference is None:
        return None
    ref = spec.reference
    where = f"{spec.where('reference', 'python')}: {Path(ref.file).name}:{ref.function}"
    func = _load_reference(Path(ref.file), ref.function, where)
    args = [a.astype(np.float32) if a.dtype.name in LOW_PRECISION else a for a in inputs]
    try:
        out = func(*args)
    except SystemExit as err:  # sys.exit in the reference is its failure, not the end of rootcause
        raise UsageError(f"{where} called sys.exit({err.code!r})") from None
    except Exception as err:  # the user's code: any error is the spec's, said in one line
        raise UsageError(f"{where} raised {type(err).__name__}: {_first_line(err)}") from None
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    if not outs:
        raise UsageError(f"{where} returned no outputs")
    arrays = []
    for n, o in enumerate(outs):
        try:
            array = np.asarray(o)
        except Exception as err:
            raise UsageError(f"{where}: output {n} is not an array: {_first_line(err)}") from None
        if dtype_name(array.dtype) is None:
            raise UsageError(f"{where}: output {n} is {type(o).__name__} of dtype {array.dtype}, not a numeric "
                             "array")
        if array.dtype.kind in "fc" and np.isnan(array).any():  # NaN equals nothing: no output could match it
            raise UsageError(f"{where}: output {n} holds {int(np.isnan(array).sum())} NaN of {array.size}; "
                             "a reference must compute every element")
        arrays.append(array)
    return arrays


def _load_reference(file: Path, function: str, where: str) -> Any:
    module_spec = importlib.util.spec_from_file_location(f"rootcause_reference_{file.stem}", file)
    if module_spec is None or module_spec.loader is None:
        raise UsageError(f"{where}: cannot be loaded as Python")
    module = importlib.util.module_from_spec(module_spec)
    try:
        module_spec.loader.exec_module(module)
    except BaseException as err:  # SystemExit and KeyboardInterrupt from a script are its failure too
        if isinstance(err, KeyboardInterrupt):
            raise
        raise UsageError(f"{where}: {file.name} failed to load: {type(err).__name__}: {_first_line(err)}") from None
    func = getattr(module, function, None)
    if not callable(func):
        raise UsageError(f"{where}: no function \"{function}\" in {file.name}")
    return func


def _first_line(err: BaseException) -> str:
    lines = [line for line in str(err).splitlines() if line.strip()]
    return lines[0].strip() if lines else "(no message)"


def check_reference_shapes(bundle: Bundle, got: list[np.ndarray], want: list[np.ndarray]) -> None:
    """UsageError when the reference returns other outputs than the model (count, shapes)."""
    spec = bundle.manifest.get("spec") or {}
    ref = (spec.get("reference") or {}).get("python", "the reference")
    where = f"{Path(spec.get('spec_file', bundle.path)).name}: [reference].python: {ref}"
    if len(got) != len(want):
        raise UsageError(f"{where} returns {len(want)} outputs, the model ({bundle.name}) {len(got)}")
    for n, (g, w) in enumerate(zip(got, want)):
        if g.shape != w.shape:
            raise UsageError(f"{where}: output {n} has shape {list(w.shape)}, the model's ({bundle.name}) "
                             f"{list(g.shape)}")


def compare(got: list[np.ndarray], want: list[np.ndarray], rtol: float, atol: float) -> list[dict[str, Any]]:
    """One row per output: shape, dtype, max_abs, max_rel, ok. Lengths must match."""
    rows = []
    for i, (g, w) in enumerate(zip(got, want)):
        row: dict[str, Any] = {"output": i, "shape": list(g.shape), "dtype": str(g.dtype)}
        if g.shape != w.shape:
            rows.append({**row, "ok": False, "problem": f"shape {list(g.shape)} vs {list(w.shape)}"})
            continue
        rows.append({**row, **_closeness(g.reshape(-1), w.reshape(-1), rtol, atol)})
    if len(got) != len(want):
        rows.append({"output": min(len(got), len(want)), "ok": False,
                     "problem": f"{len(got)} outputs vs {len(want)}"})
    return rows


_CHUNK = 1 << 24  # elements per float64 pass: bounded memory for outputs of GBs (prefill: 4 GiB f16)


def _closeness(g: np.ndarray, w: np.ndarray, rtol: float, atol: float) -> dict[str, Any]:
    max_abs = max_rel = 0.0
    nan = ref_nan = 0
    ok = True
    for lo in range(0, g.size, _CHUNK):
        g64, w64 = g[lo:lo + _CHUNK].astype(np.float64), w[lo:lo + _CHUNK].astype(np.float64)
        diff = np.abs(g64 - w64)
        rel = diff / np.maximum(np.abs(w64), np.finfo(np.float64).tiny)
        g_nan, w_nan = np.isnan(g64), np.isnan(w64)
        nan += int(g_nan.sum())
        ref_nan += int(w_nan.sum())
        ok = ok and not g_nan.any() and not w_nan.any() and bool(np.all(diff <= atol + rtol * np.abs(w64)))
        if diff.size and not np.isnan(diff).all():
            max_abs, max_rel = max(max_abs, float(np.nanmax(diff))), max(max_rel, float(np.nanmax(rel)))
    return {"ok": ok, "max_abs": max_abs, "max_rel": max_rel, "nan": nan, "ref_nan": ref_nan}


def _tolerance(bundle: Bundle) -> tuple[float, float]:
    m = bundle.manifest
    return float(m.get("rtol") if m.get("rtol") is not None else 1e-5), \
        float(m.get("atol") if m.get("atol") is not None else 1e-6)


def common_inputs(bundles: list[Bundle]) -> list[np.ndarray]:
    """The inputs every variant is called with: the first bundle's, checked against the others' specs."""
    first = bundles[0]
    inputs = bundle_inputs(first)
    for other in bundles[1:]:
        specs = other.manifest["inputs"]
        if len(specs) != len(inputs):
            raise UsageError(f"{other.path}: {len(specs)} inputs, {first.path} has {len(inputs)}")
        for i, (spec, array) in enumerate(zip(specs, inputs)):
            if list(spec.get("shape", array.shape)) != list(array.shape) or \
                    to_dtype(spec.get("dtype", array.dtype.name), f"{other.path}: inputs[{i}]") != array.dtype:
                raise UsageError(f"{other.path}: inputs[{i}]: {spec.get('shape')} {spec.get('dtype')} differs "
                                 f"from {first.path}: {list(array.shape)} {array.dtype}")
    return inputs


def verify(sessions: list[Session], inputs: list[np.ndarray],
           tolerance: tuple[float, float] | None = None) -> dict[str, Any]:
    """Call every session once on `inputs`; compare to the reference and to the first variant.

    `tolerance` (rtol, atol) replaces the manifests' for the variant-to-variant checks (two
    builds of a low-precision graph that reduce in different orders differ by rounding).

    Returns the record of every check (for measurement.json); raises OutputsDiffer on the
    first failing check, after all checks are recorded in its `record` attribute.
    """
    outputs = {}
    for s in sessions:
        s.set_inputs(inputs)
        s.call()
        outputs[s.bundle.name] = s.outputs()
    checks = []
    for s in sessions:
        ref = bundle_reference(s.bundle)
        if ref is None and s.bundle.manifest.get("reference"):
            checks.append({"variant": s.bundle.name, "against": "reference", "skipped": "reference not stored "
                           "(over 64 MB)", "outputs": []})
        if ref is not None:
            check_reference_shapes(s.bundle, outputs[s.bundle.name], ref)
            rtol, atol = _tolerance(s.bundle)
            checks.append({"variant": s.bundle.name, "against": "reference", "rtol": rtol, "atol": atol,
                           "outputs": compare(outputs[s.bundle.name], ref, rtol, atol)})
    base = sessions[0]
    for s in sessions[1:]:
        rtol = max(_tolerance(base.bundle)[0], _tolerance(s.bundle)[0])
        atol = max(_tolerance(base.bundle)[1], _tolerance(s.bundle)[1])
        if tolerance is not None:
            rtol, atol = tolerance
        checks.append({"variant": s.bundle.name, "against": base.bundle.name, "rtol": rtol, "atol": atol,
                       "outputs": compare(outputs[s.bundle.name], outputs[base.bundle.name], rtol, atol)})
    nan = {name: rows for name, outs in outputs.items() if (rows := _nan_outputs(outs))}
    record = {"inputs": [{"shape": list(a.shape), "dtype": str(a.dtype)} for a in inputs], "checks": checks,
              "nan": nan, "ok": not nan and all(r["ok"] for c in checks for r in c["outputs"])}
    if not record["ok"]:
        err = OutputsDiffer(rundir.describe_verification(record))
        err.record = record  # type: ignore[attr-defined]
        raise err
    return record


def _nan_outputs(outputs: list[np.ndarray]) -> list[dict[str, Any]]:
    """The outputs of one variant that hold NaN: a build that computes NaN has no result to check
    the others against, or to be checked."""
    rows = []
    for i, out in enumerate(outputs):
        if np.issubdtype(out.dtype, np.floating) and (count := int(np.isnan(out).sum())):
            rows.append({"output": i, "nan": count, "size": int(out.size)})
    return rows
