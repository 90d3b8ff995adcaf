"""XLA hybrids: none yet. A hybrid takes one unit's decision from the other side; XLA makes its
fusion decisions inside one compile with no per-fusion override a spec can name, so none is planned."""
from __future__ import annotations

from pathlib import Path

from rootcause.model import CatalogKernel, Hybrid


def plan(spec_a, spec_b, catalog_a: list[CatalogKernel], catalog_b: list[CatalogKernel],
         bundles: dict[str, Path] | None, work_dir: Path | None, notes: list[str]) -> list[Hybrid]:
    notes.append("XLA plans no hybrids: its fusion decisions have no per-fusion override a spec can name")
    return []
