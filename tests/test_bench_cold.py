"""The cold-start benchmark's parent alternates the variants model by model.

`innergraph_bench.cold` starts one child process per variant and measurement; drift on
the machine (another job starting, the CPU warming) touches whichever variant runs
later, so the parent puts vanilla first for one model and innergraph first for the
next. Checked with the child replaced by a recorder: no process is started.
"""

from typing import Any

from innergraph_bench import cold


def _recording(monkeypatch) -> list[tuple[str, ...]]:
    calls: list[tuple[str, ...]] = []

    def child(args: list[str], compiledir: str, python: str) -> dict[str, Any]:
        calls.append(tuple(args))
        return {"function": 1.0, "first_call": 1.0, "cold_start": 2.0, "total": 2.0}

    monkeypatch.setattr(cold, "_child", child)
    return calls


def test_cold_starts_alternate_which_variant_runs_first(monkeypatch):
    calls = _recording(monkeypatch)
    results = cold.cold_starts(["a", "b", "c"], log=lambda line: None)
    firsts = [args[2] for args in calls if args[0] == "where"]
    assert firsts == ["vanilla", "innergraph", "innergraph", "vanilla", "vanilla", "innergraph"]
    # each variant's three runs share its compile directory, in the order cold, edited, rerun
    assert [args[0] for args in calls[:3]] == ["where", "nuts", "nuts"] and calls[1][-1] == "--edited"
    assert [sorted(r.runs) for r in results] == [["innergraph", "vanilla"]] * 3


def test_sampling_runs_alternate_over_models_and_samplers(monkeypatch):
    calls = _recording(monkeypatch)
    results = cold.sampling_runs(["a", "b"], log=lambda line: None)
    variants = [(args[1], args[4], args[2]) for args in calls[::2]]  # the cold run of each pair
    assert variants == [
        ("a", "pymc", "vanilla"), ("a", "pymc", "innergraph"),
        ("a", "nutpie", "innergraph"), ("a", "nutpie", "vanilla"),
        ("b", "pymc", "vanilla"), ("b", "pymc", "innergraph"),
        ("b", "nutpie", "innergraph"), ("b", "nutpie", "vanilla"),
    ]
    assert [r.case for r in results] == ["a / pymc", "a / nutpie", "b / pymc", "b / nutpie"]
