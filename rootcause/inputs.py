"""Input arrays from their spec: the one recipe the build (stored inputs) and the runners
(inputs over 64 MB, regenerated on the GPU host) share.

NumPy and ml_dtypes only, so the GPU host imports it without the spec or frontend modules. A
spec is either a manifest row (dict) or a rootcause.spec.InputSpec (attributes); both carry
shape, dtype, distribution, low, high, mean, std, seed and file.

dtypes: NumPy's names plus the low-precision floats NumPy lacks (bfloat16 and four fp8 types,
from ml_dtypes, named as TVM and ml_dtypes name them); MLIR's element type names (f32, bf16,
f8E4M3FNUZ, ...) are accepted as aliases. Low-precision inputs are drawn in float32 and cast.
"""
from __future__ import annotations

import ast
import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from rootcause.errors import UsageError

DISTRIBUTIONS = ("uniform", "normal", "zeros", "ones")
LOW_PRECISION = ("bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz")
DTYPES = ("float16", "float32", "float64", *LOW_PRECISION, "int8", "int16", "int32", "int64",
          "uint8", "uint16", "uint32", "uint64", "bool")
# MLIR element type names (IREE's signatures, `iree-run-module --input=2x3xbf16=...`)
MLIR_NAMES = {"f16": "float16", "f32": "float32", "f64": "float64", "bf16": "bfloat16",
              "f8E4M3FN": "float8_e4m3fn", "f8E5M2": "float8_e5m2", "f8E4M3FNUZ": "float8_e4m3fnuz",
              "f8E5M2FNUZ": "float8_e5m2fnuz", "i1": "bool", "i8": "int8", "i16": "int16", "i32": "int32",
              "i64": "int64", "si8": "int8", "si16": "int16", "si32": "int32", "si64": "int64",
              "ui8": "uint8", "ui16": "uint16", "ui32": "uint32", "ui64": "uint64"}
_MLIR_OF = {v: k for k, v in MLIR_NAMES.items() if not k.startswith("si")}
_DEFAULTS = {"dtype": "float32", "distribution": "uniform", "low": 0.0, "high": 1.0, "mean": 0.0, "std": 1.0,
             "seed": 0, "file": None, "source_file": None, "sha256": None}


def dtype_name(name: Any) -> str | None:
    """The canonical name of a dtype written as NumPy/TVM ('bfloat16') or MLIR ('bf16'), else None."""
    if isinstance(name, np.dtype):
        name = name.name
    if not isinstance(name, str):
        return None
    name = MLIR_NAMES.get(name, name)
    return name if name in DTYPES else None


def to_dtype(name: Any, where: str = "dtype") -> np.dtype:
    """np.dtype of a dtype name, ml_dtypes' types included; UsageError listing the valid names."""
    canonical = dtype_name(name)
    if canonical is None:
        raise UsageError(f"{where}: unknown dtype {name!r}; valid: {', '.join(DTYPES)} "
                         f"(or MLIR's {', '.join(_MLIR_OF.values())})")
    if canonical in LOW_PRECISION:
        import ml_dtypes  # only here: its import takes a second, and most specs are float32

        return np.dtype(getattr(ml_dtypes, canonical))
    return np.dtype(canonical)


def mlir_name(dtype: Any) -> str:
    """The MLIR element type of a dtype ('bfloat16' -> 'bf16'), as IREE's tools spell it."""
    return _MLIR_OF[dtype_name(dtype) or str(dtype)]


def is_low_precision(dtype: Any) -> bool:
    return dtype_name(dtype) in LOW_PRECISION or dtype_name(dtype) == "float16"


def finite_range(dtype: np.dtype) -> tuple[float, float]:
    """The smallest and largest finite values of a numeric dtype (bool: 0, 1)."""
    if dtype == np.bool_:
        return 0.0, 1.0
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        return float(info.min), float(info.max)
    if dtype.name in LOW_PRECISION:
        import ml_dtypes

        info = ml_dtypes.finfo(dtype)
    else:
        info = np.finfo(dtype)
    return float(info.min), float(info.max)


def element_count(shape: Any) -> int:
    """Elements of a shape, as a Python int (no int64 wrap-around)."""
    return math.prod(int(d) for d in shape)


def memory_bytes(kind: str = "MemAvailable") -> int | None:
    """This host's memory from /proc/meminfo (MemAvailable or MemTotal), None where unknown."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key == kind:
                return int(value.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return None


def check_fits(count: int, dtype: np.dtype, where: str, draw_itemsize: int = 0) -> int:
    """Bytes of `count` elements; UsageError when that overflows int64 or, with the draw's own
    temporary (`draw_itemsize` bytes per element), exceeds this host's available memory."""
    size = count * dtype.itemsize
    if count > np.iinfo(np.int64).max or size > np.iinfo(np.int64).max:
        raise UsageError(f"{where}: {count} elements of {dtype.name} ({size} bytes) overflow int64")
    need = size + count * draw_itemsize
    free = memory_bytes()
    if free is not None and need > free:
        raise UsageError(f"{where}: {count} elements of {dtype.name} need {_gib(need)} to draw, more than this "
                         f"host's available memory ({_gib(free)})")
    return size


def _gib(n: int) -> str:
    return f"{n / 2**30:.3g} GiB"


def _field(spec: Any, key: str) -> Any:
    value = spec.get(key) if isinstance(spec, dict) else getattr(spec, key, None)
    return _DEFAULTS.get(key) if value is None else value


def _shape(shape: Any, where: str) -> tuple[int, ...]:
    try:
        dims = tuple(int(d) for d in shape)
    except (TypeError, ValueError) as err:
        raise UsageError(f"{where}: bad shape {shape!r}: {err}") from None
    if any(d < 0 for d in dims):
        raise UsageError(f"{where}: bad shape {list(dims)}: negative dimension")
    return dims


def generate(shape, dtype, distribution: str = "uniform", low: float = 0.0, high: float = 1.0,
             mean: float = 0.0, std: float = 1.0, seed: int = 0, where: str = "inputs") -> np.ndarray:
    """The array drawn from numpy default_rng(seed) (zeros/ones draw nothing). Float draws are
    made in float64 and cast, through float32 for the low-precision types. Refused (one line)
    before anything is allocated when it would not fit in this host's memory."""
    shape, dtype = _shape(shape, where), to_dtype(dtype, where)
    count = element_count(shape)
    if distribution in ("zeros", "ones"):
        check_fits(count, dtype, where)
        return (np.zeros if distribution == "zeros" else np.ones)(shape, dtype)
    if distribution not in DISTRIBUTIONS:
        raise UsageError(f"{where}: distribution: unknown {distribution!r} ({'|'.join(DISTRIBUTIONS)})")
    check_fits(count, dtype, where, draw_itemsize=8)  # the draw is float64 before the cast
    rng = np.random.default_rng(seed)
    if distribution == "normal":
        drawn = rng.normal(mean, std, shape)
    elif np.issubdtype(dtype, np.integer):
        return rng.integers(int(low), int(high), shape, dtype=dtype)
    else:
        drawn = rng.uniform(low, high, shape)
    if dtype.name in LOW_PRECISION:
        drawn = drawn.astype(np.float32)
    return drawn.astype(dtype)


def _npy_raw(file: Path, dtype: np.dtype) -> np.ndarray:
    """A .npy whose header NumPy cannot read back (ml_dtypes' float8_e5m2 is saved as '<f1'):
    the header parsed here, the data read as bytes and viewed as `dtype`."""
    with open(file, "rb") as f:
        major, _ = np.lib.format.read_magic(f)
        size = int.from_bytes(f.read(2 if major == 1 else 4), "little")
        header = ast.literal_eval(f.read(size).decode("latin1"))
        shape = tuple(header["shape"])
        if header["descr"] != dtype.str:
            raise ValueError(f"descr {header['descr']!r} is not {dtype.name}'s {dtype.str!r}")
        data = np.fromfile(f, dtype=np.uint8, count=element_count(shape) * dtype.itemsize)
    if data.size != element_count(shape) * dtype.itemsize:
        raise ValueError(f"{data.size} data bytes for shape {list(shape)} of {dtype.name}")
    return data.view(dtype).reshape(shape, order="F" if header["fortran_order"] else "C")


def _as(array: np.ndarray, dtype: np.dtype | None) -> np.ndarray:
    """ml_dtypes arrays come back from .npy as raw void (V2, V1): view them as the recorded dtype."""
    if dtype is not None and array.dtype != dtype and array.dtype.kind == "V" and \
            array.dtype.itemsize == dtype.itemsize and array.dtype.names is None:
        return array.view(dtype)
    return array


def _open(file: Path, where: str, dtype: np.dtype | None, mmap: bool) -> np.ndarray:
    if not file.is_file():
        raise UsageError(f"{where}: {file} does not exist")
    try:
        return _as(np.load(file, mmap_mode="r" if mmap else None, allow_pickle=False), dtype)
    except (ValueError, OSError) as err:
        if dtype is not None and "descr" in str(err):
            try:
                return _npy_raw(file, dtype)
            except (ValueError, OSError, SyntaxError, KeyError) as raw_err:
                err = raw_err
        raise UsageError(f"{where}: {file}: not a readable .npy: {err}") from None


def _recorded_dtype(spec: Any, where: str) -> np.dtype | None:
    name = spec.get("dtype") if isinstance(spec, dict) else getattr(spec, "dtype", None)
    return to_dtype(name, f"{where}.dtype") if name else None


def _path(file: Any, bundle_dir: Path | None) -> Path:
    file = Path(file)
    return bundle_dir / file if bundle_dir is not None and not file.is_absolute() else file


def shape_dtype(spec: Any, bundle_dir: Path | None = None, where: str = "inputs") -> tuple[tuple[int, ...], np.dtype]:
    """The input's shape and dtype without making it: a .npy file's header (memory-mapped, no
    data read), else the spec's own shape and dtype. Decides storing before anything is drawn."""
    file = _field(spec, "file") or _field(spec, "source_file")
    if file:
        array = _open(_path(file, bundle_dir), where, _recorded_dtype(spec, where), mmap=True)
        return tuple(array.shape), array.dtype
    if _field(spec, "shape") is None:
        raise UsageError(f"{where}: needs a shape (and dtype) or a file")
    return _shape(_field(spec, "shape"), where), to_dtype(_field(spec, "dtype"), f"{where}.dtype")


def nbytes(spec: Any, bundle_dir: Path | None = None, where: str = "inputs") -> int:
    """Bytes the input array will take, from shape x dtype (nothing generated or read)."""
    shape, dtype = shape_dtype(spec, bundle_dir, where)
    return element_count(shape) * dtype.itemsize


def make_input(spec: Any, bundle_dir: Path | None = None, where: str = "inputs") -> np.ndarray:
    """One input array: its .npy file when it has one (relative to bundle_dir for a manifest row),
    else the original .npy it came from (source_file: inputs too big to store), else drawn
    from its distribution, and checked against the sha256 the row records (a bundle's drawn input).
    A stored ml_dtypes array is viewed as the dtype its row records."""
    file = _field(spec, "file")
    if file:
        return _open(_path(file, bundle_dir), where, _recorded_dtype(spec, where), mmap=False)
    source = _field(spec, "source_file")
    if source:
        return _open(Path(source), f"{where}: source_file (not stored in the bundle)",
                     _recorded_dtype(spec, where), mmap=False)
    if _field(spec, "shape") is None:
        raise UsageError(f"{where}: needs a shape (and dtype) or a file")
    array = generate(_field(spec, "shape"), _field(spec, "dtype"), _field(spec, "distribution"),
                     _field(spec, "low"), _field(spec, "high"), _field(spec, "mean"), _field(spec, "std"),
                     _field(spec, "seed"), where)
    expected = _field(spec, "sha256")
    if expected and digest(array) != expected:
        raise UsageError(f"{where}: drawn again from seed {_field(spec, 'seed')} it is not the array the build "
                         f"drew (sha256 differs; NumPy {np.__version__} here): rebuild the bundle on this host")
    return array


def digest(array: np.ndarray) -> str:
    """sha256 of an array's bytes in C order: what a bundle records of an input it regenerates."""
    import hashlib

    return hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()
