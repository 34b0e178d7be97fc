"""Test files in forked children (tests/file_processes.py): what pytest reports stays pytest's.

Each test runs a pytest of its own on small generated test files whose conftest loads the
plugin, and reads what that pytest reports: which process ran each test (a process per file
under a budget of 0, several files per child under a large one, a new child once a file
passed the budget), the outcomes and their counts, ``-x``, a child that dies, warnings, output
captured on failure, the summary lines a child fills, and ``--one-process``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.repository_tools

HERE = Path(__file__).resolve().parent

CONFTEST = f"""
import sys
sys.path.insert(0, {str(HERE)!r})
from file_processes import pytest_addoption, pytest_runtestloop, register_child_state

LINES = []
register_child_state("lines", lambda: LINES, LINES.extend)


def record(test_file):  # note which process ran a test of test_file, in the file PIDS names
    import os

    with open(os.environ["PIDS"], "a") as f:
        f.write(f"{{test_file}} {{os.getpid()}}\\n")


def pytest_runtest_logreport(report):  # a plugin recording outcomes to a file, as CI's does
    import os

    if report.when == "call" or report.outcome != "passed":
        with open(os.environ["PIDS"] + ".reports", "a") as f:
            f.write(report.nodeid + "\\n")


def pytest_terminal_summary(terminalreporter):
    for line in LINES:
        terminalreporter.write_line("summary line: " + line)
"""

FILES = {
    "test_a.py": """
        import os, warnings
        import conftest

        def test_one():
            conftest.record("test_a.py")

        def test_two():
            conftest.record("test_a.py")
            conftest.LINES.append("from a")
            warnings.warn("a warning from the first child", UserWarning)
    """,
    "test_b.py": """
        import os, warnings
        import pytest
        import conftest

        def test_fails():
            conftest.record("test_b.py")
            print("shown on failure")
            assert 1 == 2

        def test_warns():
            conftest.record("test_b.py")
            conftest.LINES.append("from b")
            warnings.warn("a warning from the child", UserWarning)

        @pytest.mark.skip(reason="skipped here")
        def test_skipped():
            pass

        @pytest.mark.xfail(reason="expected")
        def test_xfails():
            assert False
    """,
}


def _pytest(tmp_path: Path, files: dict[str, str], *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    (tmp_path / "conftest.py").write_text(CONFTEST)
    for name, text in files.items():
        (tmp_path / name).write_text(textwrap.dedent(text))
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-rA", "-p", "no:cacheprovider", "--benchmark-disable", "-W", "default", *args, str(tmp_path)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        # buffered output, as in most shells (PYTHONUNBUFFERED would hide a lost or doubled buffer)
        env={**{k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}, "PIDS": str(tmp_path / "pids.txt"), **(env or {})},
    )


def _pids(tmp_path: Path) -> dict[str, set[str]]:
    """test file -> the ids of the processes that ran its tests (each test notes its own)."""
    pids: dict[str, set[str]] = {}
    for line in (tmp_path / "pids.txt").read_text().splitlines():
        name, pid = line.split()
        pids.setdefault(name, set()).add(pid)
    return pids


@pytest.mark.parametrize("budget", ["0", "100000"])
def test_files_run_in_children_and_report_as_pytest_does(tmp_path, budget):
    result = _pytest(tmp_path, FILES, "--child-memory", budget)
    out = result.stdout
    assert result.returncode == 1, out
    assert "1 failed, 3 passed, 1 skipped, 1 xfailed, 2 warnings" in out, out
    pids = _pids(tmp_path)
    assert len(pids["test_a.py"]) == 1 and len(pids["test_b.py"]) == 1, pids
    if budget == "0":  # a process per file
        assert pids["test_a.py"] != pids["test_b.py"], pids
    else:  # both files in one child
        assert pids["test_a.py"] == pids["test_b.py"], pids
    assert str(os.getpid()) not in pids["test_a.py"] | pids["test_b.py"]
    assert "FAILED test_b.py::test_fails - assert 1 == 2" in out
    # each child's warning reaches the warnings summary once: the first's is not sent back by the second
    assert out.count("UserWarning: a warning from the first child") == 1 and out.count("UserWarning: a warning from the child") == 1, out
    # a plugin that records reports (CI's outcomes) records each test once, in the parent
    recorded = (tmp_path / "pids.txt.reports").read_text().split()
    assert sorted(recorded) == sorted(set(recorded)) and len(recorded) == 6, recorded
    # the lines each child adds reach the parent's summary once: the second does not send back the first's
    assert out.count("summary line: from a") == 1 and out.count("summary line: from b") == 1, out


def test_a_child_that_passed_its_budget_starts_no_further_file(tmp_path):
    """A file that leaves 300 MB behind ends its child under a 200 MB budget; the next two share one."""
    files = {
        "test_a.py": "import conftest\n\nKEPT = []\n\ndef test_grows():\n    conftest.record('test_a.py')\n    KEPT.append(b'x' * (300 * 2**20))\n",
        "test_b.py": "import conftest\n\ndef test_small():\n    conftest.record('test_b.py')\n",
        "test_c.py": "import conftest\n\ndef test_small():\n    conftest.record('test_c.py')\n",
    }
    result = _pytest(tmp_path, files, "--child-memory", "200")
    assert "3 passed" in result.stdout, result.stdout
    pids = _pids(tmp_path)
    assert pids["test_a.py"] != pids["test_b.py"] == pids["test_c.py"], pids


def test_output_captured_in_the_child_is_shown_with_its_failure(tmp_path):
    out = _pytest(tmp_path, FILES).stdout
    assert "shown on failure" in out.split("Captured stdout call")[1].split("warnings summary")[0], out


def test_exitfirst_stops_after_the_first_failure_across_files(tmp_path):
    files = {"test_a.py": "def test_fails():\n    assert False\n", "test_b.py": "def test_never():\n    pass\n"}
    out = _pytest(tmp_path, files, "-x").stdout
    assert "1 failed in" in out and "test_never" not in out, out


def test_a_child_that_dies_fails_its_test_and_reports_the_rest_of_its_file_not_run(tmp_path):
    files = {
        "test_a.py": """
            import os, signal

            def test_before():
                pass

            def test_dies():
                os.kill(os.getpid(), signal.SIGKILL)

            def test_after():
                pass
        """,
        "test_b.py": "import conftest\n\ndef test_next_file_still_runs():\n    conftest.record('test_b.py')\n",
        "test_c.py": "import conftest\n\ndef test_and_the_one_after():\n    conftest.record('test_c.py')\n",
    }
    result = _pytest(tmp_path, files)  # the default budget: the three files would share a child
    out = result.stdout
    assert result.returncode == 1, out
    assert "2 failed, 3 passed" in out, out
    pids = _pids(tmp_path)
    assert pids["test_b.py"] == pids["test_c.py"], pids  # the files after it, in a new child
    assert "the process running test_a.py was killed by signal 9 during this test" in out, out
    assert "the process running test_a.py was killed by signal 9 before this test ran" in out, out


@pytest.mark.parametrize("how", ["option", "environment"])
def test_one_process_runs_every_file_in_pytests_own_process(tmp_path, how):
    args, env = (("--one-process",), None) if how == "option" else ((), {"INNERGRAPH_ONE_PROCESS": "1"})
    result = _pytest(tmp_path, FILES, *args, env=env)
    pids = _pids(tmp_path)
    assert len(pids["test_a.py"] | pids["test_b.py"]) == 1, pids
    assert "1 failed, 3 passed, 1 skipped, 1 xfailed, 2 warnings" in result.stdout
    assert "summary line: from a" in result.stdout


def test_under_capture_off_what_a_test_prints_appears_once(tmp_path):
    """``-s``: a child's print is written before it exits (``os._exit`` flushes nothing), and the parent's unwritten output is not written again by the child."""
    files = {"test_a.py": "import sys\n\ndef test_prints():\n    sys.stdout.write('printed by the child')\n", "test_b.py": "def test_quiet():\n    pass\n"}
    out = _pytest(tmp_path, files, "-s").stdout
    assert out.count("printed by the child") == 1, out
    assert out.count("test session starts") == 1, out
