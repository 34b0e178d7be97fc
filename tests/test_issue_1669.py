"""PyTensor issue #1669: derivatives of a 4-step ``y ** 2`` scan.

Vanilla PyTensor 3.0.7 compiles the second derivative to 4 Scans, two of them with
alpha-equivalent backward bodies compiled separately; the third derivative gives 8.
"""

import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.compile.mode import get_default_mode
from pytensor.scan.op import Scan as NativeScan

from innergraph import graph_stats

VANILLA = get_default_mode().excluding("innergraph")


def derivatives():
    x0 = pt.scalar("x0")
    ys = pytensor.scan(lambda y: y**2, outputs_info=[x0], n_steps=4, return_updates=False)
    h = pytensor.grad(pytensor.grad(ys[-1], x0), x0)
    return x0, h, pytensor.grad(h, x0)


@pytest.fixture(scope="module")
def compiled():
    x0, h, h3 = derivatives()
    return {
        (order, name): pytensor.function([x0], out, mode=mode)
        for order, out in ((2, h), (3, h3))
        for name, mode in (("vanilla", VANILLA), ("innergraph", get_default_mode()))
    }


@pytest.mark.parametrize("order", [2, 3])
def test_values_are_identical(compiled, order):
    for x in (0.3, 1.1, -0.7):
        assert compiled[(order, "innergraph")](x) == compiled[(order, "vanilla")](x)


def test_second_derivative_shares_the_alpha_equivalent_backward_body(compiled):
    vanilla, ours = graph_stats(compiled[(2, "vanilla")]), graph_stats(compiled[(2, "innergraph")])
    assert vanilla["consumers"]["scan"] == 4 and vanilla["bodies"] == 4
    assert ours["consumers"]["scan"] <= 4
    assert ours["bodies"] <= 3
    assert ours["total_nodes"] < vanilla["total_nodes"]


def test_one_body_is_one_native_op_instance(compiled):
    fg = compiled[(2, "innergraph")].maker.fgraph
    ops = [n.op for n in fg.apply_nodes if isinstance(n.op, NativeScan)]
    assert len(ops) == 4 and len({id(op) for op in ops}) == 3


def test_third_derivative_no_more_loops_and_fewer_bodies(compiled):
    vanilla, ours = graph_stats(compiled[(3, "vanilla")]), graph_stats(compiled[(3, "innergraph")])
    assert vanilla["consumers"]["scan"] == 8
    assert ours["consumers"]["scan"] <= vanilla["consumers"]["scan"]
    assert ours["bodies"] < vanilla["bodies"]
