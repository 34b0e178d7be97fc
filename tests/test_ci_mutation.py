"""`.ci/mutation.py`'s rule for mutants inside annotations, which it leaves out before running any.

Under ``from __future__ import annotations`` an annotation is never evaluated, so a mutant
inside one is equivalent; `annotation_spans` finds where they are. Checked on a small source
and against a module's whole session: the 132 mutants of ``rewriting/zero_increments.py``
that lay inside its spans (2026-11-30) were exactly the ones its diffs showed annotation-only.
"""

import importlib.util
import pathlib

import pytest

pytestmark = pytest.mark.repository_tools  # the repository's CI tooling, the same on any PyTensor

ROOT = pathlib.Path(__file__).parent.parent
_spec = importlib.util.spec_from_file_location("ci_mutation", ROOT / ".ci" / "mutation.py")
assert _spec is not None and _spec.loader is not None
mutation = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(mutation)

SOURCE = '''from __future__ import annotations

Index = list[int | None]


def f(a: int | None, b=1) -> list[int]:
    c: dict[str, int] = {}
    return [a or b]


class C:
    x: int = 3
'''


def _text(span):
    (r0, c0), (r1, c1) = span
    lines = SOURCE.splitlines()
    assert r0 == r1
    return lines[r0 - 1][c0:c1]


def test_the_spans_are_the_annotations_and_not_an_alias():
    spans = mutation.annotation_spans(SOURCE)
    assert sorted(_text(span) for span in spans) == sorted(["int | None", "list[int]", "dict[str, int]", "int"])
    assert all(span[0][0] != 3 for span in spans)  # `Index = list[int | None]` is evaluated


def test_no_spans_without_the_future_import():
    assert mutation.annotation_spans(SOURCE.replace("from __future__ import annotations\n", "")) == []


def test_a_mutant_inside_a_span_is_one_the_diff_rule_calls_annotation_only():
    diff = "--- mutation diff ---\n--- a\n+++ b\n@@ -6,1 +6,1 @@\n-def f(a: int | None, b=1) -> list[int]:\n+def f(a: int + None, b=1) -> list[int]:\n"
    assert mutation.only_annotations(SOURCE, diff)
    (span,) = [s for s in mutation.annotation_spans(SOURCE) if s[0][0] == 6 and _text(s) == "int | None"]
    assert span[0] <= (6, 9) and (6, 19) <= span[1]


def test_the_timeout_is_600_seconds_unless_mutation_timeout_says_otherwise(monkeypatch):
    """MUTATION_TIMEOUT shortens a trial run's wait for a mutant that makes a loop endless; zero or a word is refused."""
    monkeypatch.delenv("MUTATION_TIMEOUT", raising=False)
    assert mutation.timeout() == 600.0
    monkeypatch.setenv("MUTATION_TIMEOUT", "45")
    assert mutation.timeout() == 45.0
    for wrong in ("0", "-5", "nan", "soon"):
        monkeypatch.setenv("MUTATION_TIMEOUT", wrong)
        with pytest.raises(ValueError):
            mutation.timeout()


def test_the_mutated_line_is_the_first_removed_line_that_is_not_blank():
    changed = "--- a/m.py\n+++ b/m.py\n@@ -1,2 +1,2 @@\n-    if a < b:\n+    if a <= b:\n"
    decorator = "--- a/m.py\n+++ b/m.py\n@@ -3,9 +3,6 @@\n     return found\n-\n-\n-@cache\n def f():\n"
    assert (mutation.mutated_line(changed), mutation.mutated_line(decorator), mutation.mutated_line("")) == ("if a < b:", "@cache", "")
