"""`innergraph_bench.cache_stress`: its damager, its judge and its child, without a whole stress run.

The stress run itself takes minutes per round (`design/numba-linking.md`, "Damaging everything
at once", has its figures); these check the parts it trusts.
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np

from innergraph_bench.cache_stress import DAMAGED_SUFFIXES, Outcome, _outcome, damage_one, judge, run_child


def test_the_damager_changes_only_cache_files_and_each_one_it_names(tmp_path: Path) -> None:
    (tmp_path / "numba").mkdir()
    kept = tmp_path / "numba" / "notes.txt"
    kept.write_bytes(b"x" * 200)
    cache = {suffix: tmp_path / "numba" / f"f{suffix}" for suffix in DAMAGED_SUFFIXES}
    for path in cache.values():
        path.write_bytes(bytes(range(200)))
    rng = random.Random(0)
    names = {damage_one(tmp_path, rng) for _ in range(30)}
    assert names == {path.name for path in cache.values()}
    assert all(path.read_bytes() != bytes(range(200)) for path in cache.values())
    assert kept.read_bytes() == b"x" * 200
    assert damage_one(tmp_path / "numba" / "nothing-here", rng) is None


def test_the_judge_accepts_vanillas_values_only() -> None:
    reference = [[1.0, 2.0], [[0.5]], 3.0]
    assert judge(Outcome([[1.0, 2.0], [[0.5]], 3.0], None, ["a warning"]), reference) is None
    assert "output 1" in str(judge(Outcome([[1.0, 2.0], [[0.5000001]], 3.0], None), reference))
    assert "output 0" in str(judge(Outcome([[1.0, 2.0, 0.0], [[0.5]], 3.0], None), reference))
    assert "2 outputs" in str(judge(Outcome([[1.0, 2.0], [[0.5]]], None), reference))
    assert judge(Outcome(None, "Traceback: boom"), reference) == "Traceback: boom"


def test_the_child_computes_the_model_under_the_python_linker(tmp_path: Path) -> None:
    outcome = _outcome(run_child(tmp_path, "python", 1.5))
    assert outcome.error is None and outcome.value is not None
    last, gradient, called = (np.asarray(v) for v in outcome.value)
    assert last.shape == gradient.shape == (4,) and called.shape == ()
    assert np.all(np.isfinite(last)) and np.all(np.isfinite(gradient))
