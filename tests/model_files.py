"""The model files of fixtures/models and fixtures/cases, imported as Python modules: what the
tests read their truths from (shapes, scopes, modules), independently of rootcause's exporters."""
from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType


def load_model(folder: Path) -> ModuleType:
    """folder/model.py, imported afresh (each folder's file is named model.py)."""
    sys.path.insert(0, str(folder))
    try:
        return importlib.reload(importlib.import_module("model"))
    finally:
        sys.path.remove(str(folder))
