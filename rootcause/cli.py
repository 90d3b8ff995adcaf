"""The `rootcause` command line: one sub-command per pipeline entry point.

Each sub-command lives in its own module, which exports `add_arguments(parser)` and
`run(args) -> int`, and may export `light_args(argv)`: its arguments read without argparse
where they are plain (None leaves them to argparse). Exit status: 0 done, 1 the variants'
outputs differ, 2 bad input (one line on stderr naming the file, the place and what is wrong;
never a traceback), 3 a tool that failed, 4 a bug (rootcause.errors lists them).
"""
from __future__ import annotations

import _signal  # signal's own import adds enum (with argparse's re, a third of a short inspect run)
import errno
import importlib
import os
import sys

from rootcause.commands import COMMANDS  # the table only: a command's module is imported when it runs
from rootcause.errors import (EXIT_BAD_INPUT, EXIT_INTERNAL, EXIT_OUTPUTS_DIFFER, EXIT_STATUSES, EXIT_TOOL_FAILED,
                              InternalError, OutputsDiffer, ToolFailed, UsageError)

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse


def _parser(command: str | None, alone: bool = False) -> argparse.ArgumentParser:
    """The argument parser; only the chosen command's module is imported.

    Importing every command for --help would make one broken or heavy module (TVM, IREE)
    cost every other command. alone: only the chosen command's sub-parser is built (the
    others are seen only in the top-level help; building them is ~5% of inspect's start-up).
    """
    import argparse

    class Parser(argparse.ArgumentParser):
        def error(self, message: str):  # one line, as for every other bad input (argparse prints two)
            if message.startswith("argument -"):  # 'argument --rtol: must be ...': the flag, then what is wrong
                raise UsageError(message.removeprefix("argument "))
            raise UsageError(f"{message} (see {self.prog} --help)")

    class Version(argparse.Action):
        def __call__(self, parser, namespace, values, option_string=None):
            print(version_line())
            parser.exit()

    parser = Parser(prog="rootcause", description=__doc__.splitlines()[0], formatter_class=_formatter,
                    epilog=EXIT_STATUSES)
    parser.add_argument("--version", action=Version, nargs=0, help="the version, and which readers are compiled")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (module_name, help_text) in COMMANDS.items():
        if alone and name != command:
            continue
        p = sub.add_parser(name, help=help_text, description=help_text, formatter_class=_formatter,
                           epilog=EXIT_STATUSES)
        if name == command:
            module = importlib.import_module(module_name)
            module.add_arguments(p)
            p.set_defaults(_run=module.run)
    return parser


def version_line() -> str:
    """'rootcause X (readers: cubin compiled, ncu-csv python)': the C readers are optional, so
    which ones this install uses is part of its version."""
    import rootcause
    from parsers.base import load_native

    readers = ", ".join(f"{label} {'compiled' if load_native(name) else 'python'}"
                        for label, name in (("cubin", "_cubin"), ("ncu-csv", "_ncu_cut")))
    return f"rootcause {rootcause.__version__} (readers: {readers})"


def _formatter(prog: str) -> argparse.HelpFormatter:
    """argparse's help formatter at the terminal's width (COLUMNS, else the terminal, else 80),
    found through os: argparse's own shutil.get_terminal_size imports shutil and with it bz2,
    lzma and zlib, a tenth of a command's start-up."""
    import argparse

    columns = os.environ.get("COLUMNS", "")
    width = int(columns) if columns.isdigit() else 0
    if width <= 0:
        try:
            width = os.get_terminal_size(sys.__stdout__.fileno()).columns or 80  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):  # no stdout (None), or not a terminal
            width = 80
    return argparse.HelpFormatter(prog, width=width - 2)


def main(argv: list[str] | None = None) -> int:
    """Run one command; argv None: this process's arguments (then the process ends after it)."""
    program = argv is None
    argv = sys.argv[1:] if argv is None else list(argv)
    for stream in (sys.stdout, sys.stderr):  # a name the terminal's encoding lacks is escaped, not a traceback
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    command = next((a for a in argv if not a.startswith("-")), None)
    known = command in COMMANDS
    # Only `rootcause COMMAND ...` skips the other sub-parsers: `rootcause -h COMMAND` prints them all.
    try:
        args = (_light_args(argv) if known and argv[0] == command else None) or \
            _parser(command if known else None, alone=known and argv[0] == command).parse_args(argv)
    except UsageError as err:
        return _fail(command if known and command else "", str(err), EXIT_BAD_INPUT)
    except SystemExit as err:  # --help, --version: argparse has printed what was asked
        return int(err.code or 0)
    args._argv = argv
    previous = _on_sigterm(_terminate)
    try:
        status = _dispatch(args)
    finally:
        _on_sigterm(previous)
    if program and args.command in ENDS_AT_ONCE:
        _end_process(status)
    return status


# Commands that hold nothing needing a clean interpreter exit (no children, threads, temporary
# folders or atexit hooks: their files are whole and closed when they return). Their process ends
# without tearing down its modules and objects (pandas', numpy's, a parsed trace's), which a
# compare of two 10 MB traces spends a tenth of its CPU time on; mypy ends the same way.
ENDS_AT_ONCE = frozenset({"inspect", "compare", "report"})


def _end_process(status: int) -> None:
    """Flush what was printed, then end the process with status, skipping the teardown."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # the reader left, or the stream is closed: the status still says it
            pass
    os._exit(status)


def _dispatch(args) -> int:
    """Run the parsed command; its exit status, every failure turned into its own status and line."""
    try:
        return int(args._run(args) or 0)
    except _bad_input() as err:
        return _fail(args.command, str(err), EXIT_BAD_INPUT)
    except OutputsDiffer as err:
        return _fail(args.command, f"outputs differ: {err}", EXIT_OUTPUTS_DIFFER)
    except ToolFailed as err:
        return _fail(args.command, str(err), EXIT_TOOL_FAILED)
    except InternalError as err:
        where = f"; the child's traceback is in {err.log}" if err.log else ""
        return _fail(args.command, f"internal error (a bug in rootcause): {err}{where}", EXIT_INTERNAL)
    except KeyboardInterrupt:
        return _fail(args.command, _interrupted(), 130)
    except Terminated:
        return _fail(args.command, _interrupted(), 128 + _signal.SIGTERM)
    except BrokenPipeError:  # `rootcause ... | head`: the reader left; say nothing more
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as err:  # a full or read-only disk is where rootcause was told to write, not a bug
        if err.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EROFS):
            return _internal(args.command, err)
        return _fail(args.command, f"{err.filename or 'a file'}: {err.strerror}: nothing after it was written; "
                     "free space there, or give --out or ROOTCAUSE_CACHE on another disk", EXIT_BAD_INPUT)
    except RecursionError:
        return _fail(args.command, "input nested too deeply to read (a JSON or TOML file?); nothing was written "
                     "by the step that failed", EXIT_BAD_INPUT)
    except Exception as err:  # noqa: BLE001  a bug: one line, and the traceback kept where it can be read
        return _internal(args.command, err)


def _fail(command: str, message: str, status: int) -> int:
    """One line on stderr, control characters escaped (a newline in a path stays in the line)."""
    from rootcause.terminal import printable

    try:
        print(f"rootcause{' ' + command if command else ''}: {printable(message)}", file=sys.stderr)
    except (OSError, ValueError):  # stderr closed or unwritable: the status still says it
        pass
    return status


def _interrupted() -> str:
    """'interrupted; kept: ...': what the command finished writing before it was stopped (whole
    files and bundles only: what was being written is removed as the command unwinds)."""
    from rootcause.fileio import finished

    paths, more = finished()
    kept = [p for p in paths if os.path.lexists(p)]
    kept = [p for p in kept if not any(q in p.parents for q in kept)]  # a bundle, not its files
    if not kept:
        return "interrupted; nothing was written (what was being written is removed)"
    more += max(0, len(kept) - 4)
    shown = ", ".join(str(p) for p in kept[:4]) + (f" and {more} more" if more else "")
    return (f"interrupted; kept {shown} (each whole; what was being written is removed); the same command "
            "again reuses cached builds")


def _keep_traceback() -> str:
    """The current exception's traceback written to a file of its own; the file's path."""
    import tempfile
    import traceback

    text = traceback.format_exc()
    try:
        fd, path = tempfile.mkstemp(prefix="rootcause-traceback-", suffix=".txt")
        with os.fdopen(fd, "w", encoding="utf-8", errors="replace") as f:
            f.write(text)
        return path
    except OSError:
        return "(not kept: no writable temporary folder)"


class Terminated(BaseException):
    """SIGTERM as an exception, so that what is running unwinds as on ^C: subprocess.run kills
    its child (a TVM build, iree-compile, a measuring child) and `finally` blocks remove
    staging folders. Python's default for SIGTERM is to die at once, skipping both."""


def _terminate(signum: int, frame: object) -> None:
    raise Terminated()


def _on_sigterm(handler):
    """Install handler for SIGTERM; the previous one. Only the main thread may (main() called
    from another thread keeps Python's default: signal.signal raises ValueError there)."""
    if handler is None:
        return None
    try:
        return _signal.signal(_signal.SIGTERM, handler)
    except ValueError:
        return None


def _light_args(argv: list[str]):
    """`rootcause COMMAND ...` read without argparse, when the command's module has a
    light_args(argv) for its plain forms (argparse's import, with re, enum, gettext and locale,
    is a third of a short `rootcause inspect`); None leaves the reading to argparse, which
    also gives --help and the usage errors."""
    module_name = COMMANDS[argv[0]][0]
    module = importlib.import_module(module_name)
    light = getattr(module, "light_args", None)
    args = light(argv[1:]) if light is not None else None
    if args is not None:
        args.command, args._run = argv[0], module.run
    return args


def _internal(command: str, err: BaseException) -> int:
    return _fail(command, f"internal error (a bug in rootcause): {type(err).__name__}: {err}; "
                 f"traceback in {_keep_traceback()}", EXIT_INTERNAL)


def _bad_input() -> tuple[type[Exception], ...]:
    """The errors that mean bad input (exit status 2).

    Called only while an exception is being matched, so that `--help` and commands that
    never parse a file do not import parsers (and its dataclasses) at start-up.
    """
    from parsers import ParseError

    return ParseError, UsageError


if __name__ == "__main__":
    sys.exit(main())
