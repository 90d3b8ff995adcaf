"""The compiled cubin decoder (parsers/_cubin.c) against the Python reader (parsers/cubin.py),
which is the reference: the same records, and the same one-line ParseError on damaged cubins.
The decoder returns records only; rootcause.inspect writes every row.

Against NVIDIA's tools (cuobjdump --dump-resource-usage, ptxas -v) the decoder is checked in
test_cubin.py, whose tests run once per decoder, and in test_inspect.py."""
from __future__ import annotations

import os
import random
import shutil
import sysconfig
from pathlib import Path

import pytest

from parsers import ParseError, cubin, elf
from rootcause.inspect import detect, inspect_paths, render, row
from test_cubin_helpers import FIXTURES, nvcc

ROOT = Path(__file__).resolve().parents[1]
native = cubin.native
needs_native = pytest.mark.skipif(native is None, reason="parsers._cubin not built (or ROOTCAUSE_PURE_PYTHON set)")


def test_extension_is_built_where_a_compiler_is():
    """`pip install -e .` builds parsers._cubin; only a host without a C compiler (the GPU host
    runs a copied source tree) or ROOTCAUSE_PURE_PYTHON goes without it."""
    if os.environ.get("ROOTCAUSE_PURE_PYTHON"):
        assert native is None
        return
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(compiler) is None:
        pytest.skip(f"no C compiler ({compiler}): the Python reader is the one in use")
    assert native is not None, "parsers._cubin is not built: run `pip install -e .` (or setup.py build_ext --inplace)"


def _kernel_files() -> list[Path]:
    """Every file under fixtures/ that inspect reads as a GPU binary holding CUDA code."""
    found = []
    for path in sorted((ROOT / "fixtures").rglob("*")):
        if path.is_file():
            with open(path, "rb") as f:
                fmt = detect(f.read(1 << 18))
            if fmt in ("cubin", "fatbin", "host-elf", "host-fatbin", "tvm-so", "vmfb"):
                found.append(path)
    return found


def _python_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cubin, "native", None)


@needs_native
@pytest.mark.parametrize("path", _kernel_files(), ids=lambda p: str(p.relative_to(ROOT / "fixtures")))
def test_fixture_rows_match_the_python_reader(path, monkeypatch):
    compiled = inspect_paths([path])
    _python_only(monkeypatch)
    reference = inspect_paths([path])
    assert compiled.records == reference.records  # every field, extra included
    assert (compiled.errors, compiled.notes) == (reference.errors, reference.notes)
    assert render([row(r) for r in compiled.records], "json") == render([row(r) for r in reference.records], "json")


@needs_native
def test_fixtures_hold_cubins_of_every_kind():
    """The comparison above must see cubins: bare, in fatbins (plain, LZ4, zstd), in TVM
    libraries and in bundles of the zoo."""
    kinds = {detect(p.read_bytes()[:1 << 18]) for p in _kernel_files()}
    assert {"cubin", "fatbin", "tvm-so", "vmfb"} <= kinds
    rows = [r for p in _kernel_files() for r in inspect_paths([p]).records if r.format.endswith("cubin")]
    assert len(rows) > 50 and {r.arch for r in rows} >= {"sm_80", "sm_90", "sm_90a"}


def _outcome(fn, data: bytes):
    """('rows', value) or ('error', one-line message)."""
    try:
        return "rows", fn(data)
    except ParseError as exc:
        message = str(exc)
        assert "\n" not in message and message.startswith("m.cubin: "), message
        return "error", message


def _same(data: bytes) -> bool:
    """The decoder gives the Python reader's records or error, or hands the bytes back (None)."""
    python = _outcome(lambda d: cubin.python_kernels(d, "m.cubin"), data)
    compiled = _outcome(lambda d: native.kernels(d, "m.cubin"), data)
    if compiled == ("rows", None):
        return True
    if compiled[0] == "rows":
        arch, rows = compiled[1]
        compiled = "rows", [cubin.KernelRecord(n, "m.cubin", "cubin", arch, g, None, None, s, lo, st, pa, mt,
                                               None, None, b, e) for n, g, s, lo, st, pa, mt, b, e in rows]
    assert compiled == python
    return True


def _regions(data: bytes) -> list[tuple[int, int]]:
    """Byte ranges the decoder reads: ELF header, section table, symbols, strings, .nv.info*."""
    image = elf.parse(data, "seed")
    h = image.header
    out = [(0, 64), (h.shoff, h.shoff + 64 * len(image.sections))]
    for sec in image.sections:
        if sec.type != elf.SHT_NOBITS and sec.size and (
                sec.type in (elf.SHT_SYMTAB, elf.SHT_STRTAB) or sec.name.startswith((".nv.info", ".nv.compat"))):
            out.append((sec.offset, sec.offset + sec.size))
    return out


def _seeds() -> list[bytes]:
    seeds = [(FIXTURES / n).read_bytes() for n in ("kernels_sm90.cubin", "bounds_sm90a_ptxas12.cubin",
                                                    "tvm_pool_fusion_on_sm90.cubin")]
    try:
        seeds.append(nvcc("cubin", "-arch=sm_80")[0].read_bytes())
    except BaseException as exc:  # no PyPI nvcc here: the committed cubins still cover both ABIs
        if not isinstance(exc, pytest.skip.Exception):
            raise
    return seeds


@needs_native
def test_truncated_cubins_fail_alike():
    for seed in _seeds():
        cuts = sorted({*range(0, 80), *range(0, len(seed), 61), *(b for a, b in _regions(seed)),
                       *(a for a, _ in _regions(seed))})
        for cut in cuts:
            assert _same(seed[:cut]), cut


@needs_native
def test_mutated_cubins_fail_alike():
    rng = random.Random(12)
    outcomes = {"rows": 0, "error": 0, "python": 0}
    for seed in _seeds():
        regions = _regions(seed)
        for _ in range(1500):
            blob = bytearray(seed)
            for _ in range(rng.randint(1, 4)):
                start, end = rng.choice(regions)
                at = rng.randrange(start, max(end, start + 1))
                if at < len(blob):
                    blob[at] = rng.randrange(256) if rng.random() < 0.5 else blob[at] ^ (1 << rng.randrange(8))
            data = bytes(blob)
            assert _same(data)
            try:
                kind = "python" if native.kernels(data, "m.cubin") is None else "rows"
            except ParseError:
                kind = "error"
            outcomes[kind] += 1
    # The mutants must reach both outcomes in the decoder itself, not only its hand-back.
    assert outcomes["rows"] > 500 and outcomes["error"] > 500, outcomes
