"""The import contract: one-way layers, no circle counting every import, late imports listed with a reason.

``lint-imports`` (CI) checks the layer contracts of ``pyproject.toml``; these tests check
what it does not: the whole import graph, function-local imports included, and the list of
late imports. ``python tests/scripts/import_graph.py`` prints the same figures.
"""

import ast
import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

pytestmark = pytest.mark.repository_tools  # run once, on the newest PyTensor (pyproject.toml's markers)

sys.path.insert(0, str(Path(__file__).parent / "scripts"))

import import_graph  # noqa: E402

import innergraph.consumer  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_the_import_graph_has_no_circle():
    """In a fresh process from the repository's root: the library's own files, even where this process
    has ``innergraph`` aliased to a patched PyTensor's ``pytensor.innergraph`` (grimp reads packages by name)."""
    code = "import json, sys; sys.path.insert(0, 'tests/scripts'); import import_graph; print(json.dumps(import_graph.circles()))"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []


def test_the_circle_finder_finds_a_circle(tmp_path, monkeypatch):
    """The check above can fail: two modules importing each other (inside functions) are found."""
    package = tmp_path / "circular_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("def f():\n    from circular_pkg import b\n")
    (package / "b.py").write_text("from circular_pkg import a\n")
    (package / "c.py").write_text("from circular_pkg import a\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert import_graph.circles(("circular_pkg",)) == [["circular_pkg.a", "circular_pkg.b"]]


def test_every_function_local_import_is_a_listed_late_import():
    listed = {tuple(key.split(" -> ")) for key in PYPROJECT["tool"]["innergraph"]["late-imports"]}
    found = set(import_graph.late_imports())
    assert found - listed == set(), "function-local imports not listed in [tool.innergraph.late-imports]: import at module level"
    assert listed - found == set(), "[tool.innergraph.late-imports] lists imports that are gone"


def test_every_listed_late_import_says_why():
    for key, reason in PYPROJECT["tool"]["innergraph"]["late-imports"].items():
        assert len(reason.split()) >= 5, key


def test_no_underscore_name_crosses_a_module():
    assert import_graph.underscore_imports() == []


def test_no_library_module_imports_the_package_root():
    """``from innergraph import x`` in the library would run (and re-enter) innergraph/__init__.py."""
    offenders = []
    for name, path in import_graph.module_files(("innergraph",)):
        if name in ("innergraph", "innergraph.__main__"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module == "innergraph":
                offenders.append(name)
            elif isinstance(node, ast.Import) and any(alias.name == "innergraph" for alias in node.names):
                offenders.append(name)
    assert offenders == []


def test_the_layer_contract_lists_every_folder_of_the_package():
    """A new folder of innergraph/ gets a place in the layers (import-linter's exhaustive check, asserted here too)."""
    (contract,) = [c for c in PYPROJECT["tool"]["importlinter"]["contracts"] if c["id"] == "layers"]
    listed = {part.strip() for layer in contract["layers"] for part in layer.replace(":", "|").split("|")}
    children = {p.stem if p.suffix else p.name for p in (ROOT / "innergraph").iterdir() if not p.name.startswith("__") and (p.suffix == ".py" or (p / "__init__.py").exists())}
    assert children == listed


@pytest.mark.parametrize("path", ["innergraph/ops/loop.py"])
def test_the_loops_use_only_names_the_contributor_api_exports(path):
    """The loops are what a contributor can write: every innergraph name they use is one `innergraph.consumer` re-exports."""
    public = set(innergraph.consumer.__all__)
    used: set[str] = set()
    for node in ast.walk(ast.parse((ROOT / path).read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("innergraph."):
            used.update(alias.name for alias in node.names)
    assert used and used <= public, sorted(used - public)
