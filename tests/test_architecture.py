"""Imports run one way: seeds/prompts <- evaluator <- go_emit <- evolve, with no cycle.

Two checks. (1) Every package and module imports on its own in a fresh interpreter, so no
module works only because another one was imported first. (2) The import graph read from the
AST of every module, imports inside functions included: no package imports one that may not
depend on it, no two modules import each other (directly or around a loop), and no import of
one of our modules sits inside a function (that is how cycles get hidden); only the heavy
optional third-party dependencies in LAZY_ALLOWED may be imported lazily. Two exceptions keep
`evolve --help` and `evolve frontier` from loading numba, SciPy or Plotly (issue 32,
tests/test_startup.py): the command layer (COMMAND_MODULES, which nothing of ours imports but
the CLI) imports what each command runs inside that command, and the modules that load numba
at import (NUMBA_MODULES) may be imported inside a function. Those imports are still edges of
the graph, so the cycle checks see them.
"""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("evaluator", "evolve", "go_emit", "seeds", "prompts")

# package -> the packages it may import (docs/architecture.md, "Package import direction")
ALLOWED = {
    "seeds": set(),
    "prompts": set(),
    "evaluator": {"seeds"},
    "go_emit": {"evaluator"},
    "evolve": {"evaluator", "go_emit", "seeds", "prompts"},
}

# third-party modules that may be imported inside a function: slow to import, optional, or
# platform-only (fcntl: POSIX file locks); scipy: its solvers and statistics cost each process
# ~60 MB, and the search's driver, which imports the fitting code, never fits (issue 31's memory
# goal, tests/test_startup.py)
LAZY_ALLOWED = ("litellm", "plotly", "ray", "playwright", "openevolve", "rich", "moocore", "webbrowser",
                "fcntl", "scipy")
# our modules that may import any of ours inside a function: the commands (leaves of the graph)
COMMAND_MODULES = ("evolve.cli", "evolve.blis_cmds")
# our modules that load numba (and SciPy, pandas) at import: anything may import them lazily
NUMBA_MODULES = ("evaluator.program", "evaluator.components")


def module_files(root: Path = ROOT, packages=PACKAGES) -> dict[str, Path]:
    """{dotted module name: file} of every module of our packages (packages as their __init__)."""
    out = {}
    for pkg in packages:
        for f in sorted((root / pkg).rglob("*.py")):
            parts = f.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = f
    return out


def _resolve(name: str, modules) -> str | None:
    """The longest prefix of `name` that is one of our modules (None for third-party)."""
    parts = name.split(".")
    for k in range(len(parts), 0, -1):
        cand = ".".join(parts[:k])
        if cand in modules:
            return cand
    return None


def imports(module: str, path: Path, modules) -> list[tuple[str, bool, int]]:
    """(imported name, inside a function?, line) for every import statement of a module.
    A `from X import Y` names X.Y when that is one of our modules, else X."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    is_pkg = path.name == "__init__.py"
    out = []

    def visit(node, in_func):
        for child in ast.iter_child_nodes(node):
            inner = in_func or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                out.extend((a.name, in_func, child.lineno) for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    pkg = module.split(".") if is_pkg else module.split(".")[:-1]
                    pkg = pkg[:len(pkg) - (child.level - 1)]
                    base = ".".join(pkg + ([base] if base else []))
                for a in child.names:
                    full = f"{base}.{a.name}" if base else a.name
                    out.append((full if full in modules else base, in_func, child.lineno))
            visit(child, inner)

    visit(tree, False)
    return out


def import_graph(root: Path = ROOT, packages=PACKAGES):
    """(module edges {module: {our modules it imports}}, function-level import problems)."""
    modules = module_files(root, packages)
    edges: dict[str, set[str]] = {m: set() for m in modules}
    lazy: list[str] = []
    for m, path in modules.items():
        for name, in_func, line in dict.fromkeys(imports(m, path, modules)):
            target = _resolve(name, modules)
            if target is not None and target != m:
                edges[m].add(target)
            if in_func:
                where = f"{path.relative_to(root)}:{line}"
                if target is not None:
                    if m in COMMAND_MODULES or target in NUMBA_MODULES:
                        continue
                    lazy.append(f"{where}: `{name}` imported inside a function (one of ours: import it at the top)")
                elif not any(name == a or name.startswith(a + ".") for a in LAZY_ALLOWED):
                    lazy.append(f"{where}: `{name}` imported inside a function (not a lazy heavy dependency)")
    return edges, lazy


def package_edges(edges) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for a, bs in edges.items():
        for b in bs:
            pa, pb = a.split(".")[0], b.split(".")[0]
            if pa != pb:
                out.setdefault(pa, set()).add(pb)
    return out


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one node (Tarjan, iterative)."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = 0
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            nxt = next(it, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on.add(nxt)
                    work.append((nxt, iter(sorted(edges.get(nxt, ())))))
                elif nxt in on:
                    low[v] = min(low[v], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def violations(root: Path = ROOT, packages=PACKAGES) -> list[str]:
    """Every breach of the import rules, one line each (empty when the tree is clean)."""
    edges, lazy = import_graph(root, packages)
    out = []
    for a, bs in sorted(package_edges(edges).items()):
        for b in sorted(bs - ALLOWED.get(a, set())):
            users = sorted(m for m in edges if m.split(".")[0] == a and any(t.split(".")[0] == b for t in edges[m]))
            out.append(f"package {a} imports {b} (from {', '.join(users)})")
    out += [f"package cycle: {' <-> '.join(c)}" for c in cycles(package_edges(edges))]
    out += [f"module cycle: {' <-> '.join(c)}" for c in cycles(edges)]
    return out + lazy


# ---------------------------------------------------------------- the rules on this tree

def test_import_rules_hold():
    problems = violations()
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("package", PACKAGES)
def test_each_package_imports_alone(package):
    """A fresh interpreter imports every module of one package and nothing else of ours first:
    an import that only works after another package happened to be loaded fails here. One
    process per package (not per module) keeps this at seconds: the static graph above is
    what finds cycles."""
    mods = sorted(m for m in module_files() if m.split(".")[0] == package)
    code = "import importlib\nfor m in %r:\n    importlib.import_module(m)\n" % (mods,)
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]


# ---------------------------------------------------------------- the judge's modules

# the judge split by what it does (docs/architecture.md, "judge"); `Evaluator` is their facade
JUDGE_MODULES = ("evaluator.judge_data", "evaluator.judge_states", "evaluator.replay", "evaluator.scoring",
                 "evaluator.fit_program", "evaluator.holdout_views")
FACADE = "evaluator.evaluate"
FACADE_MAX_LINES = 250
EVALUATE_MAX_LINES = 35  # code lines of `Evaluator.evaluate`, the one method that orchestrates


def test_judge_modules_work_without_the_facade():
    """No judge module imports `evaluator.evaluate`, statically or at run time: the facade sits
    on top of them, never between them."""
    edges, _ = import_graph()
    assert not [m for m in JUDGE_MODULES if FACADE in edges[m]]
    code = ("import importlib, sys\nfor m in %r:\n    importlib.import_module(m)\n"
            "assert %r not in sys.modules, 'a judge module imported the facade'\n" % (JUDGE_MODULES, FACADE))
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]


def test_evaluator_is_a_thin_facade():
    """`Evaluator` delegates: the file stays short, every method but `evaluate` is a docstring and
    one statement handing over to a judge module, and `evaluate` stays a short orchestration."""
    path = module_files()[FACADE]
    text = path.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= FACADE_MAX_LINES
    cls = next(n for n in ast.parse(text).body if isinstance(n, ast.ClassDef) and n.name == "Evaluator")
    fat = []
    for fn in (n for n in cls.body if isinstance(n, ast.FunctionDef)):
        body = [s for s in fn.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
        if fn.name == "evaluate":
            if fn.end_lineno - body[0].lineno + 1 > EVALUATE_MAX_LINES:
                fat.append(f"evaluate: {fn.end_lineno - body[0].lineno + 1} lines of code")
        elif len(body) != 1:
            fat.append(f"{fn.name}: {len(body)} statements (delegate to a judge module)")
    assert not fat, "\n".join(fat)


# ---------------------------------------------------------------- the checker itself

def _tree(tmp_path, files: dict[str, str]) -> Path:
    for rel, src in files.items():
        f = tmp_path / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(src)
    for pkg in PACKAGES:
        (tmp_path / pkg).mkdir(exist_ok=True)
        (tmp_path / pkg / "__init__.py").touch()
    return tmp_path


def test_checker_catches_a_backward_import_hidden_in_a_function(tmp_path):
    root = _tree(tmp_path, {
        "evaluator/judge.py": "def f():\n    from evolve.search import Search\n    return Search\n",
        "evolve/search.py": "from evaluator.judge import f\n",
    })
    found = "\n".join(violations(root))
    assert "package evaluator imports evolve (from evaluator.judge)" in found
    assert "package cycle: evaluator <-> evolve" in found
    assert "module cycle: evaluator.judge <-> evolve.search" in found
    assert "evaluator/judge.py:2: `evolve.search` imported inside a function" in found


def test_checker_catches_module_cycles_and_relative_imports(tmp_path):
    root = _tree(tmp_path, {
        "evolve/a.py": "from . import b\n",
        "evolve/b.py": "from .c import x\n",
        "evolve/c.py": "from evolve import a\nx = 1\n",
        "evolve/ok.py": "import json\nfrom evaluator import d\n",
        "evaluator/d.py": "def g():\n    import litellm\n    import shutil\n",
    })
    found = violations(root)
    assert "module cycle: evolve.a <-> evolve.b <-> evolve.c" in found
    assert not any("package" in f for f in found)
    lazy = [f for f in found if "inside a function" in f]
    assert lazy == ["evaluator/d.py:3: `shutil` imported inside a function (not a lazy heavy dependency)"]
