"""`rootcause inspect PATH...`: one row of static resources per kernel (rootcause.inspect)."""
from __future__ import annotations

import sys

from rootcause.errors import UsageError

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse

FORMATS = ("table", "markdown", "csv", "json")
OPTIONS = ("arch", "block", "format", "out")  # each takes a value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", metavar="PATH",
                        help="cubin, fatbin, PTX, hsaco, host ELF, TVM .so, IREE .vmfb, directory or bundle")
    parser.add_argument("--arch", help="GPU arch: ptxas target for PTX, fatbin entry to pick (sm_90, gfx942)")
    parser.add_argument("--block", help="threads per block for occupancy where the binary has none: N or XxYxZ")
    parser.add_argument("--format", choices=FORMATS, default="table")
    parser.add_argument("--out", help="write to this file (atomically) instead of stdout")


class LightArgs:
    """What argparse's Namespace holds for inspect (the CLI adds command and _run)."""

    def __init__(self, paths: list[str], options: dict[str, str | None]):
        self.paths = paths
        self.arch, self.block, self.out = options["arch"], options["block"], options["out"]
        self.format = options["format"] or "table"


def light_args(argv: list[str]) -> LightArgs | None:
    """The arguments of add_arguments() read without argparse: PATH... and --NAME VALUE or
    --NAME=VALUE, paths in one run as argparse takes them. None for anything else (-h, an
    abbreviation, a bad value, a missing path): argparse then reads argv and says what is wrong."""
    options: dict[str, str | None] = dict.fromkeys(OPTIONS)
    paths: list[str] = []
    pending = None  # the option waiting for its value
    ended = False  # a run of paths has been followed by an option
    for arg in argv:
        if pending is not None:
            if arg.startswith("-"):
                return None
            options[pending], pending = arg, None
        elif arg.startswith("-") and arg != "-":
            name, eq, value = arg[2:].partition("=")
            if not arg.startswith("--") or name not in OPTIONS:
                return None
            if eq:
                options[name] = value
            else:
                pending = name
            ended = bool(paths)
        elif ended:
            return None  # argparse takes one run of paths: the rest is its error
        else:
            paths.append(arg)
    if pending is not None or not paths or options["format"] not in (None, *FORMATS):
        return None
    return LightArgs(paths, options)


def parse_block(text: str | None) -> tuple[int, int, int] | None:
    if text is None:
        return None
    parts = text.lower().replace(",", "x").split("x")
    try:
        dims = [int(p) for p in parts]
    except ValueError:
        raise UsageError(f"--block: {text!r}: expected N or XxYxZ") from None
    if not 1 <= len(dims) <= 3 or any(d <= 0 for d in dims):
        raise UsageError(f"--block: {text!r}: expected 1 to 3 positive sizes")
    return tuple(dims + [1] * (3 - len(dims)))  # type: ignore[return-value]


def run(args: argparse.Namespace | LightArgs) -> int:
    # The library is imported here, not at the top: `inspect --help` pays for argparse alone.
    from rootcause.inspect import PTX_SKIPPED, inspect_paths, render, row

    block = parse_block(args.block)
    if args.out:
        from rootcause.fileio import refuse_overwriting

        refuse_overwriting([args.out], args.paths)
    if args.arch:
        _check_arch(args.arch)
    result = inspect_paths(args.paths, args.arch, block)
    text = render([row(r) for r in result.records], args.format)
    if args.out:
        from rootcause.fileio import write_atomic

        write_atomic(args.out, text)
    else:
        sys.stdout.write(text)
        sys.stdout.flush()
    _print_notes(result.notes, PTX_SKIPPED)
    for err in result.errors:
        print(f"rootcause inspect: {err}", file=sys.stderr)
    return 2 if result.errors else 0


def _print_notes(notes: list[str], ptx_skipped: str) -> None:
    """Notes on stderr. The two kinds a directory repeats per file are counted when there are
    several: files with no kernel format, PTX entries that a cubin beside them makes redundant."""
    no_format = [n for n in notes if n.endswith("(no kernel format)")]
    redundant = [n for n in notes if n.endswith(ptx_skipped)]
    counted = set(no_format) | (set(redundant) if len(redundant) > 1 else set())
    for note in dict.fromkeys(n for n in notes if n not in counted):
        print(f"rootcause inspect: note: {note}", file=sys.stderr)
    if no_format:
        print(f"rootcause inspect: note: skipped {len(no_format)} file(s) with no kernel format", file=sys.stderr)
    if len(redundant) > 1:
        print(f"rootcause inspect: note: {len(redundant)} PTX entries not assembled: the cubin of the same "
              "arch in their container holds their kernels", file=sys.stderr)


def _check_arch(arch: str) -> None:
    a = arch.strip().lower()
    if not (a.startswith("gfx") or a.startswith("sm") or a.startswith("compute") or a.isdigit()):
        raise UsageError(f"--arch: {arch!r}: expected sm_XY, compute_XY or gfxNNN")
