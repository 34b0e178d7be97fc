"""A grouped PyMC model (K GARCH groups, one ``pytensor.scan`` each): its loops batched, vanilla's numbers.

The model of issue 39 (`innergraph_bench.pymc_models.garch_groups`): PyMC's NUTS
function under Numba compiles K forward loops and K gradient loops. innergraph makes
them one forward and one gradient loop whose step is the step once, vectorised over
the K groups (`innergraph.rewriting.batch_loops`); vanilla's ``scan_merge`` makes one
Scan holding K copies of the step. The values must be vanilla's. Also the
cold-start child of the benchmarks (`innergraph_bench.cold`), once per variant, on
the smallest loop model: its figures are there and both variants agree.
"""

import functools
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from pytensor.scan.op import Scan

import innergraph
from innergraph_bench import cold, pymc_models

K = 8


@functools.cache
def _compiled(variant):
    """The grouped model's NUTS function under Numba, and its value and gradient at the case's point."""
    from pymc.pytensorf import compile as pymc_compile

    def build():
        (inputs, outputs), point = pymc_models.nuts_graph(pymc_models.garch_groups(K))
        fn = pymc_compile(inputs, outputs, mode="NUMBA")
        return fn, [np.array(v) for v in fn(point)]

    if variant == "vanilla":
        with innergraph.uninstalled():
            return build()
    return build()


def test_the_grouped_model_gives_vanillas_value_and_gradient():
    (_, expected), (_, got) = _compiled("vanilla"), _compiled("innergraph")
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_allclose(g, e, rtol=1e-10, atol=1e-12)


def test_the_k_loops_are_one_forward_and_one_gradient_loop_over_the_step_once():
    fn, _ = _compiled("innergraph")
    scans = [n for n in fn.maker.fgraph.apply_nodes if isinstance(n.op, Scan)]
    assert len(scans) == 2
    for node in scans:
        assert node.op.info.n_sit_sot + node.op.info.n_untraced_sit_sot <= 4  # one state per kind, not K
        inner = node.op.fgraph.apply_nodes
        assert len(inner) <= 2  # the step once (fused): vanilla's merged Scan holds K copies
        assert all(getattr(v.type, "shape", ())[:1] == (K,) for v in node.op.fgraph.outputs)
    vanilla, _ = _compiled("vanilla")
    native = [n for n in vanilla.maker.fgraph.apply_nodes if isinstance(n.op, Scan)]
    assert len(native) == 2 and all(len(n.op.fgraph.apply_nodes) == K for n in native)


def test_the_cold_start_child_reports_both_variants_on_empty_caches():
    (result,) = cold.cold_starts(["pymc-garch-potential"], edited=True, python=sys.executable, log=lambda *_: None)
    for variant in ("vanilla", "innergraph"):
        for run in ("cold", "edited"):
            figures = result.runs[variant][run]
            assert figures["function"] > 0 and figures["first_call"] > 0 and figures["steady"] > 0
            assert np.isfinite(figures["logp"])
    for variant in ("vanilla", "innergraph"):  # the unchanged model again, on the cache the runs before left
        assert result.runs[variant]["rerun"]["logp"] == pytest.approx(result.runs[variant]["cold"]["logp"], rel=1e-12)
    cold_logp = [result.runs[v]["cold"]["logp"] for v in ("vanilla", "innergraph")]
    edited_logp = [result.runs[v]["edited"]["logp"] for v in ("vanilla", "innergraph")]
    assert cold_logp[0] == pytest.approx(cold_logp[1], rel=1e-10)
    assert edited_logp[0] == pytest.approx(edited_logp[1], rel=1e-10)
    assert edited_logp[0] != pytest.approx(cold_logp[0], rel=1e-6)  # the edit changed the model
    table = cold.cold_report([result])
    assert "pymc-garch-potential" in table[2] and table[3] == ""  # one row of cold starts
    where = [row for row in table if row.startswith("| pymc-garch-potential |")][1:]
    assert [row.split(" | ")[1] for row in where] == ["vanilla", "innergraph"]  # where each one's cold start went
    for variant in ("vanilla", "innergraph"):
        figures = result.runs[variant]["cold"]
        assert figures["numba_functions"] > 0 and 0 < figures["loops"] < figures["first_call"]
        assert 0 < figures["llvm"] < figures["first_call"]


def test_an_edited_model_compiles_no_numba_function(tmp_path):
    """After one prior's scale changed, innergraph's function comes from Numba's disk cache; vanilla's is compiled again."""
    compiled = {}
    for variant in ("vanilla", "innergraph"):
        compiledir = tmp_path / variant
        for edited in ("", "--edited"):
            out = tmp_path / f"{variant}{edited}.json"
            env = {**os.environ, **cold.THREADS, "PYTENSOR_FLAGS": f"base_compiledir={compiledir}"}
            args = [sys.executable, "-m", "innergraph_bench.numba_time", "pymc-garch-potential", variant, "--out", str(out)]
            subprocess.run([*args, *([edited] if edited else [])], env=env, check=True, capture_output=True)
            compiled[variant, edited] = json.loads(out.read_text())
    assert compiled["innergraph", "--edited"]["records"] == []
    assert compiled["vanilla", "--edited"]["records"]  # the outer function at least
    for edited in ("", "--edited"):
        assert compiled["innergraph", edited]["logp"] == pytest.approx(compiled["vanilla", edited]["logp"], rel=1e-12)


def test_an_unchanged_model_in_a_new_process_takes_its_rewritten_graph_from_the_store(tmp_path):
    """The second process rewrites nothing (the store of rewritten graphs) and compiles no Numba function.

    A hit that lost innergraph's mark on the graph (that its pipeline rewrote it) had the linker
    convert equal nodes separately: the same cache keys over other source, so Numba compiled the
    final function and two fused loops again (found on the GARCH model, 2026-12-01).
    """
    env = {**os.environ, **cold.THREADS, "PYTENSOR_FLAGS": f"base_compiledir={tmp_path / 'compiledir'}"}
    runs = []
    for n in range(2):
        out = tmp_path / f"run{n}.json"
        args = [sys.executable, "-m", "innergraph_bench.numba_time", "pymc-garch-potential", "innergraph", "--out", str(out)]
        subprocess.run(args, env=env, check=True, capture_output=True)
        runs.append(json.loads(out.read_text()))
    assert list((tmp_path / "compiledir").rglob("innergraph_rewritten/*.graph"))
    assert runs[0]["records"] and runs[1]["records"] == []
    # the first process compiled its code, the second loads it: under fastmath not bit for bit (design/testing.md, "Tolerances")
    assert runs[1]["logp"] == pytest.approx(runs[0]["logp"], rel=1e-12)
