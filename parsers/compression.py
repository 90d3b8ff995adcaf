"""Compressed profiles, told by their magic bytes (not the file name): gzip, zstd, bz2, xz and
LZ4 frames. Traces are published as .json.gz; any text profile may come compressed.

Decompression errors (a truncated or corrupt stream) are ParseErrors naming the codec.
"""
from __future__ import annotations

import bz2
import gzip
import io
import lzma
from typing import BinaryIO

from parsers.base import ParseError

# magic -> codec name; checked in this order (no magic is a prefix of another)
MAGICS: dict[bytes, str] = {
    b"\x1f\x8b": "gzip",
    b"\x28\xb5\x2f\xfd": "zstd",
    b"BZh": "bz2",
    b"\xfd7zXZ\x00": "xz",
    b"\x04\x22\x4d\x18": "lz4",
}


# Decompressed bytes one compressed file may yield. A stream is read through the cap and stops at
# it, so that a small bomb (66 KB of zstd that expands to gigabytes) is an error, not an
# allocation; 512 MiB is 8x the largest traces the readers are held to (60 MB of JSON,
# benchmarks/README.md), whose tables then stay within the 2 GB a command may use.
MAX_DECOMPRESSED = 1 << 29


def codec(head: bytes) -> str | None:
    """The codec whose magic starts head, or None for uncompressed bytes."""
    for magic, name in MAGICS.items():
        if head.startswith(magic):
            return name
    return None


def open_stream(raw: BinaryIO, name: str, file: str, limit: int | None = None) -> BinaryIO:
    """A binary stream of raw's decompressed bytes; read errors become ParseErrors, and so does
    a stream that decompresses past limit bytes (default MAX_DECOMPRESSED)."""
    if name == "gzip":
        inner: BinaryIO = gzip.GzipFile(fileobj=raw, mode="rb")
    elif name == "bz2":
        inner = bz2.BZ2File(raw, mode="rb")
    elif name == "xz":
        inner = lzma.LZMAFile(raw, mode="rb")
    elif name == "zstd":
        inner = _Zstd(raw)
    elif name == "lz4":
        import lz4.frame

        inner = lz4.frame.LZ4FrameFile(raw, mode="rb")
    else:
        raise ValueError(f"not a codec: {name}")
    return io.BufferedReader(_Checked(inner, name, file, MAX_DECOMPRESSED if limit is None else limit), 1 << 20)


def decompress(data: bytes, file: str) -> bytes:
    """data itself when it has no compression magic, else its decompressed bytes."""
    name = codec(data)
    if name is None:
        return data
    with open_stream(io.BytesIO(data), name, file) as stream:
        return stream.read()


class _Zstd(io.RawIOBase):
    """zstd frames, one after another; unlike zstandard's stream_reader, a frame cut short is
    an error, not a silent end."""

    def __init__(self, raw: BinaryIO):
        import zstandard

        self._new = zstandard.ZstdDecompressor().decompressobj
        self._raw, self._obj, self._pending, self._at = raw, self._new(), b"", 0

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        while self._at >= len(self._pending):
            # Small input steps bound each step's output: a zstd RLE block of 4 bytes stands for
            # 128 KiB, so 1 KiB of input yields at most ~32 MiB (1 MiB could yield 32 GiB).
            data = self._raw.read(1 << 10)
            if not data:
                if not self._obj.eof and self._started:
                    raise EOFError("Compressed file ended before the end-of-stream marker was reached")
                return b""
            self._started = True
            out = [self._obj.decompress(data)]
            while self._obj.eof and self._obj.unused_data:  # the next frame
                rest, self._obj = self._obj.unused_data, self._new()
                out.append(self._obj.decompress(rest))
            self._pending, self._at = b"".join(out), 0
        n = len(self._pending) - self._at if size < 0 else size
        data = self._pending[self._at:self._at + n]  # an offset, not a re-slice of what is left: linear
        self._at += len(data)
        return data

    _started = False


class _Checked(io.RawIOBase):
    """A decompressing stream whose errors say which codec failed and how far it got."""

    def __init__(self, inner: BinaryIO, name: str, file: str, limit: int):
        self._inner, self._name, self._file, self._done, self._limit = inner, name, file, 0, limit

    def readable(self) -> bool:
        return True

    def readinto(self, out) -> int:
        try:
            data = self._inner.read(len(out))
        except Exception as err:  # noqa: BLE001 - each codec has its own (zstd.ZstdError, lz4's RuntimeError...)
            if isinstance(err, (ParseError, MemoryError)):
                raise
            what = str(err) or type(err).__name__
            raise ParseError(self._file, f"{self._name} stream, decompressed byte {self._done}",
                             f"corrupt or truncated {self._name} data: {what}") from None
        if self._done + len(data) > self._limit:
            raise ParseError(self._file, f"{self._name} stream, decompressed byte {self._limit}",
                             f"decompresses to more than {self._limit >> 20} MiB, more than any profile rootcause "
                             "reads (a compression bomb, or a capture to split); stopped before holding it")
        out[:len(data)] = data
        self._done += len(data)
        return len(data)

    def close(self) -> None:
        self._inner.close()
        super().close()
