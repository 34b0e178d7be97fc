"""Structural tests: merging bodies, rewriting them in the outer pipeline."""

from typing import Any

import numpy as np
import pytensor
import pytensor.scalar as ps
import pytensor.tensor as pt
import pytest
from pytensor.compile.mode import Mode, get_mode
from pytensor.graph.basic import NominalVariable
from pytensor.graph.fg import FunctionGraph
from pytensor.graph.rewriting.basic import MergeOptimizer
from pytensor.tensor.variable import TensorConstant

from innergraph import body_of, graph_stats, inner_graph, param, unfold_inner_graphs
from innergraph import ifelse as innergraph_ifelse
from innergraph.core.graph import scope_toposort, verify_closed
from innergraph.core.fold import folded_bodies
from typed import call, grad as grad_of

dvector = pt.dvector().type
fvector = pt.fvector().type


def merged(*outputs):
    fg = FunctionGraph(outputs=list(outputs), clone=True)
    MergeOptimizer().rewrite(fg)
    return fg


def test_alpha_equivalent_bodies_built_separately_merge_to_one_object():
    f1 = inner_graph(lambda u, v: pt.exp(u) * v + 1, [dvector, dvector]).function
    f2 = inner_graph(lambda p, q: pt.exp(p) * q + 1, [pt.dvector("other"), pt.dvector("names")]).function
    assert f1 is not f2
    fg = merged(f1, f2)
    assert fg.outputs[0] is fg.outputs[1]


@pytest.mark.parametrize(
    "variant",
    [
        lambda u, v: pt.log(u) * v + 1,  # op
        lambda u, v: pt.exp(u) * v + 2,  # constant value
        lambda u, v: pt.exp(v) * u + 1,  # param order
    ],
    ids=["op", "constant", "param-order"],
)
def test_bodies_that_differ_do_not_merge(variant):
    f1 = inner_graph(lambda u, v: pt.exp(u) * v + 1, [dvector, dvector]).function
    f2 = inner_graph(variant, [dvector, dvector]).function
    fg = merged(f1, f2)
    assert fg.outputs[0] is not fg.outputs[1]


@pytest.mark.parametrize(
    "types",
    [
        [fvector, fvector],
        [pt.dmatrix().type, dvector],
        [pt.TensorType("float64", shape=(1,)), dvector],
        [pt.TensorType("float64", shape=(3,)), dvector],
    ],
    ids=["dtype", "ndim", "broadcastable", "static-shape"],
)
def test_bodies_with_other_param_types_do_not_merge(types):
    f1 = inner_graph(lambda u, v: u * v, [dvector, dvector]).function
    f2 = inner_graph(lambda u, v: u * v, types).function
    fg = merged(f1, f2)
    assert fg.outputs[0] is not fg.outputs[1]


def test_consumers_of_merged_bodies_merge():
    x, y = pt.dvector("x"), pt.dvector("y")
    c1 = call(lambda u, v: u * v + 1, x, y)
    c2 = call(lambda a, b: a * b + 1, x, y)
    fg = merged(c1, c2)
    assert fg.outputs[0] is fg.outputs[1]
    assert graph_stats(fg)["consumers"]["call"] == 1


def test_fast_run_canonicalizes_a_body_in_the_outer_graph():
    x = pt.dvector("x")
    ours = pytensor.function([x], call(lambda u: u * 1 + 0, x), mode="FAST_RUN")
    without_forwarding = pytensor.function(
        [x], call(lambda u: u * 1 + 0, x), mode=get_mode("FAST_RUN").excluding("innergraph_simplify")
    )
    stats = graph_stats(without_forwarding)
    assert stats["bodies"] == 1
    assert stats["hidden_nodes"] == 0  # `u * 1 + 0` became `u` itself
    (body_constant,) = [
        v for n in without_forwarding.maker.fgraph.apply_nodes for v in n.inputs if hasattr(v, "data") and hasattr(v.data, "outputs")
    ]
    assert body_constant.data.outputs[0] is param(0, dvector)
    # ... and then forwarding makes the call that returns its argument the argument itself
    assert graph_stats(ours)["bodies"] == 0 and graph_stats(ours)["consumers"]["call"] == 0


def test_body_subexpression_shared_across_bodies_and_with_twins():
    x, y = pt.dvector("x"), pt.dvector("y")
    out1 = call(lambda u: pt.exp(u) * 2, x)
    out2 = call(lambda u: pt.exp(u) + 3, y)
    fg = FunctionGraph([x, y], [out1, out2], clone=True)
    unfold_inner_graphs(fg)  # as the rewrite pipeline does
    MergeOptimizer().rewrite(fg)
    b1, b2 = (body_of(o.owner.inputs[0]) for o in fg.outputs)
    exp1 = [n for n in scope_toposort(b1.outputs) if _is_exp(n)]
    exp2 = [n for n in scope_toposort(b2.outputs) if _is_exp(n)]
    assert len(exp1) == 1 and exp1[0] is exp2[0]  # one `exp(p0)` node serves both bodies


def test_unfolding_shares_what_merging_would_merge():
    # Four branch bodies built separately, each with its own constants: unfolding
    # them copies each distinct node once and each small constant once, reusing the
    # outer graph's equal constant, so the merge after it has nothing left to do.
    x, b = pt.dscalar("x"), pt.dvector("b")
    positive = x > 0
    outs: list[Any] = [innergraph_ifelse(positive, (b * x).sum() + i, (b * 2.0).sum()) for i in range(4)]
    outer_two = pt.constant(2.0)
    fg = FunctionGraph([x, b], [*outs, b * outer_two], clone=False)
    bodies = [body for _, body in folded_bodies(fg.outputs)]
    assert unfold_inner_graphs(fg) == 8
    n_unfolded = len(fg.apply_nodes)
    MergeOptimizer().rewrite(fg)
    assert len(fg.apply_nodes) == n_unfolded  # nothing left to merge
    then_bodies = [body_of(o.owner.inputs[1]) for o in outs]
    sums = {n for bd in then_bodies for n in scope_toposort(bd.outputs) if isinstance(n.op, pt.elemwise.CAReduce)}
    assert len(sums) == 1  # `sum(p0 * p1)` is one node in all four bodies
    else_functions = {o.owner.inputs[2] for o in outs}
    assert len(else_functions) == 1  # four equal else bodies: one function variable
    twos = {v for n in fg.apply_nodes for v in n.inputs if isinstance(v, TensorConstant) and v.type == outer_two.type and v.data == 2}
    assert twos == {outer_two}
    for body in bodies:  # the user's bodies are copied, never imported
        assert not set(scope_toposort(body.outputs)) & set(fg.apply_nodes)
    fn = pytensor.function([x, b], outs, mode=get_mode("FAST_RUN"))
    np.testing.assert_allclose(fn(1.5, np.arange(3.0)), [4.5 + i for i in range(4)])


def _is_exp(node):
    return isinstance(getattr(node.op, "scalar_op", None), ps.Exp)


def test_fast_run_leaves_hidden_nodes_non_destructive():
    x, a = pt.dvector("x"), pt.dscalar("a")
    fn = pytensor.function([x, a], call(lambda u, b: pt.exp(u) * 1 + b + 0, x, a), mode="FAST_RUN")
    body = next(v.data for n in fn.maker.fgraph.apply_nodes for v in n.inputs if hasattr(v, "data") and hasattr(v.data, "outputs"))
    nodes = scope_toposort(body.outputs)
    assert nodes, "the fused body should still be there"
    assert all(not getattr(n.op, "destroy_map", {}) for n in nodes)
    assert all(isinstance(v, NominalVariable) for n in nodes for v in n.inputs if v.owner is None and not hasattr(v, "data"))
    assert fn([0.0, 1.0], 2.0) == pytest.approx([3.0, 2.718281828459045 + 2])


def test_fusion_stays_within_each_body():
    # A body and its gradient body share subexpressions after merging; PyTensor's
    # fusion over both at once would build one Composite reading params of both.
    x, mu = pt.dvector("x"), pt.dscalar("mu")
    y = call(lambda u, m: pt.log1p(((u - m) * 2) ** 2).sum(), x, mu)
    fn = pytensor.function([x, mu], [y, grad_of(y, mu)], mode="FAST_RUN")
    bodies = folded_bodies(fn.maker.fgraph.outputs)
    assert len(bodies) == 2
    for _, body in bodies:
        verify_closed(body.type, body.outputs)
        ops = [n.op for n in scope_toposort(body.outputs)]
        assert any(isinstance(getattr(op, "scalar_op", None), ps.Composite) for op in ops)
    xv = np.array([0.5, -1.0, 2.0])
    value, grad = fn(xv, 0.3)
    assert value == pytest.approx(np.log1p(((xv - 0.3) * 2) ** 2).sum())
    assert grad == pytest.approx(np.sum(-8 * (xv - 0.3) / (1 + 4 * (xv - 0.3) ** 2)))


def test_a_body_takes_its_own_inplace_decisions_when_compiled():
    from innergraph.protocol import runtime

    x = pt.dvector("x")
    # `cumsum(u)` is an intermediate the body owns: its own compile may overwrite it in place.
    fn = pytensor.function([x], call(lambda u: pt.cumsum(u) * 2, x), mode=Mode(linker="cvm", optimizer="fast_run"))
    ((_, body),) = folded_bodies(fn.maker.fgraph.outputs)
    assert not any(getattr(n.op, "destroy_map", {}) for n in scope_toposort(body.outputs))
    compiled = runtime.compiled_function(body, "cvm")
    assert any(n.op.destroy_map for n in compiled.maker.fgraph.apply_nodes)
    np.testing.assert_allclose(fn(np.array([1.0, 2.0])), [2.0, 6.0])
