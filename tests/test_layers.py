"""The layering of rootcause's modules, read from their imports (module level and inside
functions alike): no module imports one of a higher layer, and no import cycle exists.

The layers are those of docs/ARCHITECTURE.md, lowest first. A module not matched by any
pattern fails the test, so a new module must be placed in a layer.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# (module-name prefix, layer); the longest matching prefix decides.
LAYERS: list[tuple[str, int]] = [
    ("parsers", 0),
    ("rootcause", 1), ("rootcause.errors", 1), ("rootcause.stats", 1), ("rootcause.terminal", 1),
    ("rootcause.argtypes", 1), ("rootcause.names", 1),
    ("rootcause.child", 2), ("rootcause.fileio", 2), ("rootcause.cuda_tools", 2), ("rootcause.gpus", 2), ("rootcause.host_state", 2), ("rootcause.envs", 2),
    ("rootcause.localcluster", 2),
    ("rootcause.inputs", 2), ("rootcause.ptxas", 2), ("rootcause.exporters", 2),
    ("rootcause.frontends", 3),  # the registry (__init__) only: it imports no frontend at import time
    ("rootcause.spec", 4),
    ("rootcause.model", 5),
    ("rootcause.frontends.base", 6),
    ("rootcause.artifacts", 7),
    ("rootcause.inspect", 8), ("rootcause.toolchains", 8), ("rootcause.sessions", 8), ("rootcause.capture", 8), ("rootcause.profilers", 8), ("rootcause.verify", 8), ("rootcause.measure", 8),
    ("rootcause.frontends.*", 9),  # every frontend package, whatever its name
    ("rootcause.build", 10), ("rootcause.runner", 10),
    ("rootcause.analysis", 11),
    ("rootcause.report", 12),
    ("rootcause.sweepfile", 5), ("rootcause.executors", 3),
    ("rootcause.pipeline", 13),
    ("rootcause.sweep", 13), ("rootcause.bisect", 13),
    ("rootcause.commands", 14),
    ("rootcause.cli", 15), ("rootcause.__main__", 15),
]


def _modules() -> dict[str, Path]:
    out = {}
    for top in ("rootcause", "parsers"):
        for path in (ROOT / top).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            out[name] = path
    return out


def _layer(module: str) -> int | None:
    best = None
    for prefix, layer in LAYERS:
        if prefix.endswith(".*"):  # a package's children, each a package of its own
            parent = prefix[:-2]
            if module.startswith(parent + ".") and _layer_exact(module.split(".")[:3], parent) is None:
                prefix = ".".join(module.split(".")[:3])
            else:
                continue
        if module == prefix or module.startswith(prefix + "."):
            if best is None or len(prefix) > len(best[0]):
                best = (prefix, layer)
    return None if best is None else best[1]


def _layer_exact(parts: list[str], parent: str) -> int | None:
    """The layer LAYERS gives this very module by name (not by a pattern), if any."""
    name = ".".join(parts)
    return next((layer for prefix, layer in LAYERS if prefix == name and prefix != parent), None)


def _imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The project modules this module imports, anywhere in its body."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in known:
                t = t.rpartition(".")[0]
            if t and t != name:
                found.add(t)
    return found


def test_every_module_has_a_layer():
    assert [m for m in _modules() if _layer(m) is None] == []


def test_no_upward_import():
    known = _modules()
    upward = [f"{m} (layer {_layer(m)}) imports {t} (layer {_layer(t)})"
              for m, p in known.items() for t in _imports(m, p, known) if _layer(t) > _layer(m)]
    assert upward == []


def test_no_import_cycle():
    known = _modules()
    graph = {m: _imports(m, p, known) for m, p in known.items()}
    # a package's __init__ importing its own submodule is not a cycle of meaning; every other edge counts
    state: dict[str, int] = {}
    cycles = []

    def visit(m: str, stack: list[str]) -> None:
        state[m] = 1
        for t in sorted(graph[m]):
            if state.get(t) == 1:
                cycles.append(" -> ".join(stack[stack.index(t):] + [t]))
            elif t not in state:
                visit(t, stack + [t])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    assert cycles == []


def test_the_checker_sees_function_level_imports(tmp_path):
    """The check must be able to fail: an import inside a function body is found."""
    known = {"rootcause.x": tmp_path / "x.py", "rootcause.report": tmp_path / "r.py"}
    known["rootcause.x"].write_text("def f():\n    from rootcause.report import view\n")
    assert _imports("rootcause.x", known["rootcause.x"], known) == {"rootcause.report"}


def test_frontend_packages_are_placed_by_pattern():
    """A new frontend package needs no line here: rootcause.frontends.<anything> is layer 9, while
    the registry and base keep theirs."""
    assert _layer("rootcause.frontends.newcompiler") == 9
    assert _layer("rootcause.frontends.newcompiler.build") == 9
    assert _layer("rootcause.frontends.base") == 6 and _layer("rootcause.frontends") == 3


def test_no_command_imports_another_command():
    """Commands share pieces through lower layers, never through each other."""
    known = _modules()
    commands = [m for m in known if m.startswith("rootcause.commands.")]
    crossing = [f"{m} imports {t}" for m in commands for t in _imports(m, known[m], known)
                if t.startswith("rootcause.commands.") and t != m]
    assert crossing == []


def test_no_frontend_is_named_outside_frontends():
    """Outside rootcause/frontends/, no code compares a frontend to a name: what differs between
    compilers is asked of the frontend (its protocol), so a new one needs no edit elsewhere."""
    import re

    compares = re.compile(r"""frontend\w*\s*(==|!=|\bin\b|\bnot in\b)\s*[("'\[]|["']\s*(==|!=)\s*\S*frontend""")
    found = [f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
             for top in ("rootcause", "parsers") for path in (ROOT / top).rglob("*.py")
             if "frontends" not in path.relative_to(ROOT).parts
             for n, line in enumerate(path.read_text().splitlines(), 1) if compares.search(line)]
    assert found == []


# What only one frontend's code may spell: its compiler's dialects and attributes, its kernel symbol
# patterns. Elsewhere the analysis asks the frontend (rootcause.frontends.base's hooks).
FRONTEND_IDENTIFIERS = {
    "iree": r"iree_(cpu|gpu|codegen)\.|hal\.executable|flow\.dispatch|_dispatch_(\\d|\d|<)|async_dispatch",
    "tvm": r"\bdlight\b|T\.prim_func|relax\.transform|tvm\.tir",
    "xla": r"stablehlo\.|\bmhlo\.|HloModule",
}


def _code_strings(tree: ast.AST) -> list[tuple[int, str]]:
    """The string constants of a module's code: its docstrings left out (they may explain)."""
    docs = {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body
            and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs]


def test_a_frontends_identifiers_stay_in_its_package():
    """No code outside rootcause/frontends/NAME spells that frontend's dialects, attributes or
    symbol patterns (comments and docstrings may name them)."""
    found = []
    for name, pattern in FRONTEND_IDENTIFIERS.items():
        own = ROOT / "rootcause" / "frontends" / name
        for top in ("rootcause", "parsers"):
            for path in (ROOT / top).rglob("*.py"):
                if own in path.parents:
                    continue
                found += [f"{path.relative_to(ROOT)}:{line}: {name}: {value[:80]!r}"
                          for line, value in _code_strings(ast.parse(path.read_text())) if re.search(pattern, value)]
    assert found == []


def test_the_identifier_check_sees_a_planted_identifier():
    tree = ast.parse('"""iree_cpu.lowering_config in a docstring"""\nKEY = "iree_cpu.lowering_config"\n')
    assert [v for _, v in _code_strings(tree) if re.search(FRONTEND_IDENTIFIERS["iree"], v)] == ["iree_cpu.lowering_config"]


def _owned_names() -> set[str]:
    """File names the modules of rootcause/artifacts define (their constants)."""
    names = set()
    for path in (ROOT / "rootcause" / "artifacts").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                    re.fullmatch(r"[\w.-]+\.(json|jsonl|html|md)", node.value):
                names.add(node.value)
    return names


def _path_literals(tree: ast.AST) -> list[tuple[int, str]]:
    """String literals used as a path: `x / "name"`, `Path("name")`, `open("name")`."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) and isinstance(node.right, ast.Constant):
            found.append((node.lineno, node.right.value))
        if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) in ("Path", "open"):
            found += [(node.lineno, a.value) for a in node.args if isinstance(a, ast.Constant)]
    return [(line, value) for line, value in found if isinstance(value, str)]


def test_only_artifacts_opens_the_files_it_owns():
    """Every file one stage hands another has one owner in rootcause/artifacts; no other module
    builds a path to one of them by name (messages may name them)."""
    owned = _owned_names()
    assert {"manifest.json", "measurement.json", "plan.json", "attribution.json", "bisect.json",
            "profiles.json", "result.json"} <= owned
    offenders = []
    for name, path in _modules().items():
        if name.startswith("rootcause.artifacts") or not name.startswith("rootcause"):
            continue
        for line, value in _path_literals(ast.parse(path.read_text())):
            if value in owned or value.endswith(("_request.json", "_result.json")):
                offenders.append(f"{path.relative_to(ROOT)}:{line}: {value}")
    assert not offenders, offenders


_LAB = re.compile(r"""["']benchmarks["']|benchmarks/\w+\.py["']""")


def test_no_test_imports_the_lab() -> None:
    """benchmarks/ holds figures measured as a user runs a command; the tests share only tools/
    (generators, scorers, the corpus table) with them, so a test never puts benchmarks/ on its path
    or loads a file from it."""
    found = [f"{p.name}:{i}" for p in sorted((ROOT / "tests").glob("*.py"))
             for i, line in enumerate(p.read_text().splitlines(), 1) if _LAB.search(line)]
    assert not found, found


def test_the_lab_check_sees_a_planted_import() -> None:
    lab = "bench" + "marks"  # spelt apart, so that this file holds no such line itself
    assert _LAB.search(f'sys.path.insert(0, str(ROOT / "{lab}"))')
    assert _LAB.search(f'spec_from_file_location("x", "{lab}/bench_zoo.py")')
    assert not _LAB.search(f'"""figures in {lab}/README.md"""')
