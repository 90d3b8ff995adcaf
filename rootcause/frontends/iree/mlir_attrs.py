"""A small reader of MLIR attribute syntax, returning plain Python data.

Enough of the grammar to read what IREE prints into its dumps (lowering_config,
translation_info, hal layouts, util.assume.int ranges), not a full MLIR parser:

- integers and floats, with an optional ': type' (dropped): `1 : i64` -> 1
- `true` / `false` -> bool, `unit` -> True, strings -> str (escapes decoded)
- `[a, b]` -> list; `{k = v, flag}` -> dict (a key without value is a unit attr: True)
- `#dialect.name<...>` and bare `<...>` -> {"attr": "dialect.name" | None, "args": [...],
  "params": {...}}: items inside the angle brackets that are `key = value` go to params,
  the rest (bare words, dicts, nested attrs) to args, in order
- `#alias` (no body) -> the alias's value when `aliases` has it, else the string "#alias"
- symbol refs `@a::@b` -> "@a::@b"; types `!hal.device`, `tensor<4xf32>`, `affine_map<...>`,
  `dense<...>`, `array<...>` and other `word<...>` forms -> their text, verbatim
- bare words (`storage_buffer`, `fp64|fp32`, `NV_MMA_SYNC_F32_16x8x16_F16`) -> str

Errors are ParseError('FILE', 'line L, column C', what); L and C count from the text given,
shifted by `line`/`column` when the text was cut out of a larger file.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from parsers.base import ParseError

_NUMBER = re.compile(r"[-+]?(?:0x[0-9a-fA-F]+|(?:\d+\.?\d*(?:[eE][-+]?\d+)?|inf|nan))")
_WORD = re.compile(r"[A-Za-z_][\w.$|]*")
_DIALECT_NAME = re.compile(r"[A-Za-z_][\w.$]*")
_SYMBOL = re.compile(r'@(?:"(?:[^"\\]|\\.)*"|[\w.$-]+)(?:::@(?:"(?:[^"\\]|\\.)*"|[\w.$-]+))*')
_TYPE_WORDS = {"index", "none"}


class _Reader:
    def __init__(self, text: str, file: str, line: int, column: int, aliases: dict | None):
        self.text = text
        self.pos = 0
        self.file = file
        self.line = line
        self.column = column
        self.aliases = aliases or {}

    # -- position and errors ------------------------------------------------------------
    def where(self, pos: int | None = None) -> str:
        pos = self.pos if pos is None else pos
        before = self.text[:pos]
        line = before.count("\n")
        col = pos - (before.rfind("\n") + 1)
        column = col + (self.column if line == 0 else 1)
        return f"line {self.line + line}, column {column}"

    def fail(self, what: str, pos: int | None = None) -> ParseError:
        return ParseError(self.file, self.where(pos), what)

    def peek(self) -> str:
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def skip_ws(self) -> None:
        n = len(self.text)
        while self.pos < n:
            c = self.text[self.pos]
            if c in " \t\r\n":
                self.pos += 1
            elif self.text.startswith("//", self.pos):
                end = self.text.find("\n", self.pos)
                self.pos = n if end < 0 else end + 1
            else:
                break

    def expect(self, s: str) -> None:
        self.skip_ws()
        if not self.text.startswith(s, self.pos):
            got = self.text[self.pos:self.pos + 12] or "end of text"
            raise self.fail(f"expected {s!r}, found {got!r}")
        self.pos += len(s)

    # -- values ---------------------------------------------------------------------------
    def value(self) -> Any:
        self.skip_ws()
        c = self.peek()
        if c == "":
            raise self.fail("expected an attribute, found end of text")
        if c == "[":
            return self.array()
        if c == "{":
            return self.dictionary()
        if c == '"':
            return self.string()
        if c == "#":
            return self.hash_attr()
        if c == "<":
            return self.body(None)
        if c == "@":
            return self.symbol()
        if c == "!":
            return self.type_text()
        if c.isdigit() or (c in "-+" and self.text[self.pos + 1:self.pos + 2].isdigit()):
            return self.number()
        if c.isalpha() or c == "_":
            return self.word()
        raise self.fail(f"unexpected character {c!r}")

    def array(self) -> list:
        self.expect("[")
        items: list = []
        self.skip_ws()
        if self.peek() == "]":
            self.pos += 1
            return items
        while True:
            items.append(self.value())
            self.skip_ws()
            c = self.peek()
            self.pos += 1
            if c == "]":
                return items
            if c != ",":
                raise self.fail(f"expected ',' or ']' in array, found {c or 'end of text'!r}", self.pos - 1)

    def key(self) -> str:
        self.skip_ws()
        if self.peek() == '"':
            return self.string()
        m = _DIALECT_NAME.match(self.text, self.pos)
        if not m:
            raise self.fail("expected a dictionary key")
        self.pos = m.end()
        return m.group()

    def dictionary(self) -> dict:
        self.expect("{")
        out: dict = {}
        self.skip_ws()
        if self.peek() == "}":
            self.pos += 1
            return out
        while True:
            self.skip_ws()
            start = self.pos
            k = self.key()
            if k in out:
                raise self.fail(f"duplicate key {k!r}", start)
            self.skip_ws()
            if self.peek() == "=":
                self.pos += 1
                out[k] = self.value()
            else:
                out[k] = True  # unit attribute
            self.skip_ws()
            c = self.peek()
            self.pos += 1
            if c == "}":
                return out
            if c != ",":
                raise self.fail(f"expected ',' or '}}' in dictionary, found {c or 'end of text'!r}", self.pos - 1)

    def string(self) -> str:
        start = self.pos
        self.pos += 1
        chars: list[str] = []
        while self.pos < len(self.text):
            c = self.text[self.pos]
            if c == '"':
                self.pos += 1
                return "".join(chars)
            if c == "\\":
                nxt = self.text[self.pos + 1:self.pos + 3]
                if nxt[:1] in ('"', "\\"):
                    chars.append(nxt[0])
                    self.pos += 2
                    continue
                if nxt[:1] == "n":
                    chars.append("\n")
                    self.pos += 2
                    continue
                if len(nxt) == 2 and all(h in "0123456789abcdefABCDEF" for h in nxt):
                    chars.append(chr(int(nxt, 16)))
                    self.pos += 3
                    continue
                raise self.fail(f"bad escape '\\{nxt[:1]}' in string", self.pos)
            chars.append(c)
            self.pos += 1
        raise self.fail("string not terminated", start)

    def number(self) -> int | float | str:
        m = _NUMBER.match(self.text, self.pos)
        if not m:
            raise self.fail("expected a number")
        tail = re.compile(r"[\w.$|]*").match(self.text, m.end())
        if tail.end() > m.end():  # a word that starts with digits, e.g. '16x8x16'
            self.pos = tail.end()
            return self.text[m.start():tail.end()]
        self.pos = m.end()
        s = m.group()
        num: int | float = int(s, 16) if "0x" in s else (int(s) if re.fullmatch(r"[-+]?\d+", s) else float(s))
        self.skip_type_suffix()
        return num

    def skip_type_suffix(self) -> None:
        save = self.pos
        self.skip_ws()
        if self.peek() == ":" and not self.text.startswith("::", self.pos):
            self.pos += 1
            self.skip_ws()
            if self.peek() == "!":
                self.type_text()
            else:
                self.word()
        else:
            self.pos = save

    def word(self) -> Any:
        m = _WORD.match(self.text, self.pos)
        if not m:
            raise self.fail("expected a word")
        self.pos = m.end()
        w = m.group()
        if self.peek() == "<":  # tensor<...>, affine_map<...>, dense<...>: keep the text
            end = self.balanced(self.pos)
            text = self.text[m.start():end]
            self.pos = end
            if w in ("dense", "array", "sparse", "dense_resource"):
                self.skip_type_suffix()
            return text
        if w == "true":
            return True
        if w == "false":
            return False
        if w == "unit":
            return True
        return w

    def symbol(self) -> str:
        m = _SYMBOL.match(self.text, self.pos)
        if not m:
            raise self.fail("bad symbol reference")
        self.pos = m.end()
        return m.group()

    def type_text(self) -> str:
        start = self.pos
        self.pos += 1
        m = _DIALECT_NAME.match(self.text, self.pos)
        if not m:
            raise self.fail("expected a dialect type name after '!'", start)
        self.pos = m.end()
        if self.peek() == "<":
            self.pos = self.balanced(self.pos)
        return self.text[start:self.pos]

    def balanced(self, pos: int) -> int:
        """End (exclusive) of the <...> group starting at pos; '->', '>=' are not brackets."""
        depth = 0
        i = pos
        n = len(self.text)
        while i < n:
            c = self.text[i]
            if c == '"':
                j = i + 1
                while j < n and self.text[j] != '"':
                    j += 2 if self.text[j] == "\\" else 1
                i = j + 1
                continue
            if c == "<" and self.text[i + 1:i + 2] != "=":
                depth += 1
            elif c == ">" and self.text[i - 1] != "-" and self.text[i + 1:i + 2] != "=":
                depth -= 1
                if depth == 0:
                    return i + 1
            i += 1
        raise self.fail("'<' not closed", pos)

    def hash_attr(self) -> Any:
        start = self.pos
        self.pos += 1
        m = _DIALECT_NAME.match(self.text, self.pos)
        if not m:
            raise self.fail("expected an attribute name after '#'", start)
        self.pos = m.end()
        name = m.group()
        if self.peek() == "<":
            return self.body(name)
        alias = "#" + name
        return self.aliases.get(alias, alias)

    def body(self, name: str | None) -> dict:
        start = self.pos
        self.expect("<")
        args: list = []
        params: dict = {}
        while True:
            self.skip_ws()
            c = self.peek()
            if c == ">":
                self.pos += 1
                return {"attr": name, "args": args, "params": params}
            if c == "":
                raise self.fail("'<' not closed", start)
            if c == ",":
                self.pos += 1
                continue
            m = _DIALECT_NAME.match(self.text, self.pos)
            if m:
                after = self.pos
                self.pos = m.end()
                self.skip_ws()
                if self.peek() == "=" and self.text[self.pos + 1:self.pos + 2] != "=":
                    self.pos += 1
                    key = m.group()
                    if key in params:
                        raise self.fail(f"duplicate parameter {key!r}", after)
                    params[key] = self.value()
                    continue
                self.pos = after
            args.append(self.value())


def parse_attr(text: str, file: str = "<text>", line: int = 1, column: int = 1,
               aliases: dict | None = None) -> Any:
    """Parse one attribute that fills `text` (trailing whitespace allowed)."""
    reader = _Reader(text, file, line, column, aliases)
    value = reader.value()
    reader.skip_ws()
    if reader.pos != len(text):
        raise reader.fail(f"unexpected text after the attribute: {text[reader.pos:reader.pos + 20]!r}")
    return value


@dataclass
class AttrHit:
    """One `key = value` found in a file: where it is and what it says."""

    key: str
    line: int
    column: int
    value: Any
    text: str  # the value's source text


def find_attrs(text: str, key: str, file: str = "<text>", aliases: dict | None = None) -> list[AttrHit]:
    """Every `key = <attribute>` in text (e.g. key='lowering_config'), parsed, in order."""
    hits = []
    for m in re.finditer(rf"(?<![\w.$]){re.escape(key)}\s*=\s*", text):
        reader = _Reader(text, file, 1, 1, aliases)
        reader.pos = m.end()
        value = reader.value()
        line = text.count("\n", 0, m.start()) + 1
        column = m.start() - (text.rfind("\n", 0, m.start()) + 1) + 1
        hits.append(AttrHit(key, line, column, value, text[m.end():reader.pos]))
    return hits


def parse_aliases(text: str, file: str = "<text>") -> dict[str, Any]:
    """The attribute aliases at the top of a printed module: {'#map': 'affine_map<...>', ...}."""
    aliases: dict[str, Any] = {}
    for m in re.finditer(r"^(#[\w.$]+)\s*=\s*", text, re.M):
        reader = _Reader(text, file, 1, 1, aliases)
        reader.pos = m.end()
        aliases[m.group(1)] = reader.value()
    return aliases
