"""`graph_stats` on vanilla PyTensor graphs and on in-graph ones."""

import pytensor
import pytest
import pytensor.tensor as pt
from pytensor.compile.builders import OpFromGraph
from pytensor.graph.fg import FunctionGraph
from pytensor.ifelse import ifelse

import innergraph
from innergraph import graph_stats, inner_graph, unfold_inner_graphs
from typed import call, grad

x = pt.dvector("x")
a = pt.dscalar("a")


@pytest.mark.parametrize("mode", ["NUMBA", "CVM"])
def test_vanilla_scan_ifelse_and_opfromgraph_are_counted(mode):
    from pytensor.graph.op import HasMultipleInnerGraph

    ys = pytensor.scan(lambda y: y**2, outputs_info=[a], n_steps=4, return_updates=False)
    h = grad(grad(ys[-1], a), a)
    ofg = OpFromGraph([a], [a * 2, a * 3], inline=False).make_node(a).outputs[0]
    with innergraph.uninstalled():
        fn = pytensor.function([a], [h, ifelse(a > 0, a, -a), ofg], mode=mode)
    stats = graph_stats(fn)
    assert stats["consumers"]["scan"] == 4
    assert stats["consumers"]["ifelse"] == 1  # PyTensor's IfElse, or under Numba its LazyIfElse
    assert stats["consumers"]["call"] == 1
    # one body per distinct inner graph, compared as PyTensor compares its frozen graphs
    # (the Scans' inner graphs, the OpFromGraph's, and under Numba the LazyIfElse's two branches)
    inner = {g for n in fn.maker.fgraph.apply_nodes if isinstance(n.op, HasMultipleInnerGraph) for g in n.op.inner_graphs.values()}
    assert stats["bodies"] == len(inner) >= (6 if mode == "NUMBA" else 4)
    assert stats["hidden_nodes"] > 0
    assert stats["unused_outputs"] >= 2  # the OpFromGraph's second output, and vanilla's unused Scan output
    assert stats["outer_nodes"] == len(fn.maker.fgraph.apply_nodes)


def test_in_graph_counts_before_and_after_compilation():
    y1, y2 = call(lambda u, unused: [pt.exp(u) * 2, u + 1], x, a)
    fg = FunctionGraph([x, a], [y1], clone=True)
    before = graph_stats(fg)
    assert before["outer_nodes"] == 1
    assert before["hidden_nodes"] == 5  # exp, mul, add, and an ExpandDims per constant (2 and 1)
    assert before["total_nodes"] == 6
    assert before["bodies"] == 1
    assert before["consumers"] == {"scan": 0, "ifelse": 0, "call": 1, "loop": 0}
    assert before["unused_outputs"] == 1  # y2
    assert before["unused_params"] == 1  # `unused`
    fn = pytensor.function([x, a], y1, on_unused_input="ignore")
    after = graph_stats(fn)
    assert after["bodies"] == 1 and after["consumers"]["call"] == 1
    assert after["hidden_nodes"] <= before["hidden_nodes"]


def test_nested_bodies_are_counted_once_each():
    inner = inner_graph(lambda u: pt.sin(u), [pt.dvector])
    y = call(lambda u: call(inner, u) + call(inner, u * 2), x)
    stats = graph_stats(FunctionGraph([x], [y], clone=True))
    assert stats["bodies"] == 2
    assert stats["consumers"]["call"] == 3


def test_a_node_shared_by_two_bodies_counts_once():
    from pytensor.graph.rewriting.basic import MergeOptimizer

    y = call(lambda u: pt.exp(u) * 2, x) + call(lambda u: pt.exp(u) + 3, x)
    fg = FunctionGraph([x], [y], clone=True)
    unfold_inner_graphs(fg)  # as the rewrite pipeline does
    MergeOptimizer().rewrite(fg)
    stats = graph_stats(fg)
    assert stats["bodies"] == 2
    # exp(p0) is shared: exp, mul, add, and one ExpandDims per constant
    assert stats["hidden_nodes"] == 5
