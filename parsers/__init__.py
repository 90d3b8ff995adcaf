"""Pure readers of kernel-binary and profiler formats.

One module per format. Readers take bytes (or a path) and return plain data: dataclasses,
dicts, lists, pandas tables. They know nothing of variants or attribution, and depend only
on the standard library, pyelftools, msgpack, msgspec, lz4, zstandard and pandas. Compressed
profiles (gzip, zstd, bz2, xz, LZ4 frames) are told by magic bytes: parsers.compression. Every failure is a
ParseError that names the file, the place (offset, line, section) and what was wrong.
"""
from parsers.base import KernelRecord, ParseError

__all__ = ["KernelRecord", "ParseError"]
