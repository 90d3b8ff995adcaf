"""`rootcause build SPEC --out DIR`: build one variant spec into a bundle (rootcause.build)."""
from __future__ import annotations

import argparse
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("spec", help="variant spec: file.toml or file.toml#NAME")
    parser.add_argument("--out", required=True, type=Path, help="bundle directory to write")
    parser.add_argument("--target", help="override the spec's target (e.g. llvm, cuda:sm_90)")
    parser.add_argument("--no-cache", action="store_true", help="build even if a cached build exists")


def run(args: argparse.Namespace) -> int:
    import sys

    from rootcause import spec as spec_mod  # here: `build --help` pays for argparse alone
    from rootcause.build import build_bundle, check_before_build

    spec = spec_mod.load(args.spec)
    if args.target:
        spec = spec_mod.with_target(spec, args.target)
    check_before_build([spec])
    if sys.stderr.isatty():  # a log or a pipe gets the path alone (or the one error line)
        print(f"building {spec.name} for {spec.target}", file=sys.stderr, flush=True)
    out = build_bundle(spec, args.out, use_cache=not args.no_cache)
    print(out)
    return 0
