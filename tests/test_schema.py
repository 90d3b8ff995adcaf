"""The shape check of the JSON documents rootcause reads back (artifacts/schema.py): its fast walk
(fits) and the walk that names the key (check) agree on every field of a real attribution.json
edited to a value of another type, and the key named is the one edited."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from mutation import edited, leaves
from rootcause.artifacts import attribution, schema
from rootcause.errors import UsageError

ROOT = Path(__file__).resolve().parents[1]
# the H200 CUPTI pair's attribution (gallery/pool_fusion_h200_cupti/PROVENANCE)
DOC = json.loads((ROOT / "gallery" / "pool_fusion_h200_cupti" / "attribution.json").read_text(encoding="utf-8"))
VALUES = (None, "x", {}, 1e308, np.float64(2.5))


def _key(path: tuple) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def test_the_real_document_fits():
    assert schema.fits(DOC, attribution.SHAPE)
    schema.check(DOC, attribution.SHAPE, "a.json")


@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_fits_and_check_agree_on_every_field_edited(value):
    """Where fits refuses a document, check raises a one-line UsageError naming the key edited, a
    parent of it, or (an object made empty) a key missing under it; where fits accepts it, the
    key-naming walk (which tests each value on its own, without fits's shortcuts) finds nothing."""
    for path in leaves(DOC):
        doc = edited(DOC, path, value)
        if schema.fits(doc, attribution.SHAPE):
            schema._explain(doc, attribution.SHAPE, "a.json", "")  # the walk that names keys finds nothing
            continue
        with pytest.raises(UsageError) as err:
            schema.check(doc, attribution.SHAPE, "a.json")
        named = str(err.value).split("key '")[1].split("'")[0]
        edited_key = _key(path)
        assert edited_key.startswith(named) or named.startswith(edited_key), (path, str(err.value))
        assert "\n" not in str(err.value)


@pytest.mark.parametrize("path, value, refused", [
    (("whole_graph", "delta_ns", "median"), 1e308, True),  # beyond any value rootcause writes
    (("whole_graph", "delta_ns", "median"), float("nan"), True),
    (("whole_graph", "delta_ns", "median"), np.float64(-12.5), False),  # a NumPy scalar of a document not yet written
    (("whole_graph", "delta_ns", "median"), True, True),  # a bool is not a number
    (("whole_graph", "delta_ns", "median"), float("-inf"), True),
    (("whole_graph", "delta_ns", "median"), -10**31, True),  # an int beyond LARGEST
    (("whole_graph", "delta_ns", "median"), -10**29, False),
    (("whole_graph", "delta_ns", "median"), np.int64(7), False),
    (("units", 0, "unit"), True, True),  # a bool is not an int either
    (("units", 0, "unit"), 10**31, False),  # an int field is not bounded, a number is
    (("units", 0, "kernels_a", 0), True, True),  # nor a string
    (("units", 0, "kernels_a"), "k", True),
    (("units", 0, "kernels_a"), [], False),
])
def test_chosen_edits(path, value, refused):
    assert schema.fits(edited(DOC, path, value), attribution.SHAPE) is not refused
