"""Mutations of real binaries for the parsers' property tests.

A reader fed a mutated real input may return rows or raise ParseError (one line, naming the
file), never anything else. The targeted mutations a format needs (PTX tokens, an ELF section
table, a TVM module tree) stay in that format's test; these are the common ones.
"""
from __future__ import annotations

from hypothesis import strategies as st

COMMON = ("flip", "truncate", "overwrite")


def mutate(data: st.DataObject, blob: bytearray, how: str, max_flips: int = 16, lo: int = 0) -> bytearray:
    """Apply one common mutation to blob: bit flips, a truncation, or a random overwrite
    starting at or after lo."""
    if how == "flip":
        for _ in range(data.draw(st.integers(1, max_flips))):
            i = data.draw(st.integers(0, len(blob) - 1))
            blob[i] ^= 1 << data.draw(st.integers(0, 7))
    elif how == "truncate":
        blob = blob[: data.draw(st.integers(0, len(blob)))]
    elif how == "overwrite":
        start = data.draw(st.integers(lo, len(blob) - 1))
        chunk = data.draw(st.binary(min_size=1, max_size=64))
        blob[start:start + len(chunk)] = chunk
    else:
        raise ValueError(f"not a common mutation: {how}")
    return blob


def byte_writes(size: int, max_size: int = 8) -> st.SearchStrategy:
    """(offset, value) byte overwrites within the first size bytes."""
    return st.lists(st.tuples(st.integers(0, size - 1), st.integers(0, 255)), max_size=max_size)


def written(real: bytes, writes: list[tuple[int, int]], cut: int, keep: int) -> bytes:
    """real cut to its first `cut` bytes (unless that would leave `keep` bytes or fewer), with
    the byte writes that still fall inside applied."""
    data = bytearray(real[:cut] if cut > keep else real)
    for at, value in writes:
        if at < len(data):
            data[at] = value
    return bytes(data)
