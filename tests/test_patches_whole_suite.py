"""PyTensor's whole suite on the written steps (`innergraph_patches.whole_suite`): which files, which judge."""

import json
import sys
from pathlib import Path

import pytest

from innergraph_patches import whole_suite

pytestmark = pytest.mark.repository_tools


def test_every_test_file_of_the_tree_is_taken():
    files = whole_suite.test_files()
    on_disk = sorted(str(p.relative_to(whole_suite._TREE)) for p in (whole_suite._TREE / "tests").rglob("test_*.py"))
    assert files == on_disk
    assert len(files) > 250
    assert {"tests/scan/test_basic.py", "tests/tensor/test_basic.py", "tests/benchmarks/test_compilation.py"} <= set(files)


def test_the_first_step_brings_its_own_test_file():
    assert whole_suite.own_tests(1) == ["tests/link/numba/test_cache.py"]
    assert not (whole_suite._TREE / "tests/link/numba/test_cache.py").exists()  # so it is run on its own, not judged


def _record(folder, test_file, outcomes):
    records = folder / "records"
    records.mkdir(parents=True, exist_ok=True)
    path = whole_suite._record_path(folder, test_file)
    lines = [{"kind": "session", "session": test_file, "args": [test_file]}]
    lines += [{"kind": "test", "session": test_file, "id": f"{test_file}::{name}", "outcome": outcome} for name, outcome in outcomes.items()]
    lines.append({"kind": "finish", "session": test_file, "exitstatus": 0, "wall": 1.0, "innergraph": False})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    path.with_suffix(".done").write_text("1\n")


def test_a_regression_fails_and_a_file_done_in_one_variant_is_not_judged(tmp_path):
    vanilla, steps = tmp_path / "vanilla", tmp_path / "steps-1-1"
    _record(vanilla, "tests/a/test_x.py", {"test_one": "passed", "test_two": "xfailed", "test_own": "failed"})
    _record(steps, "tests/a/test_x.py", {"test_one": "passed", "test_two": "xfailed", "test_own": "failed"})
    _record(vanilla, "tests/a/test_y.py", {"test_three": "passed"})  # the steps have not run it yet
    files = ["tests/a/test_x.py", "tests/a/test_y.py"]
    same, text = whole_suite.compare_records(tmp_path, 1, files)
    assert same, text
    assert "1 of 2 test files run in both variants" in text
    assert "steps-1-1 keeps vanilla's outcome for every test" in text
    assert "vanilla's own failures, same with steps-1-1 (1, not judged)" in text and "innergraph" not in text

    _record(steps, "tests/a/test_y.py", {"test_three": "failed"})
    same, text = whole_suite.compare_records(tmp_path, 1, files)
    assert not same
    assert "regressed" in text and "tests/a/test_y.py::test_three" in text


def test_a_file_run_through_run_sh_is_recorded_test_by_test_and_marked_done(tmp_path):
    """`run_variant` with run.sh's real settings (`verify.upstream_env`): one small file, this environment's PyTensor."""
    test_file = "tests/assumptions/test_alloc.py"
    whole_suite.run_variant(tmp_path, "vanilla", Path(sys.executable), [test_file], timeout=600)
    record = whole_suite._record_path(tmp_path / "vanilla", test_file)
    assert record.with_suffix(".done").is_file()
    lines = [json.loads(line) for line in record.read_text().splitlines()]
    tests = [line for line in lines if line["kind"] == "test"]
    assert len(tests) > 10 and all(t["id"].startswith(test_file + "::") for t in tests)
    assert {t["outcome"] for t in tests} == {"passed"}
    finish = [line for line in lines if line["kind"] == "finish"]
    assert finish and finish[0]["innergraph"] is False  # the harness imported no innergraph
    assert (tmp_path / "vanilla" / "compiledir").is_dir()  # its own compile directory
