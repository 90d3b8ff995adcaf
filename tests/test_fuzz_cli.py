"""The CLI fuzz campaign (tools/fuzz_cli.py) at CI size: a few seeded mutants of real inputs
per profile and binary format through `rootcause compare` / `rootcause inspect`, each in its own
process. Bad input must exit 0 (it still reads) or 2 with one line, never with a traceback.
The full campaign (300 per format) is `tools/fuzz_cli.py`; its figures are in its output."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
import fuzz_cli  # noqa: E402

N = int(os.environ.get("FUZZ_CLI_N", "10"))


@pytest.mark.parametrize("fmt", [*fuzz_cli.PROFILE_FORMATS, *fuzz_cli.BINARY_SAMPLES])
def test_cli_contract_on_mutants(fmt):
    tally = fuzz_cli.campaign([fmt], N, seed=0, log=lambda line: None)[fmt]
    assert tally.runs == N
    assert tally.broken == 0, dict(tally.signatures)
