"""Input arrays from their spec: the one recipe the build (stored inputs) and the runners
(inputs over 64 MB, regenerated on the GPU host) share.

NumPy only, so the GPU host imports it without the spec or frontend modules. A spec is either a
manifest row (dict) or a rootcause.spec.InputSpec (attributes); both carry shape, dtype,
distribution, low, high, mean, std, seed and file.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from rootcause.errors import UsageError

DISTRIBUTIONS = ("uniform", "normal", "zeros", "ones")
_DEFAULTS = {"dtype": "float32", "distribution": "uniform", "low": 0.0, "high": 1.0, "mean": 0.0, "std": 1.0,
             "seed": 0, "file": None, "source_file": None}


def _field(spec: Any, key: str) -> Any:
    value = spec.get(key) if isinstance(spec, dict) else getattr(spec, key, None)
    return _DEFAULTS.get(key) if value is None else value


def generate(shape, dtype, distribution: str = "uniform", low: float = 0.0, high: float = 1.0,
             mean: float = 0.0, std: float = 1.0, seed: int = 0, where: str = "inputs") -> np.ndarray:
    """The array drawn from numpy default_rng(seed) (zeros/ones draw nothing)."""
    try:
        shape, dtype = tuple(int(d) for d in shape), np.dtype(dtype)
    except (TypeError, ValueError) as err:
        raise UsageError(f"{where}: bad shape or dtype: {err}") from None
    if distribution == "zeros":
        return np.zeros(shape, dtype)
    if distribution == "ones":
        return np.ones(shape, dtype)
    rng = np.random.default_rng(seed)
    if distribution == "normal":
        return rng.normal(mean, std, shape).astype(dtype)
    if distribution != "uniform":
        raise UsageError(f"{where}: distribution: unknown {distribution!r} ({'|'.join(DISTRIBUTIONS)})")
    if np.issubdtype(dtype, np.integer):
        return rng.integers(int(low), int(high), shape, dtype=dtype)
    return rng.uniform(low, high, shape).astype(dtype)


def _load(file: Path, where: str) -> np.ndarray:
    if not file.is_file():
        raise UsageError(f"{where}: {file} does not exist")
    try:
        return np.load(file, allow_pickle=False)
    except (ValueError, OSError) as err:
        raise UsageError(f"{file}: not a readable .npy: {err}") from None


def _path(file: Any, bundle_dir: Path | None) -> Path:
    file = Path(file)
    return bundle_dir / file if bundle_dir is not None and not file.is_absolute() else file


def shape_dtype(spec: Any, bundle_dir: Path | None = None, where: str = "inputs") -> tuple[tuple[int, ...], np.dtype]:
    """The input's shape and dtype without making it: a .npy file's header (memory-mapped, no
    data read), else the spec's own shape and dtype. Decides storing before anything is drawn."""
    file = _field(spec, "file") or _field(spec, "source_file")
    if file:
        path = _path(file, bundle_dir)
        if not path.is_file():
            raise UsageError(f"{where}: {path} does not exist")
        try:
            array = np.load(path, mmap_mode="r", allow_pickle=False)
        except (ValueError, OSError) as err:
            raise UsageError(f"{path}: not a readable .npy: {err}") from None
        return tuple(array.shape), array.dtype
    if _field(spec, "shape") is None:
        raise UsageError(f"{where}: needs a shape (and dtype) or a file")
    try:
        return tuple(int(d) for d in _field(spec, "shape")), np.dtype(_field(spec, "dtype"))
    except (TypeError, ValueError) as err:
        raise UsageError(f"{where}: bad shape or dtype: {err}") from None


def nbytes(spec: Any, bundle_dir: Path | None = None, where: str = "inputs") -> int:
    """Bytes the input array will take, from shape x dtype (nothing generated or read)."""
    shape, dtype = shape_dtype(spec, bundle_dir, where)
    return int(np.prod(shape, dtype=np.int64)) * dtype.itemsize


def make_input(spec: Any, bundle_dir: Path | None = None, where: str = "inputs") -> np.ndarray:
    """One input array: its .npy file when it has one (relative to bundle_dir for a manifest row),
    else the original .npy it came from (source_file: inputs too big to store), else drawn
    from its distribution."""
    file = _field(spec, "file")
    if file:
        return _load(_path(file, bundle_dir), where)
    source = _field(spec, "source_file")
    if source:
        return _load(Path(source), f"{where}: source_file (not stored in the bundle)")
    if _field(spec, "shape") is None:
        raise UsageError(f"{where}: needs a shape (and dtype) or a file")
    return generate(_field(spec, "shape"), _field(spec, "dtype"), _field(spec, "distribution"),
                    _field(spec, "low"), _field(spec, "high"), _field(spec, "mean"), _field(spec, "std"),
                    _field(spec, "seed"), where)
