"""The failures the CLI turns into one line and an exit status of their own (ParseError, a kind
of bad input, lives in parsers).

| status | failure |
| --- | --- |
| 1 | OutputsDiffer: the variants compute different outputs |
| 2 | UsageError (and parsers.ParseError): bad input, named by file, place and what is wrong |
| 3 | ToolFailed: a compiler, runtime or profiler that rootcause ran failed; its own error line quoted |
| 4 | InternalError, or any other exception: a bug in rootcause; the traceback is kept in a log |
"""

EXIT_OUTPUTS_DIFFER = 1
EXIT_BAD_INPUT = 2
EXIT_TOOL_FAILED = 3
EXIT_INTERNAL = 4

EXIT_STATUSES = """exit status: 0 done; 1 the variants' outputs differ; 2 bad input (one line: file, place, what
is wrong); 3 a compiler, runtime or profiler failed (its first error line and its log); 4 an internal
error of rootcause (a bug: the traceback's log is named); 130 ^C; 143 SIGTERM"""


class UsageError(Exception):
    """Bad input that is not a parse error: a missing file, a bad spec, a bad flag value.

    The message is one line naming the file or option, the place and what is wrong.
    """


class ToolFailed(Exception):
    """A tool rootcause ran (a compiler, a runtime, a profiler) failed on input rootcause accepted.

    The message names the tool and quotes the first error line of its own output, and where the
    whole log is kept."""


class InternalError(Exception):
    """A failure inside rootcause itself (a bug); `log` names where the traceback was kept."""

    def __init__(self, message: str, log: str | None = None):
        super().__init__(message)
        self.log = log


class OutputsDiffer(Exception):
    """Variants compute different outputs: exit status 1, with the max errors per output."""
