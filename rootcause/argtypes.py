"""Argument types for the command line: numbers read as argparse reads them, then checked (finite,
inside the range the option can mean), so that `--rtol nan`, `--budget-s -1` or `--processes
1000000` stop before anything runs, with argparse's usage line and one error line (exit status 2)."""
from __future__ import annotations

import argparse
import math
import shlex
import sys
from collections.abc import Callable
from typing import Any


def number(low: float | None = None, high: float | None = None, *, integer: bool = False,
           above: bool = False) -> Callable[[str], float | int]:
    """A type= for argparse: a finite float (or an int with integer) with low <= x <= high
    (low < x with above)."""
    def parse(text: str) -> float | int:
        try:
            value: float | int = int(text) if integer else float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {'a whole number' if integer else 'a number'}") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
        if low is not None and (value <= low if above else value < low):
            raise argparse.ArgumentTypeError(f"must be {'>' if above else '>='} {low:g}, got {text}")
        if high is not None and value > high:
            raise argparse.ArgumentTypeError(f"must be <= {high:g}, got {text}")
        return value

    parse.__name__ = "int" if integer else "number"  # argparse names the type in its messages
    return parse


DAY = 86400.0
seconds = number(0, DAY, above=True)           # a time budget: more than nothing, at most a day
tolerance = number(0)                          # rtol, atol
calls = number(1, 10**6, integer=True)         # graph calls recorded or profiled
count = number(0, 10**6, integer=True)         # warm-ups, retries, hybrids
processes = number(1, 256, integer=True)       # measuring children, one after another
share = number(0, 1, above=True)               # a recovered share
relative = number(0, 10, above=True)           # a relative change


class Renamed(argparse.Action):
    """A flag under its new name (the first option string) that still answers to its old one
    for one release, with a warning on stderr: add_argument("--gpu", "--device", action=Renamed)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        new = self.option_strings[0]
        if option_string and option_string != new:
            print(f"{parser.prog}: warning: {option_string} is now {new} (one meaning per flag across commands); "
                  f"{option_string} goes in the next release", file=sys.stderr)
        setattr(namespace, self.dest, values)


def command_line(argv: list[str]) -> str:
    """argv as a shell would read it back (what attribution.json records as its command)."""
    return " ".join(shlex.quote(str(a)) for a in argv)
