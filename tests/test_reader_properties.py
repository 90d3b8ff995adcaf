"""Property tests of every profile reader: mutants of real inputs (tests/mutation.py) either read
or raise ParseError, one line that names the file, never another exception.

Inputs: the H200 CUPTI and ncu raw captures, the HTA Kineto excerpt, IREE 3.13's two JSONL
streams, the two rocprofv3 samples (fixtures/captures/), and the formats no capture exists for
here built from their documented schemas out of those captures: an nsys SQLite export and an
ncu details page.
"""
from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mutation import compressed_mutant, profile_samples, sqlite_mutant, text_mutant
from parsers import ParseError
from rootcause.profilers import FORMATS, load

DIALECT = {"cupti": "json", "chrome": "json", "iree-profile": "json", "ncu-raw": "csv",
           "ncu-details": "csv", "rocprof": "csv"}
# the reader each sample belongs to (ncu's two pages are one reader)
READER = {"ncu-raw": "ncu", "ncu-details": "ncu"}


@pytest.fixture(scope="module")
def samples(tmp_path_factory):
    found = profile_samples(tmp_path_factory.mktemp("samples"))
    found["compressed"] = [*found["cupti"], *found["chrome"], *found["rocprof"], *found["iree-profile"]]
    return found


def _mutant(rng: random.Random, fmt: str, source: Path, out: Path) -> Path:
    if fmt == "nsys":
        return sqlite_mutant(rng, source, out)
    if fmt == "compressed":
        out.write_bytes(compressed_mutant(rng, source.read_bytes(), "csv" if source.suffix == ".csv" else "json"))
        return out
    out.write_bytes(text_mutant(rng, source.read_bytes(), DIALECT[fmt]))
    return out


def _only_parse_errors(path: Path, fmt: str) -> None:
    """load() (sniffing) and the format's own reader on the bytes: rows or one ParseError."""
    import importlib

    reads = [lambda: load(path, kinds=None)]
    if fmt != "compressed":  # the reader itself takes uncompressed bytes
        reader = importlib.import_module(FORMATS[READER.get(fmt, fmt)])
        reads.append(lambda: reader.events(path.read_bytes(), str(path)))
    for read in reads:
        try:
            read()
        except ParseError as err:
            text = str(err)
            assert "\n" not in text and text.startswith(str(path)), text


@pytest.mark.parametrize("fmt", ["cupti", "chrome", "iree-profile", "ncu-raw", "ncu-details", "rocprof", "nsys",
                                 "compressed"])
@settings(max_examples=int(os.environ.get("READER_EXAMPLES", "60")), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rng=st.randoms(use_true_random=False))
def test_mutants_raise_only_parse_error(samples, fmt, rng, tmp_path):
    source = rng.choice(samples[fmt])
    path = _mutant(rng, fmt, source, tmp_path / f"mutant{source.suffix}")
    _only_parse_errors(path, fmt)


def test_samples_read(samples):
    """The unmutated inputs read (so a mutant's ParseError is the mutation's doing)."""
    for fmt, paths in samples.items():
        for path in paths:
            assert len(load(path)) > 0, path
