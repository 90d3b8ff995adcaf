"""Errors the CLI turns into one line and exit status 2 (ParseError lives in parsers)."""


class UsageError(Exception):
    """Bad input that is not a parse error: a missing file, a bad spec, a bad flag value.

    The message is one line naming the file or option, the place and what is wrong.
    """


class OutputsDiffer(Exception):
    """Variants compute different outputs: exit status 1, with the max errors per output."""
