"""PTX text: module target and per-entry launch bounds, parameter bytes, declared shared/local.

Registers, spills and the final shared/local sizes are ptxas's decisions (run ptxas and read
the cubin for those): registers is None here. What PTX fixes is the parameter layout (each
parameter at its alignment, so param_bytes equals the cubin's EIATTR_CBANK_PARAM_SIZE), the
launch bounds (.maxntid, .reqntid, .minnctapersm, .maxnreg) and the declarations:
extra['ptx_shared_bytes'] sums the entry's static .shared declarations plus module-scope
.shared variables the entry body names; extra['ptx_local_bytes'] sums its .local ones;
extra['dynamic_shared'] is True when the entry names an `.extern .shared` array.
"""
from __future__ import annotations

import math
import re

from parsers.base import KernelRecord, ParseError

TYPE_BYTES = {
    "b8": 1, "s8": 1, "u8": 1, "pred": 1,
    "b16": 2, "s16": 2, "u16": 2, "f16": 2, "bf16": 2, "e4m3x2": 2, "e5m2x2": 2,
    "b32": 4, "s32": 4, "u32": 4, "f32": 4, "f16x2": 4, "bf16x2": 4, "tf32": 4,
    "b64": 8, "s64": 8, "u64": 8, "f64": 8, "texref": 8, "samplerref": 8, "surfref": 8,
    "b128": 16,
}

# A comment or a string literal; strings are kept so a '//' inside one is not a comment.
_COMMENT_OR_STRING = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"', re.S)
_VERSION = re.compile(r"\.version\s+(\d+)\.(\d+)")
_TARGET = re.compile(r"\.target\s+([\w ,]+)")
_FUNC = re.compile(
    r"(?P<link>(?:\.(?:visible|weak|extern)\s+)*)\.(?P<kind>entry|func)\s*"
    r"(?:\((?P<ret>[^)]*)\)\s*)?(?P<name>[A-Za-z_$%][\w$]*)\s*(?:\((?P<params>[^)]*)\))?(?P<dirs>[^{;]*)(?P<end>[{;])")
_DECL = re.compile(r"(?P<extern>\.extern\s+)?\.(?P<space>shared|local)\s+(?P<rest>[^;{}]*);")
_DIRECTIVE = re.compile(r"\.(maxntid|reqntid|minnctapersm|maxnreg|reqnctapercluster|maxclusterrank)\b([^.{;]*)")


def _strip_comments(text: str) -> str:
    # Keep newlines so line numbers in errors stay right.
    return _COMMENT_OR_STRING.sub(lambda m: m.group(0) if m.group(0).startswith('"') else
                                  "\n" * m.group(0).count("\n") + " ", text)


def _line(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def _var_bytes(decl: str, file: str, where: str) -> list[tuple[str, int, int, bool]]:
    """(name, bytes, align, unsized) for each variable of one declaration's text after the space."""
    tokens = decl.replace(",", " , ").split()
    align = None
    vtype = None
    vec = 1
    names: list[str] = []
    i = 0
    after_ptr = False
    while i < len(tokens):
        tok = tokens[i]
        if tok == ".ptr":
            after_ptr = True
        elif tok == ".align" and i + 1 < len(tokens):
            if not after_ptr:  # '.ptr ... .align N' is the pointee's alignment, not this variable's
                align = _int(tokens[i + 1], file, where)
            i += 1
        elif tok in (".v2", ".v4", ".v8"):
            vec = int(tok[2:])
        elif tok.startswith(".") and tok[1:] in TYPE_BYTES:
            vtype = tok[1:]
        elif tok.startswith("."):
            pass  # state space qualifiers such as .global, .const, .param
        elif tok == ",":
            pass
        elif tok == "=":
            break  # an initializer follows; names are done
        else:
            names.append(tok)
        i += 1
    if vtype is None:
        raise ParseError(file, where, f"declaration without a type: {decl.strip()[:80]!r}")
    elem = TYPE_BYTES[vtype] * vec
    out = []
    for name in names:
        base, dims, unsized = _dims(name, file, where)
        out.append((base, elem * math.prod(dims), align or elem, unsized))
    return out


def _dims(name: str, file: str, where: str) -> tuple[str, list[int], bool]:
    m = re.fullmatch(r"([A-Za-z_$%][\w$]*)((?:\[\s*\d*\s*\])*)", name)
    if m is None:
        raise ParseError(file, where, f"bad variable name {name!r}")
    dims = [d.strip() for d in re.findall(r"\[([^\]]*)\]", m.group(2))]
    unsized = any(d == "" for d in dims)
    return m.group(1), [int(d) for d in dims if d], unsized


def _int(tok: str, file: str, where: str) -> int:
    try:
        return int(tok, 0)
    except ValueError:
        raise ParseError(file, where, f"expected a number, got {tok!r}") from None


def param_layout(params: str, file: str = "<bytes>", where: str = "") -> tuple[int, list[tuple[str, int, int]]]:
    """Total parameter bytes and (name, offset, size) of each, every one placed at its alignment."""
    offset = 0
    layout = []
    for item in (p.strip() for p in params.split(",")):
        if not item:
            continue
        for name, size, align, _ in _var_bytes(item, file, where):
            offset = -(-offset // align) * align
            layout.append((name, offset, size))
            offset += size
    return offset, layout


def _body_end(text: str, start: int, header: re.Match, file: str) -> int:
    """Index just past the '}' that closes the '{' at start."""
    depth = 0
    for m in re.finditer(r"[{}]", text[start:]):
        depth += 1 if m.group(0) == "{" else -1
        if depth == 0:
            return start + m.end()
    raise ParseError(file, f"line {_line(text, header.start())}",
                     f"body of {header.group('name')} is not closed ('}}' missing)")


def _bounds(dirs: str, file: str, where: str) -> dict[str, list[int]]:
    out = {}
    for m in _DIRECTIVE.finditer(dirs):
        values = m.group(2).replace(",", " ").split()
        if not values:
            raise ParseError(file, where, f".{m.group(1)} without a value")
        out[m.group(1)] = [_int(v, file, f"{where}: .{m.group(1)}") for v in values]
    return out


def kernels(data: bytes | str, file: str = "<bytes>") -> list[KernelRecord]:
    """One KernelRecord per .entry of a PTX module (format 'ptx')."""
    if isinstance(data, (bytes, bytearray, memoryview)):
        raw = bytes(data).rstrip(b"\0")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ParseError(file, f"byte {exc.start}", "PTX is not UTF-8 text") from None
    else:
        text = data
    if "\0" in text:
        raise ParseError(file, f"line {_line(text, text.index(chr(0)))}", "NUL byte inside PTX text")
    text = _strip_comments(text)
    version = _VERSION.search(text)
    target = _TARGET.search(text)
    if version is None or target is None:
        raise ParseError(file, "line 1", "not PTX: no .version / .target directive")
    targets = [t.strip() for t in target.group(1).split(",") if t.strip()]
    arch = next((t for t in targets if t.startswith(("sm_", "compute_"))), None)
    module: dict[str, int] = {}
    dynamic: set[str] = set()
    functions = []
    pos = 0
    while (m := _FUNC.search(text, pos)) is not None:
        _module_decls(text[pos:m.start()], module, dynamic, file, _line(text, pos))
        end = _body_end(text, m.end() - 1, m, file) if m.group("end") == "{" else m.end()
        functions.append((m, text[m.end():end]))
        pos = end
    _module_decls(text[pos:], module, dynamic, file, _line(text, pos))
    rows = []
    for m, body in functions:
        if m.group("kind") != "entry" or m.group("end") != "{":
            continue
        rows.append(_entry_row(m, body, text, arch, module, dynamic, file))
    for row in rows:
        row.extra.update(ptx_version=f"{version.group(1)}.{version.group(2)}", targets=targets)
    return rows


def _module_decls(chunk: str, module: dict[str, int], dynamic: set[str], file: str, line: int) -> None:
    for d in _DECL.finditer(chunk):
        if d.group("space") != "shared":
            continue
        for name, size, _, unsized in _var_bytes(d.group("rest"), file, f"line {line + chunk.count(chr(10), 0, d.start())}"):
            if d.group("extern") or unsized:
                dynamic.add(name)
            else:
                module[name] = size


def _entry_row(m: re.Match, body: str, text: str, arch: str | None, module: dict[str, int],
               dynamic: set[str], file: str) -> KernelRecord:
    where = f"line {_line(text, m.start())}"
    name = m.group("name")
    param_bytes, layout = param_layout(m.group("params") or "", file, where)
    bounds = _bounds(m.group("dirs"), file, where)
    shared = local = 0
    dyn = False
    for d in _DECL.finditer(body):
        for _, size, _, unsized in _var_bytes(d.group("rest"), file, where):
            if d.group("space") == "local":
                local += size
            elif d.group("extern") or unsized:
                dyn = True
            else:
                shared += size
    words = set(re.findall(r"[A-Za-z_$%][\w$]*", body))
    shared += sum(size for var, size in module.items() if var in words)
    dyn = dyn or bool(dynamic & words)
    reqntid = _pad3(bounds.get("reqntid"))
    maxntid = _pad3(bounds.get("maxntid"))
    bound = reqntid or maxntid
    extra = {"ptx_shared_bytes": shared, "ptx_local_bytes": local, "dynamic_shared": dyn,
             "params": len(layout), "linkage": (m.group("link").split() or [""])[0].lstrip(".") or None}
    for key in ("maxntid", "reqntid", "minnctapersm", "maxnreg", "reqnctapercluster", "maxclusterrank"):
        if key in bounds:
            extra[key] = bounds[key] if len(bounds[key]) > 1 else bounds[key][0]
    return KernelRecord(
        name=name, file=file, format="ptx", arch=arch, registers=None, param_bytes=param_bytes,
        max_threads_per_block=math.prod(bound) if bound else None, block=tuple(reqntid) if reqntid else None,
        extra=extra,
    )


def _pad3(values: list[int] | None) -> list[int] | None:
    if not values:
        return None
    return (values + [1, 1])[:3]
