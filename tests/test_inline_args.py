"""``innergraph_inline_args``: constant arguments reach canonicalize inside lifted bodies.

The pattern of pymc-extras' Kalman filters (issue 21): a loop multiplies by a
constant *selection matrix* ``S = eye(4)[:, :3]`` passed as a non-sequence.
PyTensor inlines the constant into the Scan's inner graph before rewriting it, and
``selection_dot_to_indexing`` turns ``dot(x, S)`` into ``x[:3]``. Before this pass
innergraph lifted the Scan with ``S`` still a param and inlined it only after
canonicalize, so the loop kept a matrix product per step.
"""

from typing import Any

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.compile.mode import Mode
from pytensor.scan.op import Scan
from pytensor.tensor.math import Dot

from innergraph.rewriting.inline_args import inline_lifted_arguments
from vanilla import vanilla_function

SELECTION = np.eye(4)[:, :3]


def _graph() -> tuple[list, Any]:
    xs, h0, s = pt.dmatrix("xs"), pt.dvector("h0"), pt.dmatrix("s")
    hs = pytensor.scan(
        lambda x, h, s: pt.tanh(pt.dot(x, s) + 0.5 * h),
        sequences=[xs],
        outputs_info=[h0],
        non_sequences=[s],
        return_updates=False,
    )
    # The selection becomes a constant after the loop was built, as PyMC's graph
    # replacements make it: the Scan then reads it as a constant non-sequence
    # (``pytensor.scan`` itself would have moved a constant into the inner graph).
    return [xs, h0], pytensor.graph.replace.graph_replace(hs, {s: pt.constant(SELECTION)})


MODE = Mode(linker="cvm", optimizer="fast_run")
VARIANTS = {
    "innergraph": MODE,
    "innergraph, pass excluded": MODE.excluding("innergraph_inline_args"),
    "innergraph, PyTensor's tag excluded": MODE.excluding("scan_inline_invariant_constants"),
}


@pytest.fixture(scope="module")
def compiled():
    made = {name: pytensor.function(*_graph(), mode=mode) for name, mode in VARIANTS.items()}
    made["vanilla"] = vanilla_function(_graph, MODE)  # built and compiled with innergraph uninstalled
    return made


def _loop_ops(fn):
    (scan,) = [n for n in fn.maker.fgraph.apply_nodes if isinstance(n.op, Scan)]
    return sorted(type(n.op).__name__ for n in scan.op.fgraph.apply_nodes)


#: The Ops a matrix product is compiled to (the C linker's BLAS forms included).
PRODUCTS = {"Dot", "Dot22", "Gemv", "Gemm", "Dot22Scalar", "Ger"}


def test_selection_product_becomes_indexing_as_in_vanilla(compiled):
    for name in ("vanilla", "innergraph"):
        ops = _loop_ops(compiled[name])
        assert not PRODUCTS & set(ops) and "Subtensor" in ops, (name, ops)
        assert len(ops) <= 5, (name, ops)  # the loop is the indexing, the shape checks and one Composite


def test_without_the_pass_the_loop_keeps_the_product(compiled):
    # what innergraph compiled before the pass; PyTensor's tag turns the pass off too
    for name in ("innergraph, pass excluded", "innergraph, PyTensor's tag excluded"):
        ops = _loop_ops(compiled[name])
        assert PRODUCTS & set(ops) and "Subtensor" not in ops, (name, ops)


def test_values_equal_vanilla(compiled):
    rng = np.random.default_rng(0)
    args = rng.normal(size=(7, 4)), rng.normal(size=3)
    expected = compiled["vanilla"](*args)
    for name, fn in compiled.items():
        np.testing.assert_allclose(fn(*args), expected, rtol=1e-14, err_msg=name)


def test_graph_without_consumers_is_left_alone():
    from pytensor.graph.fg import FunctionGraph

    x = pt.dvector("x")
    fgraph = FunctionGraph([x], [pt.dot(x, pt.constant(SELECTION))], clone=False)
    assert inline_lifted_arguments(fgraph) == 0
    assert any(isinstance(n.op, Dot) for n in fgraph.apply_nodes)


def _loops(k: int) -> tuple[list, list]:
    """``k`` loops of one step over their own sequences, each reading the selection as a constant non-sequence."""
    xs, h0, s = [pt.dmatrix(f"xs{i}") for i in range(k)], pt.dvector("h0"), pt.dmatrix("s")
    step = lambda x, h, s: pt.tanh(pt.dot(x, s) + 0.5 * h)  # noqa: E731
    outs = [pytensor.scan(step, sequences=[x], outputs_info=[h0], non_sequences=[s], return_updates=False) for x in xs]
    return [*xs, h0], pytensor.graph.replace.graph_replace(outs, {s: pt.constant(SELECTION)})


@pytest.mark.parametrize("k, merges", [(2, 1), (1, 0)], ids=["two consumers of one body", "one consumer"])
def test_consumers_rebuilt_alike_read_one_body_after_one_merge(k, merges, monkeypatch):
    from pytensor.graph.fg import FunctionGraph
    from pytensor.graph.rewriting.basic import MergeOptimizer

    from innergraph.rewriting import inline_args
    from innergraph.rewriting.lift import lift_native
    from innergraph.stats import graph_stats

    fgraph = FunctionGraph(*_loops(k), clone=True)
    assert lift_native(fgraph) == k and graph_stats(fgraph)["bodies"] == 1
    runs = []

    class Counting(MergeOptimizer):
        def rewrite(self, fgraph, *args, **kwargs):
            runs.append(len(fgraph.apply_nodes))
            return super().rewrite(fgraph, *args, **kwargs)

    monkeypatch.setattr(inline_args, "MergeOptimizer", Counting)
    assert inline_lifted_arguments(fgraph) == k
    # the rebuilt consumers' new bodies are one body only after a merge, which costs a walk of the
    # graph: run once when two or more consumers were rebuilt, never for one
    assert len(runs) == merges
    assert graph_stats(fgraph)["bodies"] == 1
    assert inline_lifted_arguments(fgraph) == 0 and len(runs) == merges  # nothing left to inline: no merge
