"""The import structure of the package, read from its source (`ast`), not by importing it:

- the graph of imports between headflow's modules, module-level and function-local ones
  together, has no cycle (an import inside a function hides a cycle, it does not remove it);
- a function-local import of a headflow module appears only where the command line defers
  work for its start-up (`headflow --help` imports no JAX) or where sympy is loaded only when
  a symbolic right-hand side is selected;
- no package imports another package's private module (`headflow.dynamics._x` from
  `headflow.sims`, ...), and neither does a benchmark;
- nothing imports the repository's folders as top-level packages (`import dynamics`): they
  exist only as `headflow.dynamics`, `headflow.sims`, `headflow.validation`, and the commands
  run with other projects' packages of those names first on the path.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("dynamics", "sims", "validation")
LAZY = ("headflow.validation._entry", "headflow.validation.cli",
        "headflow.validation.commands", "headflow.validation._cache",
        "headflow.dynamics.symbolic.__main__", "headflow.dynamics.models.attention._ode")
"""Modules allowed function-local imports of headflow modules: the command line's deferred
imports (and the cache setup it calls), and the attention model's choice of right-hand side,
which loads sympy only when it selects the generated one."""


def modules() -> dict[str, Path]:
    out = {}
    for top in PACKAGES:
        for path in (ROOT / top).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out["headflow." + ".".join(parts)] = path
    return out


MODULES = modules()


def imports(name: str, path: Path) -> list[tuple[str, bool, str]]:
    """`(imported headflow module, inside a function?, written module)` of every import."""
    tree = ast.parse(path.read_text())
    is_pkg = path.name == "__init__.py"
    local: set[int] = set()
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            local.update(id(n) for n in ast.walk(fn))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_pkg else name.split(".")[:-1]
                base = base[:len(base) - node.level + 1]
                written = ".".join(base + ([node.module] if node.module else []))
            else:
                written = node.module or ""
            subs = [f"{written}.{a.name}" for a in node.names if f"{written}.{a.name}" in MODULES]
            targets = subs or [written]
        elif isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
            written = targets[0]
        else:
            continue
        for t in targets:
            while t and t not in MODULES:
                t = t.rpartition(".")[0]
            if t and t != name:
                out.append((t, id(node) in local, written))
    return out


GRAPH = {name: imports(name, path) for name, path in MODULES.items()}


def test_modules_are_found():
    assert {"headflow.dynamics", "headflow.dynamics.models._base", "headflow.sims._models",
            "headflow.validation.cli"} <= set(MODULES)
    assert len(MODULES) > 150


def test_no_import_cycle():
    """Tarjan's strongly connected components of the whole graph: none has two modules."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    cycles = []
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10000))

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w, _, _ in GRAPH[v]:
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in GRAPH:
        if v not in index:
            strong(v)
    assert not cycles, f"import cycles: {cycles}"


def test_function_local_imports_only_where_start_up_needs_them():
    bad = sorted(f"{name} imports {t} inside a function"
                 for name, edges in GRAPH.items() for t, local, _ in edges
                 if local and not any(name == m or name.startswith(m + ".") for m in LAZY))
    assert not bad, "\n".join(bad)


def _private(module: str) -> bool:
    return any(part.startswith("_") and part != "__main__" for part in module.split(".")[1:])


def _top(module: str) -> str:
    return ".".join(module.split(".")[:2])


def test_no_package_imports_another_packages_private_module():
    bad = [f"{name} imports {t}" for name, edges in GRAPH.items() for t, _, _ in edges
           if _top(t) != _top(name) and _private(t)]
    for path in sorted((ROOT / "benchmarks").glob("*.py")):
        name = "benchmarks." + path.stem
        bad += [f"{path.name} imports {t}" for t, _, _ in imports(name, path) if _private(t)]
    assert not bad, "\n".join(bad)


def test_repository_folders_are_not_imported_as_top_level_packages():
    """Neither the package, the tests nor the benchmarks write `import dynamics` (they would
    load a second copy, or another project's package of that name); and none is loaded in this
    test process."""
    files = [*MODULES.values(), *(ROOT / "tests").rglob("*.py"),
             *(ROOT / "benchmarks").glob("*.py")]
    bad = []
    for path in files:
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level
                     else [])
            bad += [f"{path.relative_to(ROOT)}: {n}" for n in names
                    if n.split(".")[0] in PACKAGES]
    assert not bad, "\n".join(bad)
    assert not set(PACKAGES) & set(sys.modules), "a top-level dynamics/sims/validation is loaded"


def test_commands_run_beside_packages_named_like_the_folders(tmp_path):
    """Packages named `dynamics`, `sims` and `validation` installed beside headflow (PyPI has
    all three, and importing any of them here fails) change nothing: in a fresh interpreter
    that finds the impostors first on its path, every module of headflow (every command's
    included) imports and `--help` succeeds. (`models` and an `ode` run beside impostors:
    `tests/test_user_models.py::test_entry_point_and_colliding_package_names`.)"""
    site = tmp_path / "site"
    for name in PACKAGES:
        (site / name).mkdir(parents=True)
        (site / name / "__init__.py").write_text(
            f"raise ImportError('{name}: another project of the same name')\n")
    env = {**os.environ, "PYTHONPATH": str(site)}
    modules = sorted(m for m in MODULES if not m.endswith("__main__"))
    code = f"import importlib\nfor m in {modules!r}:\n    importlib.import_module(m)\n"
    runs = [[sys.executable, "-c", code], [sys.executable, "-m", "headflow.validation", "--help"]]
    for argv in runs:
        proc = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True)
        assert proc.returncode == 0, (argv[1:3], proc.stderr[-2000:])
    check = subprocess.run([sys.executable, "-c", "import validation"], cwd=tmp_path, env=env,
                           capture_output=True, text=True)
    assert "another project" in check.stderr       # the impostors are really on the path
