"""``python -m innergraph_bench.cold``: ``--edited`` reaches every command (issue 49: ``where`` ignored it silently).

PyMC is not in the project's environment: the child's model building is replaced and
``import pymc`` finds a stand-in; what is checked is what the command line passes on.
"""

import json
import types

import pytest

from innergraph_bench import cold

pytestmark = pytest.mark.repository_tools  # run once, on the newest PyTensor (pyproject.toml's markers)


@pytest.fixture
def no_pymc(monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "pymc", types.ModuleType("pymc"))


@pytest.mark.parametrize("edited", [False, True])
def test_where_and_nuts_pass_edited_on(no_pymc, monkeypatch, capsys, edited):
    seen = []

    def nuts(case, edited, steady_calls):
        seen.append(edited)
        return {"first_call": 1.0}

    monkeypatch.setattr(cold, "nuts_figures", nuts)
    for what in ("where", "nuts"):
        assert cold.main([what, "pymc-garch-potential", "vanilla", *(["--edited"] if edited else [])]) == 0
        assert json.loads(capsys.readouterr().out.splitlines()[-1])["case"] == "pymc-garch-potential"
    assert seen == [edited, edited]


def test_sample_builds_the_edited_model(no_pymc, monkeypatch):
    class Built(Exception):
        pass

    def build(case, edited=False):
        raise Built(edited)

    monkeypatch.setattr(cold.pymc_models, "build", build)
    with pytest.raises(Built) as built:
        cold.main(["sample", "pymc-garch-potential", "vanilla", "--edited"])
    assert built.value.args == (True,)


def test_each_child_reports_its_peak_memory_and_the_report_its_ratio(no_pymc, monkeypatch, capsys):
    monkeypatch.setattr(cold, "nuts_figures", lambda case, edited, steady_calls: {"first_call": 1.0})
    assert cold.main(["nuts", "pymc-garch-potential", "vanilla"]) == 0
    peak = json.loads(capsys.readouterr().out.splitlines()[-1])["peak_mb"]
    assert 10 < peak < 100_000  # this process, in megabytes
    figures = {"function": 1.0, "first_call": 2.0, "cold_start": 3.0, "steady": 1e-3}
    result = cold.ColdResult("m", {"vanilla": {"cold": {**figures, "peak_mb": 800.0}},
                                   "innergraph": {"cold": {**figures, "peak_mb": 600.0}}})
    row = cold.cold_report([result])[2]
    assert row.endswith("| 800 → 600 MB | 0.75 |"), row
