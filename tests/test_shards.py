"""``INNERGRAPH_SHARD=K/N`` (tests/conftest.py): the shards of CI's second runs of the suite
(.ci/oldest, .ci/patched) partition the tests, the same way on every machine."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import _shard, in_shard

pytestmark = pytest.mark.repository_tools  # run once, on the newest PyTensor (pyproject.toml's markers)

ROOT = Path(__file__).parent.parent


def _collected(shard: str) -> list[str]:
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "tests/test_user_errors.py"],
        cwd=ROOT, env={**os.environ, "INNERGRAPH_SHARD": shard}, capture_output=True, text=True, timeout=600,
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    return [line for line in run.stdout.splitlines() if "::" in line]


def test_a_shard_collects_exactly_its_tests():
    everything, first = _collected(""), _collected("0/2")
    assert len(everything) > 10
    assert first == [t for t in everything if in_shard(t, 0, 2)]
    assert 0 < len(first) < len(everything)


def test_the_shards_partition_any_ids():
    ids = [f"tests/test_x.py::test_{i}[{j}]" for i in range(50) for j in range(3)]
    shards = [[t for t in ids if in_shard(t, k, 3)] for k in range(3)]
    assert sorted(sum(shards, [])) == sorted(ids)
    assert all(shards)


def test_a_file_whose_module_fixtures_compile_cold_goes_whole_to_one_shard():
    from conftest import WHOLE_FILES

    assert WHOLE_FILES
    for file in WHOLE_FILES:
        assert (ROOT / file).is_file(), file
        ids = [f"{file}::test_{i}[{j}]" for i in range(20) for j in range(3)]
        assert sum(any(in_shard(t, k, 3) for t in ids) for k in range(3)) == 1, file


@pytest.mark.parametrize("text", ["2/2", "a/2", "1", "-1/2"])
def test_a_malformed_shard_is_refused_by_name(text):
    with pytest.raises(pytest.UsageError, match=f"INNERGRAPH_SHARD={text!r}"):
        _shard(text)


def test_no_shard_keeps_everything():
    assert _shard("") is None


def test_a_pytest_that_a_test_starts_runs_whole():
    """A sharded session's tests do not pass their shard on (tests/test_numba_cache.py runs a pytest of one test)."""
    this = "tests/test_shards.py::test_the_environment_of_tests_holds_no_shard"
    k = next(k for k in range(2) if in_shard(this, k, 2))
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", this],
        cwd=ROOT, env={**os.environ, "INNERGRAPH_SHARD": f"{k}/2"}, capture_output=True, text=True, timeout=600,
    )
    assert run.returncode == 0 and "1 passed" in run.stdout, run.stdout[-2000:]


def test_the_environment_of_tests_holds_no_shard():
    assert "INNERGRAPH_SHARD" not in os.environ
