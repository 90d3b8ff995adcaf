"""A bundle loaded with its frontend's runtime, on this host's device (no compiler imported)."""
from __future__ import annotations

from typing import Any

from rootcause import frontends
from rootcause.artifacts.bundle import Bundle, read_bundle
from rootcause.errors import UsageError
from rootcause.frontends.base import Session


def load_session(bundle: Bundle | Any, device: str | None = None) -> Session:
    """Load a bundle (a Bundle or its directory) with its frontend's runtime on `device`
    (default: the device its target runs on)."""
    if not isinstance(bundle, Bundle):
        bundle = read_bundle(bundle)
    if bundle.frontend not in frontends.FRONTENDS:
        raise UsageError(f"{bundle.path / 'manifest.json'}: frontend: unknown {bundle.frontend!r} "
                         f"({'|'.join(frontends.FRONTENDS)})")
    return frontends.get(bundle.frontend).load_session(bundle, device or frontends.default_device(bundle.target))
