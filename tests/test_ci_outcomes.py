"""``.ci/outcomes.py``: CI's test-by-test judge of PyTensor's (and PyMC's) own tests, vanilla vs
innergraph (issue 37 item 3).

Each failure rule fires on a small synthetic record, and the same records pass with that rule
turned off (``compare(..., disabled=[rule])``): the rule, nothing else, catches the case. The
plugin half runs in a real pytest subprocess on a synthetic test file, so the outcome names
are pytest's own.
"""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.repository_tools  # run once, on the newest PyTensor (pyproject.toml's markers)

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("ci_outcomes", ROOT / ".ci" / "outcomes.py")
assert _spec is not None and _spec.loader is not None
outcomes = importlib.util.module_from_spec(_spec)
sys.modules["ci_outcomes"] = outcomes  # dataclasses look their module up
_spec.loader.exec_module(outcomes)

Record, Result, Session, compare = outcomes.Record, outcomes.Result, outcomes.Session, outcomes.compare


def record(name, tests, *, innergraph=None, sessions=None):
    """A record from ``{test id: outcome}``; one finished session per file unless ``sessions``
    (``[(args, exitstatus)]``) says otherwise."""
    rec = Record(name)
    for test_id, outcome in tests.items():
        rec.tests[test_id] = Result(test_id, outcome, message=f"{outcome} here")
    uses = name == "innergraph" if innergraph is None else innergraph
    if sessions is None:
        sessions = [([f], 0) for f in sorted({i.split("::")[0] for i in tests})]
    for n, (args, status) in enumerate(sessions):
        rec.sessions[str(n)] = Session(str(n), list(args), status, 1.0, uses if status is not None else None)
    return rec


def judged(vanilla, innergraph, rule, disabled=(), **kwargs):
    """Compare, assert that exactly ``rule`` fails, and that nothing fails without it."""
    v, g = record("vanilla", vanilla), record("innergraph", innergraph)
    result = compare(v, g, disabled=disabled, **kwargs)
    assert result.rules() == {rule}, outcomes.report(result)
    assert compare(v, g, disabled=[*disabled, rule], **kwargs).failures == []
    return result


BASE = {"t.py::a": "passed", "t.py::b": "xfailed", "t.py::c": "skipped", "t.py::d": "failed"}


def test_equal_outcomes_pass_including_vanillas_own_failures():
    result = compare(record("vanilla", BASE), record("innergraph", BASE))
    assert result.failures == []
    text = outcomes.report(result)
    assert "vanilla's own failures" in text and "t.py::d" in text


@pytest.mark.parametrize(
    "before, after",
    [("passed", "failed"), ("passed", "error"), ("xfailed", "failed"), ("xfailed", "passed"),
     ("xpassed", "xfailed"), ("passed", "notrun")],
)
def test_a_test_vanilla_passes_or_xfails_must_keep_its_outcome(before, after):
    result = judged({**BASE, "t.py::x": before}, {**BASE, "t.py::x": after}, "regressed")
    assert [f.id for f in result.failures] == ["t.py::x"]


@pytest.mark.parametrize("after", ["skipped", "deselected"])
def test_skipped_only_with_innergraph(after):
    judged({**BASE, "t.py::x": "failed"}, {**BASE, "t.py::x": after}, "skipped")
    judged(BASE, {**BASE, "t.py::a": after}, "skipped")


@pytest.mark.parametrize("before", ["skipped", "deselected"])
@pytest.mark.parametrize("after", ["failed", "error"])
def test_a_test_skipped_in_vanilla_that_fails_with_innergraph_fails_the_run(before, after):
    result = judged({**BASE, "t.py::x": before}, {**BASE, "t.py::x": after}, "fails-where-skipped")
    assert [f.id for f in result.failures] == ["t.py::x"]


def test_missing_only_with_innergraph():
    g = dict(BASE)
    del g["t.py::a"]
    result = judged(BASE, g, "missing")
    assert result.failures[0].innergraph == "absent"


def test_a_failing_test_missing_with_innergraph_is_still_missing():
    g = dict(BASE)
    del g["t.py::d"]
    judged(BASE, g, "missing")


def test_nothing_ran():
    only_skips = {"t.py::c": "skipped", "u.py": "skipped"}
    result = judged(only_skips, only_skips, "nothing-ran")
    assert len(result.failures) == 2  # each variant
    judged(BASE, {"t.py::c": "skipped"}, "nothing-ran", disabled=["skipped", "missing"])
    judged({}, {}, "nothing-ran")


def test_a_module_that_errors_at_collection_in_both_fails():
    both = {**BASE, "u.py": "collect-error"}
    result = judged(both, both, "collect-error")
    assert "in both" in result.failures[0].note


def test_a_module_that_errors_at_collection_only_with_innergraph_fails():
    judged({**BASE, "u.py::t": "passed"}, {**BASE, "u.py": "collect-error"}, "collect-error",
           disabled=["missing"])


def test_a_file_vanilla_only_fails_judges_nothing():
    broken = {**BASE, "u.py::e": "error", "u.py::f": "failed", "u.py::g": "skipped"}
    judged(broken, broken, "file-broken")


def test_a_killed_or_broken_session_fails():
    v, g = record("vanilla", BASE), record("innergraph", BASE, sessions=[(["t.py"], None)])
    assert compare(v, g).rules() == {"session"}
    assert compare(v, g, disabled=["session"]).failures == []
    g = record("innergraph", BASE, sessions=[(["t.py"], 3)])
    assert compare(v, g).rules() == {"session"}


def test_every_file_named_must_have_run_in_both():
    judged(BASE, BASE, "file-not-run", files=["t.py", "tests/other.py"])
    assert compare(record("vanilla", BASE), record("innergraph", BASE), files=["./t.py"]).failures == []


def test_the_variants_must_be_what_they_say():
    v, g = record("vanilla", BASE, innergraph=True), record("innergraph", BASE)
    assert compare(v, g).rules() == {"variant"}
    assert compare(v, g, disabled=["variant"]).failures == []
    assert compare(record("vanilla", BASE), record("innergraph", BASE, innergraph=False)).rules() == {"variant"}


def test_listed_differences_pass_and_stale_entries_fail():
    g = {**BASE, "t.py::a": "failed"}
    listed = {"t.py::a": "innergraph does X on purpose"}
    result = compare(record("vanilla", BASE), record("innergraph", g), expected=listed)
    assert result.failures == []
    assert [f.rule for f in result.findings if f.id == "t.py::a"] == ["expected"]
    judged(BASE, BASE, "stale", expected=listed)
    judged(BASE, BASE, "stale", expected={"t.py::gone": "renamed since"})
    # an entry of a file this run did not take (another tier) is not judged
    assert compare(record("vanilla", BASE), record("innergraph", BASE), expected={"u.py::x": "elsewhere"}).failures == []


def test_differences_that_do_not_fail():
    v = {**BASE, "t.py::e": "failed", "t.py::s": "skipped"}
    g = {**BASE, "t.py::e": "passed", "t.py::s": "passed", "t.py::new": "passed"}
    result = compare(record("vanilla", v), record("innergraph", g))
    assert result.failures == []
    assert {f.id for f in result.findings} == {"t.py::e", "t.py::s", "t.py::new"}


def test_expected_differences_file(tmp_path):
    shipped = ROOT / ".ci" / "expected-differences.toml"
    for suite in ("upstream", "pymc", "pmx"):
        assert isinstance(outcomes.read_expected(shipped, suite), dict)
    good = tmp_path / "e.toml"
    good.write_text('[upstream]\n"t.py::a[c|py]" = "why"\n')
    assert outcomes.read_expected(good, "upstream") == {"t.py::a[c|py]": "why"}
    assert outcomes.read_expected(good, "pymc") == {}
    for text in ('"t.py::a" = "why"\n', '[upstream]\n"t.py::a" = ""\n', "[upstream\n"):
        bad = tmp_path / "bad.toml"
        bad.write_text(text)
        with pytest.raises(outcomes.RecordError):
            outcomes.read_expected(bad, "upstream")


def write_record(path, rec):
    with open(path, "w") as out:
        for s in rec.sessions.values():
            out.write(json.dumps({"kind": "session", "session": s.session, "args": s.args}) + "\n")
        for t in rec.tests.values():
            sid = next(iter(rec.sessions))
            out.write(json.dumps({"kind": "test", "session": sid, "id": t.id, "outcome": t.outcome,
                                  "message": t.message}) + "\n")
        for s in rec.sessions.values():
            if s.exitstatus is not None:
                out.write(json.dumps({"kind": "finish", "session": s.session, "exitstatus": s.exitstatus,
                                      "wall": 1.0, "innergraph": s.innergraph}) + "\n")


def test_the_command(tmp_path, capsys):
    v, g, same = tmp_path / "v.jsonl", tmp_path / "g.jsonl", tmp_path / "s.jsonl"
    write_record(v, record("vanilla", BASE))
    write_record(g, record("innergraph", {**BASE, "t.py::a": "failed"}))
    write_record(same, record("innergraph", BASE))
    assert outcomes.main(["compare", str(v), str(g)]) == 1
    out = capsys.readouterr().out
    assert "FAILED (1: 1 regressed)" in out and "t.py::a" in out and "failed here" in out
    assert outcomes.main(["compare", str(v), str(same), "--files", "t.py"]) == 0
    assert outcomes.main(["compare", str(v), str(tmp_path / "never-written.jsonl")]) == 1  # nothing ran
    assert "innergraph ran no test" in capsys.readouterr().out
    (tmp_path / "junk.jsonl").write_text("not json\n")
    assert outcomes.main(["compare", str(v), str(tmp_path / "junk.jsonl")]) == 2
    assert outcomes.main(["summary", str(v)]) == 0
    assert "1 passed, 1 failed, 1 skipped, 1 xfailed" in capsys.readouterr().out


SYNTHETIC = '''
import os
import pytest

@pytest.fixture
def broken_setup():
    raise RuntimeError("setup breaks")

@pytest.fixture
def broken_teardown():
    yield
    raise RuntimeError("teardown breaks")

def test_pass(): pass
def test_fail(): assert 1 == 2, "one is not two"
def test_skip(): pytest.skip("not here")
@pytest.mark.xfail(reason="known")
def test_xfail(): assert False
@pytest.mark.xfail(reason="known", strict=False)
def test_xpass(): pass
@pytest.mark.xfail(reason="known", strict=True)
def test_xpass_strict(): pass
def test_setup_error(broken_setup): pass
def test_teardown_error(broken_teardown): pass
def test_deselected(): pass
@pytest.mark.parametrize("linker", ["c|py", "numba"])
def test_param(linker): pass
def test_dies():
    if os.environ.get("DIE"):
        os._exit(1)
'''


def run_pytest(tmp_path, record_path, *args, env=None):
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    environ = {**os.environ, "PYTHONPATH": str(ROOT / ".ci"), "OUTCOMES_RECORD": str(record_path), **(env or {})}
    environ.pop("PYTEST_ADDOPTS", None)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "outcomes",
         "-c", str(tmp_path / "pytest.ini"), "--rootdir", str(tmp_path), *args],
        cwd=tmp_path, env=environ, capture_output=True, text=True, timeout=120,
    )


def test_the_plugin_records_pytests_outcomes(tmp_path):
    (tmp_path / "test_synthetic.py").write_text(SYNTHETIC)
    (tmp_path / "test_broken.py").write_text("import no_such_module_here\n")
    (tmp_path / "test_skipped_module.py").write_text("import pytest\npytest.importorskip('no_such_module_here')\n")
    path = tmp_path / "r.jsonl"
    for f in ("test_synthetic.py", "test_broken.py", "test_skipped_module.py"):
        run_pytest(tmp_path, path, f, "--deselect", "test_synthetic.py::test_deselected")
    rec = outcomes.read_record(path)
    got = {k: t.outcome for k, t in rec.tests.items()}
    assert got == {
        "test_synthetic.py::test_pass": "passed",
        "test_synthetic.py::test_fail": "failed",
        "test_synthetic.py::test_skip": "skipped",
        "test_synthetic.py::test_xfail": "xfailed",
        "test_synthetic.py::test_xpass": "xpassed",
        "test_synthetic.py::test_xpass_strict": "failed",
        "test_synthetic.py::test_setup_error": "error",
        "test_synthetic.py::test_teardown_error": "error",
        "test_synthetic.py::test_deselected": "deselected",
        "test_synthetic.py::test_param[c|py]": "passed",
        "test_synthetic.py::test_param[numba]": "passed",
        "test_synthetic.py::test_dies": "passed",
        "test_broken.py": "collect-error",
        "test_skipped_module.py": "skipped",
    }
    assert "one is not two" in rec.tests["test_synthetic.py::test_fail"].message
    assert "not here" in rec.tests["test_synthetic.py::test_skip"].message
    assert "no_such_module_here" in rec.tests["test_broken.py"].message
    assert sorted(s.exitstatus for s in rec.sessions.values()) == [1, 2, 5]  # 5: nothing but a skipped module
    assert {s.innergraph for s in rec.sessions.values()} == {False}
    assert rec.files() == ["test_synthetic.py", "test_broken.py", "test_skipped_module.py"]


def test_the_plugin_records_a_stopped_and_a_killed_session(tmp_path):
    (tmp_path / "test_synthetic.py").write_text(SYNTHETIC)
    stopped, killed, full = tmp_path / "x.jsonl", tmp_path / "k.jsonl", tmp_path / "f.jsonl"
    run_pytest(tmp_path, stopped, "test_synthetic.py", "-x")
    rec = outcomes.read_record(stopped)
    assert rec.tests["test_synthetic.py::test_fail"].outcome == "failed"
    assert rec.tests["test_synthetic.py::test_dies"].outcome == "notrun"  # -x stopped before it
    run_pytest(tmp_path, killed, "test_synthetic.py", env={"DIE": "1"})
    rec = outcomes.read_record(killed)
    assert [s.exitstatus for s in rec.sessions.values()] == [None]  # no finish line
    assert "test_synthetic.py::test_dies" not in rec.tests
    run_pytest(tmp_path, full, "test_synthetic.py")  # the same tests, finished, as "vanilla"
    assert "session" in compare(outcomes.read_record(full), rec).rules()


def test_without_the_variable_the_plugin_writes_nothing(tmp_path):
    (tmp_path / "test_one.py").write_text("def test_one(): pass\n")
    result = run_pytest(tmp_path, "", "test_one.py")
    assert result.returncode == 0, result.stdout + result.stderr
    assert list(tmp_path.glob("*.jsonl")) == []
