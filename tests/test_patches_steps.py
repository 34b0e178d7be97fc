"""The upstream path in review-sized steps (`innergraph_patches.steps`): sizes, the partition of the series, written steps that apply."""

import dataclasses
import textwrap

import pytest

from innergraph_patches import build, steps
from innergraph_patches.series import ASSIGNED, EDITS
from stand_in_sdist import stand_in_sdist

pytestmark = pytest.mark.repository_tools


def test_every_step_is_review_sized():
    sizes = {step.title: steps.step_lines(step)[0] for step in steps.STEPS}
    assert all(0 < lines <= steps.MAX_LINES for lines in sizes.values()), sizes


def test_the_regrouped_steps_hold_every_module_and_edit_of_the_series_once():
    assert steps.partition_problems() == []
    regrouped = [step for step in steps.STEPS if step.modules]
    assert sorted(m for step in regrouped for m in step.modules) == sorted(ASSIGNED)
    assert len([e for step in regrouped for e in step.edits]) == len(EDITS)


def test_a_module_left_out_or_given_twice_is_named(monkeypatch):
    first = next(i for i, step in enumerate(steps.STEPS) if step.modules)
    dropped = steps.STEPS[first].modules[0]
    broken = list(steps.STEPS)
    broken[first] = dataclasses.replace(broken[first], modules=broken[first].modules[1:])
    broken[-1] = dataclasses.replace(broken[-1], edits=(*broken[-1].edits, "Linker.schedule"))
    monkeypatch.setattr(steps, "STEPS", tuple(broken))
    assert steps.partition_problems() == [f"module {dropped} is in no step", "edit Linker.schedule is in 2 steps"]


def test_a_written_step_counts_code_and_tests_apart(tmp_path, monkeypatch):
    folder = tmp_path / "pr-9"
    folder.mkdir()
    (folder / "0001-x.patch").write_text(
        textwrap.dedent(
            """\
            --- a/pytensor/a.py
            +++ b/pytensor/a.py
            @@ -1,2 +1,3 @@
             kept
            -old
            +new
            +added
            --- /dev/null
            +++ b/tests/test_a.py
            @@ -0,0 +1,2 @@
            +def test_a():
            +    pass
            """
        )
    )
    step = steps.Step("x", "y", pr=str(folder))  # an absolute folder: patches/ / it is that folder
    assert steps.step_lines(step) == (3, 2)


def test_the_written_step_is_in_the_roadmap_with_its_patch_size():
    written = [step for step in steps.STEPS if step.pr]
    assert written, "at least the first step is written"
    readme = (build.REPOSITORY / "patches" / "README.md").read_text()
    for step in written:
        code, tests = steps.step_lines(step)
        assert f"| {step.title} | written: `patches/{step.pr}/` | {code} (+{tests}) |" in readme
        assert (build.REPOSITORY / "patches" / step.pr / "DESCRIPTION.md").is_file()


def test_written_steps_apply_in_order_and_one_that_no_longer_applies_is_reported(tmp_path, monkeypatch):
    folders = []
    for name, (before, after) in {"pr-8": ("old", "new"), "pr-9": ("new", "newer")}.items():
        folder = tmp_path / name
        folder.mkdir()
        (folder / "0001-x.patch").write_text(f"--- a/pytensor/a.py\n+++ b/pytensor/a.py\n@@ -1,2 +1,2 @@\n kept\n-{before}\n+{after}\n")
        folders.append(folder)
    # the second step applies only on top of the first (absolute folders: patches/ / folder is folder)
    monkeypatch.setattr(build, "STEPS", tuple(steps.Step("x", "y", pr=str(folder)) for folder in folders))
    applies = stand_in_sdist(tmp_path, {"pytensor/__init__.py": "", "pytensor/a.py": "kept\nold\n"})
    assert build.written_step_problems(tmp_path / "one", applies) == []
    changed = stand_in_sdist(tmp_path, {"pytensor/__init__.py": "", "pytensor/a.py": "kept\nchanged upstream\n"})
    problems = build.written_step_problems(tmp_path / "two", changed)
    assert len(problems) == 1 and f"{folders[0].name}/0001-x.patch does not apply" in problems[0], problems
    monkeypatch.setattr(build, "STEPS", (steps.Step("x", "y", pr=str(folders[1])),))
    problems = build.written_step_problems(tmp_path / "three", applies)  # the second alone: its base is missing
    assert len(problems) == 1 and f"{folders[1].name}/0001-x.patch does not apply" in problems[0], problems


def test_every_regrouped_step_imports_only_what_it_and_the_steps_before_it_bring():
    assert steps.import_problems() == []


def test_a_module_that_imports_a_later_steps_module_is_named():
    # core/canonical.py imports core/graph.py and core/types.py at import time
    early = steps.Step("canonical first", "nothing", modules=("core/canonical.py",))
    late = steps.Step("the graph after", "nothing", modules=("core/graph.py", "core/types.py"))
    assert steps.import_problems((early, late)) == [
        "step 1's core/canonical.py imports core/graph.py, which step 2 brings",
        "step 1's core/canonical.py imports core/types.py, which step 2 brings",
    ]
    assert steps.import_problems((late, early)) == []
    # a submodule taken from its package is the dependency, not the package's __init__
    assert "rewriting/db.py" in steps.import_time_dependencies("patching/__init__.py")
    assert "rewriting/__init__.py" not in steps.import_time_dependencies("patching/__init__.py")
