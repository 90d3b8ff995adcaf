"""Which kernel of a TVM bundle first writes NaN (run on the host that sees the NaN).

    python gpu/nan_probe.py BUNDLE [--device cuda|cpu]

Loads the bundle with rootcause's TVM session, draws its inputs as `rootcause run` does, and calls
its entry once under the Relax VM's instrument hook: after every call instruction each tensor
argument is read back and checked for NaN. Prints, in order of the calls, the first calls whose
arguments hold NaN (the first is the producer: its inputs held none before it ran), then the
outputs' NaN count. A debugging aid for "outputs differ" with NaN on one host and not another.
"""
from __future__ import annotations

import argparse
import sys

import numpy as np

from rootcause.artifacts.bundle import bundle_inputs, read_bundle
from rootcause.frontends.tvm.runtime import TvmSession


def _nan_count(value) -> int | None:
    if not hasattr(value, "numpy"):
        return None
    try:
        array = value.numpy()
    except Exception:  # noqa: BLE001  an argument the runtime cannot read back (a storage, a shape)
        return None
    return int(np.isnan(array).sum()) if np.issubdtype(array.dtype, np.floating) else None


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("bundle")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--show", type=int, default=6, help="calls with NaN to print")
    args = ap.parse_args(argv)
    bundle = read_bundle(args.bundle)
    session = TvmSession(bundle, args.device)
    arrays = bundle_inputs(bundle)
    print(f"inputs: {len(arrays)}, NaN in them: {sum(int(np.isnan(a).sum()) for a in arrays)}")
    session.set_inputs(arrays)
    seen: list[str] = []
    calls = [0]

    def instrument(func, symbol, before_run, ret_value, *call_args):
        if before_run:
            return 0
        calls[0] += 1
        counts = [_nan_count(a) for a in call_args]
        if any(counts) and len(seen) < args.show:
            seen.append(f"call {calls[0]}: {symbol}: NaN per argument {counts}")
        return 0

    session.vm.set_instrument(instrument)
    session.call()
    outputs = session.outputs()
    print(f"{calls[0]} calls; the first with NaN in an argument:")
    print("\n".join(seen) or "  none")
    print("outputs: NaN " + ", ".join(f"{int(np.isnan(o).sum())} of {o.size}" for o in outputs))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
