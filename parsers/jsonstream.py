"""Streaming readers for a JSON array of records and for JSON Lines.

A profiler dump of a million kernel records is over a gigabyte of JSON; json.load would hold
every record as a dict at once. iter_batches decodes it in chunks of a few MiB with msgspec
into a Struct that names only the wanted keys: the other keys of each record are skipped,
never built as Python objects, which is most of the cost (a CUPTI record has ~55 keys, a
KernelEvents row needs ~17). When a chunk does not decode, the exact stdlib decoder
(iter_records) takes over from that chunk's first byte, so an error names the record index,
the line and the character offset just as if the whole file had been read record by record.
"""
from __future__ import annotations

import codecs
import io
import json
from itertools import islice
from typing import Any, BinaryIO, Callable, Iterator, Sequence

import msgspec

from parsers.base import ParseError

_WS = " \t\r\n"
_CHUNK = 1 << 23  # bytes decoded at once: big enough to amortise, small enough for memory
_FIRST = 1 << 20  # the first buffer's bytes, before it grows to _CHUNK
# What a fast decode may fail with: a slower path then reads the same bytes, down to the exact
# decoder, which names the place.
_UNDECODED = (msgspec.DecodeError, msgspec.ValidationError, RecursionError)

Batches = Iterator[tuple[Sequence[int], list]]


def iter_batches(stream: BinaryIO, file: str, record_type: type) -> tuple[str, Batches]:
    """(unit, iterator of (numbers, records)) for a top-level JSON array or JSON Lines, sniffed.

    record_type is a msgspec.Struct: each record becomes one instance (keys it does not name
    are skipped; absent keys take the field defaults). unit is 'record' (numbers = indexes in
    the array) or 'line' (1-based line numbers), so a caller names a bad field
    f"{unit} {numbers[i]}". A record that is not an object is a ParseError.
    """
    unit, head = _sniff(stream, file)
    if unit == "record":
        return unit, _array_batches(stream, file, msgspec.json.Decoder(list[record_type]).decode, record_type)
    return unit, _line_batches(stream, file, head, msgspec.json.Decoder(record_type).decode_lines, record_type)


def view_batches(view: memoryview, file: str, record_type: type) -> tuple[str, Batches]:
    """iter_batches for a JSON array already in memory. One of at most _CHUNK bytes is decoded in
    one go, from the view: the stream's buffer would copy it, and bounds nothing that one decode
    of that size does not. A larger one is streamed from the view (no copy of the whole). An array
    that does not decode in one go is streamed too, so that its error names the record."""
    if len(view) <= _CHUNK:
        try:
            records = msgspec.json.decode(view, type=list[record_type])
        except _UNDECODED:
            pass
        else:
            return "record", iter([(range(len(records)), records)])
    return iter_batches(_ViewStream(view), file, record_type)


def iter_records(stream: BinaryIO, file: str) -> tuple[str, Iterator[tuple[int, Any]]]:
    """(unit, iterator of (number, record)) decoded one record at a time with the stdlib json;
    slow, but its errors say exactly where the bytes went wrong."""
    unit, head = _sniff(stream, file)
    if unit == "record":
        return unit, _iter_array(stream.read, file)
    return unit, _iter_lines(stream, file, head)


def _sniff(stream: BinaryIO, file: str) -> tuple[str, bytes]:
    head = stream.read(1)
    while head and head.decode("latin-1") in _WS:
        head = stream.read(1)
    if not head:
        raise ParseError(file, "byte 0", "empty file: expected a JSON array or JSON Lines")
    if head == b"[":
        return "record", head
    if head == b"{":
        return "line", head
    raise ParseError(file, "byte 0", f"expected '[' (JSON array) or '{{' (JSON Lines), got {head!r}")


def _array_batches(stream: BinaryIO, file: str, decode: Callable, record_type: type) -> Batches:
    # work: '[' then the bytes not decoded yet (up to filled), read into and decoded in place:
    # no copy of the data but the one read makes. It starts at _FIRST bytes and doubles up to
    # _CHUNK while reads fill it, so that a trace of 1 MB is not given a buffer of 8.
    work, filled = bytearray(b"[" + bytes(_FIRST)), 1
    index, lines, chars = 0, 0, 1  # where work[1] lies: record index, newlines before, char offset
    while True:
        if filled == len(work):  # a record longer than the buffer: grow it
            work.extend(bytes(len(work)))
        with memoryview(work) as view, view[filled:] as room:
            got = stream.readinto(room)
            more = got == len(room)  # the stream may hold more than the buffer
        filled += got
        cuts = list(islice(_record_ends(work, filled), 4)) if got else [_closing_bracket(work, filled, index)]
        if not cuts and filled < 8 * _CHUNK:  # no record ends in what was read: read more
            continue
        records, end = _decode_first(decode, work, cuts)
        if records is None:
            # Let the exact decoder read from here: it names the error, or reads what this
            # fast path declined (a cut inside a string, a duplicate ']'...).
            rest = io.BufferedReader(_Prefixed(bytes(work[1:filled]), stream), _CHUNK).read
            yield from _batched(_iter_array(rest, file, index, lines, chars), "record", file, record_type)
            return
        yield range(index, index + len(records)), records
        index += len(records)
        if work.find(b"\n", 1, end) >= 0:  # find is a fast scan; most dumps are one line
            lines += work.count(b"\n", 1, end)
        # isascii of the whole buffer (stale bytes too) is a fast, conservative check
        chars += end - 1 if work.isascii() else len(work[1:end].decode("utf-8", "replace"))
        work[1:1 + filled - end] = work[end:filled]  # the unread tail to the front
        filled -= end - 1
        if not got:
            return
        if more and len(work) <= _CHUNK:
            work.extend(bytes(len(work) - 1))


def _decode_first(decode: Callable, work: bytearray, cuts: list) -> tuple[list | None, int]:
    """(records, offset after them) for the first cut (end, resume) whose prefix decodes."""
    for cut in cuts:
        if cut and (records := _decode_upto(decode, work, cut[0])) is not None:
            return records, cut[1]
    return None, 0


def _decode_upto(decode: Callable, work: bytearray, end: int) -> list | None:
    """decode(work[:end] + b']') without a copy: the byte at end (',' or blank) is ']' meanwhile;
    None when it does not decode."""
    saved, work[end] = work[end], 0x5D
    try:
        with memoryview(work) as view, view[:end + 1] as part:
            return decode(part)
    except _UNDECODED:
        return None
    finally:
        work[end] = saved


def _record_ends(work: bytearray, filled: int) -> Iterator[tuple[int, int]]:
    """Cut candidates from the last back: (offset after a '}' that a ',' follows, offset after
    that ','). If the '}' is inside a string or a nested object the cut does not decode (a
    string or bracket is left open), so a decoded batch is always whole records."""
    end = work.rfind(b"}", 0, filled)
    while end > 0:
        gap = work[end + 1:min(end + 65, filled)]
        after = end + 1 + len(gap) - len(gap.lstrip())
        if after < filled and work[after] == 0x2C:  # ','
            yield end + 1, after + 1
        end = work.rfind(b"}", 0, end)


def _closing_bracket(work: bytearray, filled: int, index: int) -> tuple[int, int] | None:
    """At end of file: (offset of the closing ']', filled) when work[:filled] is '[' records ']'."""
    body = work[:filled].rstrip()
    if not body.endswith(b"]") or (index and not body[1:-1].strip()):  # no ']', or a trailing ','
        return None
    return len(body) - 1, filled


def _line_batches(stream: BinaryIO, file: str, head: bytes, decode_lines: Callable,
                  record_type: type) -> Batches:
    work, lineno = bytearray(head), 1
    while True:
        data = stream.read(_CHUNK)
        work += data
        end = work.rfind(b"\n") + 1 if data else len(work)
        if end:
            count = work.count(b"\n", 0, end) + (work[end - 1] != 0x0A)
            try:
                with memoryview(work) as view, view[:end] as part:
                    records = decode_lines(part)
            except _UNDECODED:
                records = None
            if records is None or len(records) != count:  # bad JSON, or blank lines to number around
                rest = io.BufferedReader(_Prefixed(bytes(work), stream), _CHUNK)
                yield from _batched(_iter_lines(rest, file, b"", lineno), "line", file, record_type)
                return
            yield range(lineno, lineno + count), records
            lineno += count
            del work[:end]
        if not data:
            return


def _batched(records: Iterator[tuple[int, Any]], unit: str, file: str, record_type: type,
             size: int = 4096) -> Batches:
    """The exact decoder's (number, dict) pairs as batches of record_type."""
    numbers: list[int] = []
    batch: list = []
    for number, obj in records:
        if not isinstance(obj, dict):
            raise ParseError(file, f"{unit} {number}", f"expected an object, got {type(obj).__name__}")
        numbers.append(number)
        try:
            batch.append(msgspec.convert(obj, record_type))
        except msgspec.ValidationError as err:
            what, _, at = str(err).partition(" - at `$")
            raise ParseError(file, f"{unit} {number}", f"{at.rstrip('`').lstrip('.') + ': ' if at else ''}{what}") from None
        if len(batch) == size:
            yield numbers, batch
            numbers, batch = [], []
    if batch:
        yield numbers, batch


class _ViewStream(io.RawIOBase):
    """A read-only stream over a memoryview (no copy of a gigabyte-sized array)."""

    def __init__(self, view: memoryview):
        self._view, self._pos = view, 0

    def readable(self) -> bool:
        return True

    def readinto(self, out) -> int:
        n = min(len(out), len(self._view) - self._pos)
        out[:n] = self._view[self._pos:self._pos + n]
        self._pos += n
        return n


class _Prefixed(io.RawIOBase):
    """Bytes already read, then the rest of the stream: where the exact decoder resumes."""

    def __init__(self, head: bytes, stream: BinaryIO):
        self._head = memoryview(head)
        self._stream = stream

    def readable(self) -> bool:
        return True

    def readinto(self, out) -> int:
        if self._head:
            n = min(len(out), len(self._head))
            out[:n] = self._head[:n]
            self._head = self._head[n:]
            return n
        data = self._stream.read(len(out))
        out[:len(data)] = data
        return len(data)


def _iter_array(read: Callable[[int], bytes], file: str, index: int = 0, lines: int = 0,
                base: int = 1, chunk_size: int = 1 << 22) -> Iterator[tuple[int, Any]]:
    """Records of an array whose '[' was read; index, lines, base: where read() starts (record
    index, newlines before it, char offset), so errors name places in the whole file."""
    decode = json.JSONDecoder().raw_decode
    text = codecs.getincrementaldecoder("utf-8")(errors="strict")
    buf, pos, eof = "", 0, False

    def where(p: int, index: int) -> str:
        return f"record {index} (line {lines + buf.count(chr(10), 0, p) + 1}, char {base + p})"

    def refill() -> None:
        nonlocal buf, pos, base, lines, eof
        lines += buf.count("\n", 0, pos)
        base += pos
        data = read(chunk_size)
        eof = not data
        try:
            buf = buf[pos:] + text.decode(data, final=eof)
        except UnicodeDecodeError as err:
            raise ParseError(file, f"char {base + len(buf) - pos}", f"not UTF-8: {err.reason}") from None
        pos = 0

    expect_value = True  # after '[' (or a ',') a value comes; ']' only right after '['
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
            except RecursionError:
                raise ParseError(file, where(pos, index), "bad JSON: nested too deeply") from None
            except json.JSONDecodeError as err:
                if eof:
                    tail = buf.rstrip()  # cut short, unless what ends the text is a "]"
                    cut = err.msg.startswith("Unterminated") or err.pos >= len(tail) - 1 and not tail.endswith("]")
                    what = "truncated JSON" if cut else "bad JSON"
                    raise ParseError(file, where(err.pos, index), f"{what}: {err.msg}") from None
            refill()
        yield index, obj
        pos, index, expect_value = end, index + 1, False


def _iter_lines(stream: BinaryIO, file: str, head: bytes, first: int = 1) -> Iterator[tuple[int, Any]]:
    for lineno, raw in enumerate(_lines(stream, head), first):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            msg = getattr(err, "msg", None) or str(err)
            raise ParseError(file, f"line {lineno}", f"bad JSON Lines record: {msg}") from None
        except RecursionError:
            raise ParseError(file, f"line {lineno}", "bad JSON Lines record: nested too deeply") from None
        yield lineno, obj


def _lines(stream: BinaryIO, head: bytes) -> Iterator[bytes]:
    first = True
    for raw in stream:
        yield head + raw if first else raw
        first = False
    if first and head:
        yield head
