"""Issue 7's benchmark cases (`innergraph_bench.cases`): vanilla PyTensor vs innergraph, same run.

Every case is compiled once per variant per module (`compiled`); the benchmarks
time a fresh compilation (``compile``), the first call of a fresh function
(``first``) and steady-state calls (``steady``), tagged with ``extra_info`` so the
conftest summary prints the ratios innergraph / vanilla. Under the default
``--benchmark-disable`` each runs once: a smoke test. The other tests here assert
behaviour, never speed: equal values, the bodies innergraph shares, and laziness
shown without timing (an ``Assert`` in every untaken branch).
Case 7 (per-step cost of a trivial scan) is `test_scan_step.py`.
"""

import numpy as np
import pytensor
import pytest

from innergraph import graph_stats
from innergraph_bench.bench import compile_case, compile_graph, fresh_graph
from innergraph_bench.cases import CASES, VARIANTS, ifelse_heavy

pytestmark = pytest.mark.repository_tools  # run once, on the newest PyTensor (pyproject.toml's markers)

MEASURED = [c for c in CASES if c.group != "7"]
BY_ID = {c.id: c for c in MEASURED}


@pytest.fixture(scope="module")
def compiled():
    """``compiled(case_id, variant) -> (function, first result)``, compiled once per module."""
    cache = {}

    def get(case_id, variant):
        if (case_id, variant) not in cache:
            fn = compile_case(BY_ID[case_id], variant)
            cache[case_id, variant] = fn, fn(*BY_ID[case_id].values)
        return cache[case_id, variant]

    return get


def tag(benchmark, case, variant, metric):
    benchmark.group = f"{case.id} {metric}"
    benchmark.extra_info.update(variant=variant, case=case.id, metric=metric)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("case_id", BY_ID)
def test_compile(benchmark, compiled, case_id, variant):
    case = BY_ID[case_id]
    compiled(case_id, variant)  # warm: the on-disk caches are filled for both variants alike
    tag(benchmark, case, variant, "compile")

    def setup():  # a new graph, built untimed, with no collection debt (bench.fresh_graph)
        return (case, variant, fresh_graph(case, variant)), {}

    fn = benchmark.pedantic(compile_graph, setup=setup, rounds=3, iterations=1)
    assert fn.maker.fgraph.outputs


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("case_id", BY_ID)
def test_first_call(benchmark, compiled, case_id, variant):
    case = BY_ID[case_id]
    _, expected = compiled(case_id, variant)
    tag(benchmark, case, variant, "first")
    result = benchmark.pedantic(
        lambda fn: fn(*case.values), setup=lambda: ((compile_case(case, variant),), {}), rounds=3, iterations=1
    )
    assert_same_results(result, expected, case)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("case_id", BY_ID)
def test_steady_call(benchmark, compiled, case_id, variant):
    case = BY_ID[case_id]
    fn, expected = compiled(case_id, variant)
    tag(benchmark, case, variant, "steady")
    benchmark.extra_info["stats"] = graph_stats(fn)
    result = benchmark(fn, *case.values)
    assert_same_results(result, expected, case)


def assert_same_results(result, expected, case):
    for got, want in zip(result, expected, strict=True):
        np.testing.assert_allclose(got, want, rtol=case.rtol)


# Behaviour (untimed) -------------------------------------------------------------------


@pytest.mark.parametrize("case_id", BY_ID)
def test_innergraph_matches_vanilla(compiled, case_id):
    case = BY_ID[case_id]
    (_, ours), (_, theirs) = compiled(case_id, "innergraph"), compiled(case_id, "vanilla")
    for got, want in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(got, want, rtol=case.rtol, atol=1e-12)


def stats(compiled, case_id, variant):
    return graph_stats(compiled(case_id, variant)[0])


@pytest.mark.parametrize("case_id", ["1669-d2", "1669-d3"])
def test_issue_1669_fewer_nodes_and_bodies(compiled, case_id):
    ours, theirs = stats(compiled, case_id, "innergraph"), stats(compiled, case_id, "vanilla")
    assert theirs["consumers"]["scan"] == {"1669-d2": 4, "1669-d3": 8}[case_id]
    assert ours["consumers"]["scan"] < theirs["consumers"]["scan"]
    assert ours["total_nodes"] < theirs["total_nodes"]
    # PyTensor 3.3 compares frozen inner graphs: its loops over alpha-equivalent bodies have one body too
    assert ours["bodies"] <= theirs["bodies"]


@pytest.mark.parametrize("k", [1, 2, 4, 8, 16])
def test_k_sequences_share_one_body(compiled, k):
    ours, theirs = stats(compiled, f"seqs-K{k}", "innergraph"), stats(compiled, f"seqs-K{k}", "vanilla")
    assert ours["consumers"]["scan"] == theirs["consumers"]["scan"] == k
    # Under Numba, K > 1 loops over one body are outlined with their scaffolding as one
    # call body, rewritten once, and inlined back after the fold (issue 22,
    # `innergraph.rewriting.outline_loops`): K native Scans of one Op, one body, no call.
    # PyTensor 3.3's K Scans have one (frozen, equal) inner graph too, rewritten K times
    assert (ours["bodies"], theirs["bodies"]) == (1, 1)
    assert ours["consumers"]["call"] == 0


@pytest.mark.parametrize("n_ops", [5, 50, 500])
def test_identical_scans_merge_into_one(compiled, n_ops):
    for variant in VARIANTS:  # PyTensor's Scan equality compares inner graphs, so vanilla merges them too
        assert stats(compiled, f"same-{n_ops}ops", variant)["consumers"]["scan"] == 1


@pytest.mark.parametrize("plain", [False, True], ids=["innergraph.ifelse", "pytensor.ifelse"])
def test_untaken_solves_never_run(plain):
    """Every solve first asserts it may run: it may not. innergraph's conditional is lazy, and so is
    PyTensor's own under Numba since 3.3.6 (its ``LazyIfElse``), with or without innergraph."""
    case = ifelse_heavy(size=50, guard=True, plain=plain)
    ours = compile_case(case, "innergraph")
    theirs = compile_case(case, "vanilla")
    assert np.isfinite(ours(*case.values)) and np.isfinite(theirs(*case.values))
    taken = (case.values[0], case.values[1], np.float64(-1.0))  # the solves are taken, and allowed to run
    np.testing.assert_allclose(ours(*taken), theirs(*taken), rtol=1e-10)


def test_the_pipeline_lifts_plain_opfromgraphs(compiled):
    ours, theirs = stats(compiled, "ofg-unused", "innergraph"), stats(compiled, "ofg-unused", "vanilla")
    assert (ours["unused_outputs"], theirs["unused_outputs"]) == (0, 1)  # PyTensor #697
    assert ours["total_nodes"] < theirs["total_nodes"]
    ours, theirs = stats(compiled, "student-t-ofg-K8", "innergraph"), stats(compiled, "student-t-ofg-K8", "vanilla")
    assert ours["consumers"]["call"] == 16  # 8 call sites and their pullbacks
    vanilla_fn = compiled("student-t-ofg-K8", "vanilla")[0]
    assert len([n for n in vanilla_fn.maker.fgraph.apply_nodes if type(n.op).__name__ == "OpFromGraph"]) == 16
    # PyTensor 3.3's frozen inner graphs are shared already (one per distinct graph: its 16 OpFromGraphs, two
    # bodies), so the bodies tie; its fused kernels are nodes, not bodies (`innergraph.stats`)
    assert ours["bodies"] == theirs["bodies"] == 2 and ours["total_nodes"] < theirs["total_nodes"]
    assert ours["unused_outputs"] == ours["unused_params"] == 0
