"""The generator of the upstream series (`innergraph_patches`): module table, import rewriting, anchors.

Building the series needs PyTensor's sdist; ``.ci/patched`` runs ``python -m innergraph_patches
check`` and applies the result. These tests need only the installed PyTensor (the same files).
"""

import shutil
from pathlib import Path
from typing import Any

import pytensor
import pytest

from innergraph.startup.upstream import series_level
from innergraph_patches import build, series

REPOSITORY = build.REPOSITORY


def test_every_library_module_is_in_exactly_one_patch_or_library_only():
    assert series.unassigned(REPOSITORY) == []
    shipped = [m for spec in series.SERIES for m in spec.modules]
    assert len(shipped) == len(set(shipped))


def test_an_unassigned_module_stops_the_build_and_says_what_to_add(tmp_path, monkeypatch):
    copy = tmp_path / "repo"
    shutil.copytree(REPOSITORY / "innergraph", copy / "innergraph", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPOSITORY / "innergraph_pickle", copy / "innergraph_pickle", ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "innergraph" / "rewriting" / "brand_new.py").write_text('"""A module nobody assigned."""\n')
    assert series.unassigned(copy) == ["rewriting/brand_new.py"]
    monkeypatch.setattr(build, "REPOSITORY", copy)
    with pytest.raises(SystemExit, match=r"(?s)innergraph/startup/shipped.py.*innergraph/rewriting/brand_new.py"):
        build.build_series(out=tmp_path / "out", sdist=tmp_path / "never-read.tar.gz")


def test_a_series_built_on_a_source_tree_keeps_the_files_its_gitignore_ignores(tmp_path, monkeypatch):
    """``build --tree``: PyTensor's repository ignores ``core`` in its ``.gitignore``; the series' ``core/`` modules are kept all the same.

    A one-patch series of two ``core/`` modules and no edit, on a tree of PyTensor's
    ``__init__.py`` and that ``.gitignore``: independent of the installed PyTensor's
    version and of the series it may carry (``.ci/patched`` runs this file after each patch).
    """
    tree = tmp_path / "tree"
    (tree / "pytensor").mkdir(parents=True)
    (tree / "pytensor" / "__init__.py").write_text('"""PyTensor."""\n')
    (tree / ".gitignore").write_text("core\n*.so\n")
    spec = series.PatchSpec("core", "innergraph: the core", "Two modules.", ("core/types.py", "core/graph.py"))
    monkeypatch.setattr(build, "SERIES", (spec,))
    build.build_series(out=tmp_path / "out", tree=tree)
    (patch,) = sorted((tmp_path / "out").glob("0*.patch"))
    text = patch.read_text()
    assert "+++ b/pytensor/innergraph/core/types.py" in text and "+++ b/pytensor/innergraph/core/graph.py" in text, text[:2000]
    assert "source tree tree" in (tmp_path / "out" / "README.md").read_text()


def test_copies_import_pytensor_innergraph_only():
    source = (
        "import innergraph_pickle\n"
        "from innergraph.core.fold import fold_inner_graphs\n"
        "from innergraph import consumer as api\n"
        "    import innergraph.backends.numba  # noqa: F401\n"
        'ON_DEMAND = ("innergraph.backends.numba",)\n'
        'mode.excluding("innergraph")\n'
        'fgraph.replace_all(pairs, reason="innergraph.lift")\n'
        "import innergraph.startup.supported  # noqa: F401  library only\n"
    )
    assert build.rewrite_imports(source, "x.py") == (
        "from pytensor.innergraph import _pickle as innergraph_pickle\n"
        "from pytensor.innergraph.core.fold import fold_inner_graphs\n"
        "from pytensor.innergraph import consumer as api\n"
        "    import pytensor.innergraph.backends.numba  # noqa: F401\n"
        'ON_DEMAND = ("pytensor.innergraph.backends.numba",)\n'
        'mode.excluding("innergraph")\n'
        'fgraph.replace_all(pairs, reason="innergraph.lift")\n'
    )


@pytest.mark.parametrize("edit", series.EDITS, ids=lambda e: e.replaces or e.file)
def test_each_edit_finds_its_anchor_once_in_the_installed_pytensor_or_is_there(edit):
    """Released PyTensor: where each edit goes is unambiguous. Patched PyTensor (up to the edit's patch): each edit is in it, once."""
    text = (Path(pytensor.__file__).parent.parent / edit.file).read_text()
    patch = next(i for i, spec in enumerate(series.SERIES) if edit in spec.edits)
    patched = patch < series_level()  # a PyTensor carrying the series' first patches has their edits only
    if isinstance(edit, series.Edit):
        assert text.count(edit.before + edit.text + edit.after if patched else edit.before + edit.after) == 1
    elif patched:
        assert text.count(f"def _{edit.name}_base(") == 1 and text.count(f"def {edit.name}(*args, **kwargs):") == 1
    else:
        assert text.count(f"def {edit.name}(") == 1


def test_verify_reads_the_upstream_runners_total_and_pytests_summary():
    from innergraph_patches import verify

    total = "546 passed, 8 xfailed, 19 skipped, 4 failed, 8 deselected "
    assert verify.counts(total) == verify.VANILLA
    assert verify.counts("5 failed, 545 passed, 8 xfailed, 19 skipped, 8 deselected") != verify.VANILLA
    assert verify.counts("= 3 passed, 1 error in 2.0s =") == {"passed": 3, "errors": 1}


def _record(tmp_path, name, outcomes, finished=True):
    """A record as ``.ci/outcomes.py``'s plugin writes it: one session per file, one line per test id."""
    import json

    lines: list[dict[str, Any]] = []
    for file in sorted({test_id.split("::")[0] for test_id in outcomes}):
        session = f"{name}-{file}"
        lines.append({"kind": "session", "session": session, "args": [file]})
        lines += [{"kind": "test", "session": session, "id": i, "outcome": o} for i, o in outcomes.items() if i.startswith(file)]
        if finished:
            lines.append({"kind": "finish", "session": session, "exitstatus": 1, "wall": 1.0, "innergraph": False, "pytensor": "3.3.8"})
    path = tmp_path / f"{name}.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    from innergraph_patches import verify

    return verify.outcomes().read_record(path, name)


def test_verify_judges_pytensors_tests_per_id_accepting_vanillas_own_failures(tmp_path):
    """CI's judge (``.ci/outcomes.py``) per test id: vanilla's own failures pass, a new failure or skip does not, whatever the counts."""
    from innergraph_patches import verify

    known = verify.VANILLA_FAILURES[0]
    vanilla = _record(tmp_path, "vanilla", {known: "failed", "tests/test_ifelse.py::test_a": "passed", "tests/scan/test_basic.py::test_b": "xfailed", "tests/scan/test_basic.py::test_c": "passed"})
    files = ["tests/test_ifelse.py", "tests/scan/test_basic.py"]
    same = _record(tmp_path, "same", {i: t.outcome for i, t in vanilla.tests.items()})
    assert verify.judge(vanilla, same, 5, files).failures == []  # innergraph's copy is never `import innergraph`d: no "variant"
    swapped = _record(tmp_path, "swapped", {known: "passed", "tests/test_ifelse.py::test_a": "failed", "tests/scan/test_basic.py::test_b": "xfailed", "tests/scan/test_basic.py::test_c": "passed"})
    assert [(f.rule, f.id) for f in verify.judge(vanilla, swapped, 2, files).failures] == [("regressed", "tests/test_ifelse.py::test_a")]  # same counts
    skipped = _record(tmp_path, "skipped", {known: "failed", "tests/test_ifelse.py::test_a": "passed", "tests/scan/test_basic.py::test_b": "xfailed", "tests/scan/test_basic.py::test_c": "skipped"})
    assert [f.rule for f in verify.judge(vanilla, skipped, 2, files).failures] == ["skipped"]
    # a subset judges its own files only; a file run.sh ran that left no record fails
    subset = _record(tmp_path, "subset", {"tests/scan/test_basic.py::test_b": "xfailed", "tests/scan/test_basic.py::test_c": "passed"})
    assert verify.judge(vanilla, subset, 2, ["tests/scan/test_basic.py"]).failures == []
    missing = verify.judge(vanilla, subset, 2, files).failures
    assert {(f.rule, f.id.split("::")[0]) for f in missing} == {("missing", "tests/test_ifelse.py"), ("file-not-run", "tests/test_ifelse.py")}


def test_verify_takes_a_vanilla_record_that_can_judge_and_runs_vanilla_instead_of_one_that_cannot(tmp_path):
    """``--vanilla`` (CI hands over lane B's record): used when it is PyTensor 3.3.8's and whole; otherwise vanilla runs."""
    from innergraph_patches import verify

    ran: list[str] = []

    def run_vanilla():
        ran.append("vanilla")
        return "its own run", True, "vanilla: run here"

    tests = {verify.VANILLA_FAILURES[0]: "failed", "tests/test_ifelse.py::test_a": "passed", "tests/scan/test_basic.py::test_b": "passed"}
    whole = _record(tmp_path, "whole", tests)
    record, good, _ = verify.vanilla_reference(tmp_path / "whole.jsonl", run_vanilla)
    assert good and ran == [] and set(record.tests) == set(whole.tests)
    killed = _record(tmp_path, "killed", tests, finished=False)  # a pytest that never finished
    assert killed.tests and verify.vanilla_reference(tmp_path / "killed.jsonl", run_vanilla)[0] == "its own run" and ran == ["vanilla"]
    other = tmp_path / "other.jsonl"  # another PyTensor's run
    other.write_text((tmp_path / "whole.jsonl").read_text().replace('"pytensor": "3.3.8"', '"pytensor": "3.3.9"'))
    assert verify.vanilla_reference(other, run_vanilla)[0] == "its own run" and ran == ["vanilla", "vanilla"]
    assert verify.vanilla_reference(None, run_vanilla)[0] == "its own run"


def test_verify_expects_monkey_patching_before_the_last_patch_and_the_alias_after_it():
    from innergraph_patches import verify

    assert [verify._expected_form(level) for level in range(1, len(series.SERIES) + 1)] == [
        "monkey-patched",
        "monkey-patched",
        "monkey-patched",
        "monkey-patched",
        "patched pytensor",
    ]


def test_only_the_last_patch_enables_innergraph():
    """The backends come before the rewrites, whose patch makes ``import pytensor`` import its copy: every earlier patch is inert."""
    assert series.SERIES[-1].modules.count("rewriting/db.py") == 1
    assert [e.file for e in series.SERIES[-1].edits] == ["pytensor/__init__.py"]
    assert not any(e.file == "pytensor/__init__.py" for spec in series.SERIES[:-1] for e in spec.edits)
    assert series.ASSIGNED["backends/numba.py"] < series.ASSIGNED["rewriting/db.py"]


def test_verify_skips_pytensors_tests_only_after_patches_that_add_unimported_files(tmp_path):
    from innergraph_patches import verify

    committed = sorted((build.REPOSITORY / "patches").glob("[0-9][0-9][0-9][0-9]-*.patch"))
    skipped = [level for level, patch in enumerate(committed, start=1) if verify.untouched_reason(patch, level)]
    assert skipped == [1, 3]  # 2 edits PyTensor's linker, printing, pickling; 4 the backends' delegates; 5 enables the copy
    assert verify.edited_pytensor_files(committed[1])[:3] == [
        "pytensor/compile/debug/debugmode.py", "pytensor/compile/maker.py", "pytensor/graph/fg.py"
    ]

    # an inert patch that edits one of PyTensor's own files is run, as is any patch once PyTensor imports its copy
    edits_pytensor = tmp_path / "edit.patch"
    edits_pytensor.write_text("--- a/pytensor/innergraph/fold.py\n+++ b/pytensor/innergraph/fold.py\n--- a/pytensor/scan/op.py\n+++ b/pytensor/scan/op.py\n")
    assert verify.untouched_reason(edits_pytensor, 1) is None
    adds_only = tmp_path / "add.patch"
    adds_only.write_text("--- /dev/null\n+++ b/pytensor/innergraph/new.py\n")
    assert verify.untouched_reason(adds_only, 3) is not None
    assert verify.untouched_reason(adds_only, len(series.SERIES)) is None  # PyTensor imports its copy
