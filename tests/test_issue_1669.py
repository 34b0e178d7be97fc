"""PyTensor issue #1669: derivatives of a 4-step ``y ** 2`` scan.

Vanilla PyTensor (3.0.7 and 3.3.8 alike) compiles the second derivative to 4 Scans, two of
them with alpha-equivalent backward bodies, and leaves an unused Scan output and a
constant sequence in the compiled graph; the third derivative gives 8 Scans. Vanilla is
PyTensor with innergraph uninstalled.
With innergraph both are fully clean (issue 6): no unused output or param, nothing
left to merge, fewer loops and strictly fewer nodes.
"""

import numpy as np
import pytensor
import pytensor.scalar as ps
import pytensor.tensor as pt
import pytest
from pytensor.compile.mode import get_default_mode
from pytensor.graph.fg import FunctionGraph
from pytensor.graph.rewriting.basic import MergeOptimizer
from pytensor.scan.op import Scan as NativeScan

import innergraph
from innergraph import graph_stats
from innergraph.core.fold import unfold_inner_graphs, visible_nodes
from typed import grad



def derivatives():
    x0 = pt.scalar("x0")
    ys = pytensor.scan(lambda y: y**2, outputs_info=[x0], n_steps=4, return_updates=False)
    h = grad(grad(ys[-1], x0), x0)
    return x0, h, grad(h, x0)


@pytest.fixture(scope="module")
def compiled():
    x0, h, h3 = derivatives()
    compiled = {(order, "innergraph"): pytensor.function([x0], out) for order, out in ((2, h), (3, h3))}
    with innergraph.uninstalled():
        compiled.update({(order, "vanilla"): pytensor.function([x0], out) for order, out in ((2, h), (3, h3))})
    return compiled


@pytest.mark.parametrize("order", [2, 3])
def test_values_are_identical(compiled, order):
    """Equal to the last bits or nearly: rewriting reassociates a few floating-point operations."""
    for x in (0.3, 1.1, -0.7):
        np.testing.assert_allclose(compiled[(order, "innergraph")](x), compiled[(order, "vanilla")](x), rtol=1e-13)


def test_second_derivative_shares_the_alpha_equivalent_backward_body(compiled):
    vanilla, ours = graph_stats(compiled[(2, "vanilla")]), graph_stats(compiled[(2, "innergraph")])
    # PyTensor 3.3 compares its frozen inner graphs: the two backward loops have one body there
    # too (4 loops, 3 bodies), but stay two loops
    assert vanilla["consumers"]["scan"] == 4 and vanilla["bodies"] == 3
    assert ours["consumers"]["scan"] == 3  # the two backward loops over the same steps merged
    assert ours["bodies"] == 3


def test_one_body_is_one_native_op_instance(compiled):
    fg = compiled[(2, "innergraph")].maker.fgraph
    ops = [n.op for n in fg.apply_nodes if isinstance(n.op, NativeScan)]
    assert len({id(op) for op in ops}) == graph_stats(compiled[(2, "innergraph")])["bodies"]


@pytest.mark.parametrize("order", [2, 3])
def test_fully_clean(compiled, order):
    """No unused consumer output or param, strictly fewer nodes than vanilla (outer + inner)."""
    vanilla, ours = graph_stats(compiled[(order, "vanilla")]), graph_stats(compiled[(order, "innergraph")])
    assert vanilla["unused_outputs"] >= 1  # what vanilla leaves: a mit-mot trace nobody reads
    assert ours["unused_outputs"] == 0 and ours["unused_params"] == 0
    assert ours["total_nodes"] < vanilla["total_nodes"]
    assert ours["consumers"]["scan"] < vanilla["consumers"]["scan"]


@pytest.mark.parametrize("order", [2, 3])
def test_no_duplicated_subexpression_inside_or_across_bodies(order):
    """In the compiled in-graph form (before lowering) no body node is left to merge, and no ``x + x``.

    (PyTensor 3.3's merge leaves an outer graph a few equal views over equal constants;
    those are not the bodies' and are not asserted on.)
    """
    x0, h, h3 = derivatives()
    fn = pytensor.function([x0], h if order == 2 else h3, mode=get_default_mode().excluding("innergraph_lower"))
    fg = FunctionGraph(fn.maker.fgraph.inputs, fn.maker.fgraph.outputs, clone=True)
    unfold_inner_graphs(fg)  # every body as nodes of one graph: params are shared objects, so
    hidden = set(fg.apply_nodes) - visible_nodes(fg)  # a subexpression two bodies both compute would merge here
    assert hidden
    MergeOptimizer().rewrite(fg)
    assert hidden <= set(fg.apply_nodes)
    for node in fg.apply_nodes:
        for inputs in _scalar_adds(node):
            assert len(set(inputs)) == len(inputs), f"{node} adds a value to itself"


def _scalar_adds(node):
    """Input lists of the additions a node performs (itself, or inside its Composite)."""
    scalar_op = getattr(node.op, "scalar_op", None)
    if isinstance(scalar_op, ps.Add):
        yield node.inputs
    if isinstance(scalar_op, ps.Composite):
        for inner in scalar_op.fgraph.apply_nodes:
            if isinstance(inner.op, ps.Add):
                yield inner.inputs
