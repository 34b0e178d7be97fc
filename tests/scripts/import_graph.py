"""The import graph of innergraph's packages: circles, function-local imports, underscore imports.

Run from the repository's root: ``python tests/scripts/import_graph.py``. Every import
statement counts, function-local ones included (grimp, the graph builder of
import-linter, reads them all). ``tests/test_layers.py`` asserts on the same figures.

Terms
-----
circle
    A strongly connected component of more than one module: modules that import one
    another, directly or through others.
late import
    A ``from innergraph... import`` (or ``innergraph_bench``...) inside a function.
underscore import
    Importing a name that starts with ``_`` from another module, or a module whose own
    name does.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

import grimp

PACKAGES = ("innergraph", "innergraph_pickle", "innergraph_bench", "innergraph_patches")
ROOT = Path(__file__).resolve().parents[2]


def circles(packages: tuple[str, ...] = PACKAGES) -> list[list[str]]:
    """The circles of the import graph of ``packages``, largest first (Tarjan's algorithm)."""
    graph = grimp.build_graph(*packages, include_external_packages=False)
    modules = sorted(graph.modules)
    edges = {m: sorted(set(graph.find_modules_directly_imported_by(m)) & set(modules)) for m in modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in edges[v]:
                found.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(modules)))
    for v in modules:
        if v not in index:
            visit(v)
    return sorted(found, key=len, reverse=True)


def module_files(packages: tuple[str, ...] = PACKAGES) -> Iterator[tuple[str, Path]]:
    """``(dotted module name, path)`` of every module of ``packages``."""
    for package in packages:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            yield ".".join(parts[:-1] if parts[-1] == "__init__" else parts), path


def _ours(module: str | None) -> bool:
    return module is not None and module.split(".")[0] in PACKAGES


def late_imports(packages: tuple[str, ...] = PACKAGES) -> list[tuple[str, str]]:
    """``(importer, imported module)`` for every import of ours inside a function."""
    found = []
    for name, path in module_files(packages):
        tree = ast.parse(path.read_text())
        for function in ast.walk(tree):
            if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(function):
                if isinstance(node, ast.ImportFrom) and node.level == 0 and _ours(node.module):
                    found.append((name, str(node.module)))
                elif isinstance(node, ast.Import):
                    found += [(name, alias.name) for alias in node.names if _ours(alias.name)]
    return sorted(set(found))


def underscore_imports(packages: tuple[str, ...] = PACKAGES) -> list[tuple[str, str, str]]:
    """``(importer, module, name)`` for every private name, or name of a private module, imported from another module."""
    found = []
    for name, path in module_files(packages):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom) or node.level != 0 or not _ours(node.module):
                continue
            module = str(node.module)
            private_module = any(part.startswith("_") and not part.startswith("__") for part in module.split("."))
            for alias in node.names:
                if private_module or alias.name.startswith("_") and not alias.name.startswith("__"):
                    found.append((name, module, alias.name))
    return found


def main() -> int:
    n_modules = sum(1 for _ in module_files())
    found = circles()
    print(f"{n_modules} modules in {', '.join(PACKAGES)}")
    print(f"circles: {len(found)}; largest: {len(found[0]) if found else 0} modules")
    for component in found:
        print("  ", " ".join(component))
    late = late_imports()
    print(f"function-local imports: {len(late)}")
    for importer, imported in late:
        print(f"   {importer} -> {imported}")
    private = underscore_imports()
    print(f"underscore imports: {len(private)}")
    for importer, module, name in private:
        print(f"   {importer}: from {module} import {name}")
    return 1 if found or private else 0


if __name__ == "__main__":
    sys.exit(main())
