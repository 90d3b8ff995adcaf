"""Streaming readers for a JSON array of records and for JSON Lines.

A profiler dump of a million kernel records is over a gigabyte of JSON; json.load would hold
every record as a dict at once. These readers decode one record at a time from a binary
stream, and a decode failure names the record index, the line and the character offset.
"""
from __future__ import annotations

import codecs
import json
from typing import Any, BinaryIO, Iterator

from parsers.base import ParseError

_WS = " \t\r\n"


def iter_records(stream: BinaryIO, file: str) -> tuple[str, Iterator[tuple[int, Any]]]:
    """(unit, iterator of (number, record)) for a top-level JSON array or JSON Lines, sniffed.

    unit is 'record' (number = index in the array) or 'line' (number = 1-based line), so a
    caller names a bad field as f"{unit} {number}" without the cost of tracking positions.
    """
    head = stream.read(1)
    while head and head.decode("latin-1") in _WS:
        head = stream.read(1)
    if not head:
        raise ParseError(file, "byte 0", "empty file: expected a JSON array or JSON Lines")
    if head == b"[":
        return "record", _iter_array(stream, file)
    if head == b"{":
        return "line", _iter_lines(stream, file, head)
    raise ParseError(file, "byte 0", f"expected '[' (JSON array) or '{{' (JSON Lines), got {head!r}")


def _iter_array(stream: BinaryIO, file: str, chunk_size: int = 1 << 22) -> Iterator[tuple[int, Any]]:
    decode = json.JSONDecoder().raw_decode
    text = codecs.getincrementaldecoder("utf-8")(errors="strict")
    buf, pos, base, lines, eof = "", 0, 1, 0, False  # base: char offset of buf[0] ('[' was 0)

    def where(p: int, index: int) -> str:
        return f"record {index} (line {lines + buf.count(chr(10), 0, p) + 1}, char {base + p})"

    def refill() -> None:
        nonlocal buf, pos, base, lines, eof
        lines += buf.count("\n", 0, pos)
        base += pos
        data = stream.read(chunk_size)
        eof = not data
        try:
            buf = buf[pos:] + text.decode(data, final=eof)
        except UnicodeDecodeError as err:
            raise ParseError(file, f"char {base + len(buf) - pos}", f"not UTF-8: {err.reason}") from None
        pos = 0

    index, expect_value = 0, True  # after '[' a value or ']' may come
    while True:
        while True:
            while pos < len(buf) and buf[pos] in _WS:
                pos += 1
            if pos < len(buf) or eof:
                break
            refill()
        if pos >= len(buf):
            raise ParseError(file, where(pos, index), "truncated JSON: the array has no closing ']'")
        c = buf[pos]
        if c == "]" and (not expect_value or index == 0):  # "[]" or after a record
            return
        if not expect_value:
            if c != ",":
                raise ParseError(file, where(pos, index), f"expected ',' or ']' after a record, got {c!r}")
            pos += 1
            expect_value = True
            continue
        while True:
            try:
                obj, end = decode(buf, pos)
                if end < len(buf) or eof:
                    break
            except json.JSONDecodeError as err:
                if eof:
                    cut = err.msg.startswith("Unterminated") or err.pos >= len(buf.rstrip()) - 1
                    what = "truncated JSON" if cut else "bad JSON"
                    raise ParseError(file, where(err.pos, index), f"{what}: {err.msg}") from None
            refill()
        yield index, obj
        pos, index, expect_value = end, index + 1, False


def _iter_lines(stream: BinaryIO, file: str, head: bytes) -> Iterator[tuple[int, Any]]:
    for lineno, raw in enumerate(_lines(stream, head), 1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            msg = getattr(err, "msg", None) or str(err)
            raise ParseError(file, f"line {lineno}", f"bad JSON Lines record: {msg}") from None
        yield lineno, obj


def _lines(stream: BinaryIO, head: bytes) -> Iterator[bytes]:
    first = True
    for raw in stream:
        yield head + raw if first else raw
        first = False
    if first:
        yield head
