"""The regrouped steps' own tests (`innergraph_patches.step_tests`): the trees they run on, what fails them."""

import ast

import pytest

from innergraph_patches import build, step_tests, steps
from stand_in_sdist import stand_in_sdist

pytestmark = pytest.mark.repository_tools


def _steps(tmp_path, monkeypatch, test_text):
    """Two steps on a stand-in tree: a written patch, then `core/errors.py` regrouped with one test file of its own."""
    written = tmp_path / "pr-x"
    written.mkdir()
    (written / "0001-x.patch").write_text("--- a/pytensor/a.py\n+++ b/pytensor/a.py\n@@ -1 +1 @@\n-old\n+new\n")
    own = tmp_path / "step-x"
    (own / "tests" / "innergraph").mkdir(parents=True)
    (own / "tests" / "innergraph" / "__init__.py").write_text("")
    (own / "tests" / "innergraph" / "test_errors.py").write_text(test_text)
    # absolute folders: patches/ / folder is folder
    regrouped = steps.Step("regrouped", "nothing", modules=("core/errors.py",), tests=str(own), tested="its own tests")
    last = steps.Step("enabling", "everything", modules=("innergraph_pickle/__init__.py",))  # imports no PyTensor
    chosen = (steps.Step("written", "something", pr=str(written)), regrouped, last)
    monkeypatch.setattr(build, "STEPS", chosen)
    monkeypatch.setattr(step_tests, "STEPS", chosen)
    return regrouped


_PASSES = """
from pytensor.innergraph.core.errors import ArityError


def test_an_arity_error_is_a_type_error():
    assert issubclass(ArityError, TypeError)
"""


def test_a_step_tree_holds_the_written_patches_the_modules_in_their_upstream_form_and_the_own_tests(tmp_path, monkeypatch):
    regrouped = _steps(tmp_path, monkeypatch, _PASSES)
    sdist = stand_in_sdist(tmp_path, {"pytensor/__init__.py": "", "pytensor/a.py": "old\n"})
    tree = build.step_tree(2, tmp_path / "tree", sdist)
    assert (tree / "pytensor/a.py").read_text() == "new\n"
    assert (tree / "pytensor/innergraph/__init__.py").is_file()
    assert "class ArityError" in (tree / "pytensor/innergraph/core/errors.py").read_text()
    assert (tree / "tests/innergraph/test_errors.py").read_text() == _PASSES
    assert (tree / "tests/__init__.py").is_file()  # PyTensor's repository has one; its sdist does not
    assert steps.step_lines(regrouped)[1] == _PASSES.count("\n")
    assert "its own tests; PyTensor's own tests not run as a step" in steps.tested(regrouped)
    with pytest.raises(ValueError, match="steps must be 1 to 3"):
        build.step_tree(4, tmp_path / "other", sdist)


def test_own_tests_pass_on_an_inert_tree(tmp_path, monkeypatch):
    _steps(tmp_path, monkeypatch, _PASSES)
    sdist = stand_in_sdist(tmp_path, {"pytensor/__init__.py": "", "pytensor/a.py": "old\n"})
    assert step_tests.steps_with_tests() == [2]
    assert step_tests.regrouped_steps() == [2, 3]
    ok, report = step_tests.run_step_tests(2, tmp_path / "run", sdist=sdist)
    assert ok, report
    assert "tests/innergraph/test_errors.py: 1 passed" in report
    assert "inert: `import pytensor` loads no module of pytensor.innergraph" in report


def test_a_tree_whose_pytensor_imports_its_innergraph_is_not_inert(tmp_path, monkeypatch):
    _steps(tmp_path, monkeypatch, _PASSES)
    sdist = stand_in_sdist(tmp_path, {"pytensor/__init__.py": "import pytensor.innergraph.core.errors\n", "pytensor/a.py": "old\n"})
    ok, report = step_tests.run_step_tests(2, tmp_path / "run", sdist=sdist)
    assert not ok
    assert "FAILED: `import pytensor` loads ['pytensor.innergraph', 'pytensor.innergraph.core', 'pytensor.innergraph.core.errors']" in report


def test_a_failing_test_and_a_test_that_imports_the_library_fail_the_tree(tmp_path, monkeypatch):
    sdist = stand_in_sdist(tmp_path, {"pytensor/__init__.py": "", "pytensor/a.py": "old\n"})
    _steps(tmp_path, monkeypatch, _PASSES + "\n\ndef test_wrong():\n    assert ArityError is ValueError\n")
    ok, report = step_tests.run_step_tests(2, tmp_path / "one", sdist=sdist)
    assert not ok and "1 failed, 1 passed" in report, report

    # as if the library had been imported (the stand-in PyTensor cannot run its import)
    (tmp_path / "b").mkdir()
    _steps(tmp_path / "b", monkeypatch, _PASSES + '\nimport sys, types  # noqa: E401, E402\nsys.modules["innergraph"] = types.ModuleType("innergraph")\n')
    ok, report = step_tests.run_step_tests(2, tmp_path / "two", sdist=sdist)
    assert not ok
    assert "FAILED: the tests' process imported the library innergraph" in report


def test_the_last_step_must_enable_its_innergraph(tmp_path, monkeypatch):
    _steps(tmp_path, monkeypatch, _PASSES)
    inert = stand_in_sdist(tmp_path, {"pytensor/__init__.py": "", "pytensor/a.py": "old\n"})
    ok, report = step_tests.run_step_tests(3, tmp_path / "one", sdist=inert)
    assert not ok and "FAILED: the last step does not enable pytensor.innergraph" in report, report
    (tmp_path / "b").mkdir()
    enabling = stand_in_sdist(tmp_path / "b", {"pytensor/__init__.py": "import pytensor.innergraph.core.errors\n", "pytensor/a.py": "old\n"})
    ok, report = step_tests.run_step_tests(3, tmp_path / "two", sdist=enabling)
    assert ok and "enabled: `import pytensor` loads pytensor.innergraph" in report, report


def _imported_modules(path):
    """The ``pytensor.innergraph`` modules a test file imports, as library paths (``core/graph.py``).

    ``from pytensor.innergraph.core import collector`` imports the package and its module
    ``core/collector.py``: a name that is a module of the series counts as one.
    """
    series = {m for step in steps.STEPS for m in step.modules}
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            names = [node.module or ""] + [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        for name in names:
            if name.startswith("pytensor.innergraph."):
                module = name.removeprefix("pytensor.innergraph.").replace(".", "/")
                if f"{module}.py" in series or name in names[:1]:
                    found.add(f"{module}.py")
    return found


def test_each_steps_own_tests_import_only_modules_of_that_step_and_the_steps_before_it():
    laid: set[str] = set()
    checked = 0
    for step in steps.STEPS:
        laid |= {m for m in step.modules}
        laid |= {m.removesuffix("/__init__.py") + ".py" for m in step.modules if m.endswith("/__init__.py")}
        for path in steps.own_test_files(step):
            imported = _imported_modules(path)
            assert imported <= laid, f"{path} imports modules of later steps: {sorted(imported - laid)}"
            checked += bool(imported)
    assert checked >= 1  # step 8's tests import its modules


def test_a_module_that_does_not_import_on_its_tree_fails_it(tmp_path, monkeypatch):
    _steps(tmp_path, monkeypatch, _PASSES)
    broken = steps.Step("needs more", "nothing", modules=("core/graph.py",))  # imports PyTensor, which the stand-in lacks
    monkeypatch.setattr(build, "STEPS", (*step_tests.STEPS[:2], broken, step_tests.STEPS[2]))
    monkeypatch.setattr(step_tests, "STEPS", build.STEPS)
    sdist = stand_in_sdist(tmp_path, {"pytensor/__init__.py": "", "pytensor/a.py": "old\n"})
    ok, report = step_tests.run_step_tests(3, tmp_path / "run", sdist=sdist)
    assert not ok
    assert "FAILED: modules that do not import:" in report and "pytensor.innergraph.core.graph: " in report
