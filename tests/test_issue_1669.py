"""PyTensor issue #1669: derivatives of a 4-step ``y ** 2`` scan.

Vanilla PyTensor (3.0.7 and 3.3.8 alike) compiles the second derivative to 4 Scans, two of
them with alpha-equivalent backward bodies, and leaves an unused Scan output and a
constant sequence in the compiled graph; the third derivative gives 8 Scans. Vanilla is
PyTensor with innergraph uninstalled.
With innergraph both are fully clean (issue 6): no unused output or param, nothing
left to merge, fewer loops and strictly fewer nodes.
"""

from typing import Any
import warnings

import numpy as np
import pytensor
import pytensor.scalar as ps
import pytensor.tensor as pt
import pytest
from pytensor.compile.mode import Mode, get_default_mode
from pytensor.graph.fg import FunctionGraph
from pytensor.graph.rewriting.basic import MergeOptimizer
from pytensor.scan.op import Scan as NativeScan
from pytensor.tensor.basic import Alloc
from pytensor.tensor.elemwise import DimShuffle
from pytensor.tensor.math import Sum
from pytensor.tensor.subtensor import IncSubtensor, Subtensor

import innergraph
from innergraph import graph_stats
from innergraph.core.fold import unfold_inner_graphs, visible_nodes
from typed import grad
from vanilla import vanilla_function


def _compiled(build: Any, mode: Any) -> Any:
    """``pytensor.function`` of ``build()``'s inputs and outputs, compiled with ``mode``."""
    inputs, outputs = build()
    return pytensor.function(inputs, outputs, mode=mode)



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


# --- #1669 compiled as the issue compiles it ----------------------------------------------
#
# ``Mode(linker="cvm", optimizer="fast_run").excluding("scan_pushout")``, the scan's own mode
# ``excluding("fusion")`` (PyTensor 3.3.8's ``py`` linker refuses preallocated mit-mot outputs,
# in vanilla too). A Scan whose own mode rewrites its inner graph otherwise than the mode being
# compiled stays native (`innergraph.lifting.rules`): the loops are vanilla's, and only the
# outer-graph rewrites reach this graph. Each of the issue's seven items is asserted on the
# compiled graph, against vanilla's, below.


def _issue_configuration(own_mode=True):
    x0 = pt.scalar("x0")
    scan_mode = Mode(linker="cvm", optimizer="fast_run").excluding("fusion") if own_mode else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # `mode` of scan is deprecated in 3.3.8, still honoured
        ys = pytensor.scan(lambda y: y**2, outputs_info=[x0], n_steps=4, return_updates=False, mode=scan_mode)
    return [x0], grad(grad(ys[-1], x0), x0)


ISSUE_MODE = Mode(linker="cvm", optimizer="fast_run").excluding("scan_pushout")


@pytest.fixture(scope="module")
def as_the_issue():
    ours = _compiled(_issue_configuration, mode=ISSUE_MODE)
    vanilla = vanilla_function(_issue_configuration, ISSUE_MODE)
    return ours, vanilla


def _outer(fn, op_type):
    return [n for n in fn.maker.fgraph.apply_nodes if isinstance(n.op, op_type)]


def _scans(fn):
    return _outer(fn, NativeScan)


def test_issue_configuration_values(as_the_issue):
    ours, vanilla = as_the_issue
    for x in (0.3, 1.1, -0.7):
        np.testing.assert_allclose(ours(x), vanilla(x), rtol=1e-13)


def test_item_1_no_unused_sequence_in_the_grad_of_grad_scan(as_the_issue):
    for fn in as_the_issue:  # gone in vanilla since 3.3
        for node in _scans(fn):
            inner = node.op.fgraph
            assert all(inner.clients[v] for v in inner.inputs), f"{node.op} has an unread inner input"


def test_item_2_no_repeated_product_inside_a_loop(as_the_issue):
    for fn in as_the_issue:  # gone in vanilla since 3.3
        for node in _scans(fn):
            keys = [(n.op, tuple(n.inputs)) for n in node.op.fgraph.apply_nodes]
            assert len(keys) == len(set(keys)), f"{node.op} computes one product twice"


def test_item_3_no_sum_of_a_length_one_tensor(as_the_issue):
    ours, vanilla = as_the_issue
    assert _outer(vanilla, Sum)
    assert not _outer(ours, Sum)
    (out,) = ours.maker.fgraph.outputs
    assert isinstance(out.owner.op, Subtensor) and out.owner.inputs[0].owner.op.__class__ is NativeScan  # Subtensor{i} of the loop


def _written_by(fn, op_type):
    return [n for n in _outer(fn, IncSubtensor) if n.inputs[1].owner is not None and isinstance(n.inputs[1].owner.op, op_type)]


def test_item_4_no_expand_dims_on_a_written_value(as_the_issue):
    ours, vanilla = as_the_issue
    assert _written_by(vanilla, DimShuffle)
    assert not _written_by(ours, DimShuffle)


def test_item_5_one_reversed_slice(as_the_issue):
    """Vanilla reads the forward trace as ``trace[-2::-1][:4]``; innergraph as one ``Subtensor{3::-1}``."""
    ours, vanilla = as_the_issue

    def chained(fn):
        return [n for n in _outer(fn, Subtensor) if n.inputs[0].owner is not None and isinstance(n.inputs[0].owner.op, Subtensor)]

    assert chained(vanilla)
    assert not chained(ours)


def test_item_6_no_nested_increment(as_the_issue):
    """``inc(zeros(5)[1:], inc(zeros(4)[-1], 1.0))`` is ``inc(zeros(5)[4], 1.0)`` (`innergraph.rewriting.zero_increments`)."""
    ours, vanilla = as_the_issue
    assert _written_by(vanilla, IncSubtensor)
    assert not _written_by(ours, IncSubtensor)
    rows = [n for n in _outer(ours, IncSubtensor) if len(n.op.idx_list) == 1 and not isinstance(n.op.idx_list[0], slice)]
    assert [int(n.inputs[2].data) for n in rows if isinstance(n.inputs[1], pytensor.graph.basic.Constant)] == [4]


def test_item_7_no_one_hot_buffer(as_the_issue):
    """The one-hot ``inc(zeros(4)[-1], 1.0)``, built only to be added into zeros(5), is not made."""
    ours, vanilla = as_the_issue

    def lengths(fn):
        return sorted(int(n.inputs[1].data) for n in _outer(fn, Alloc))

    assert lengths(vanilla) == [4, 5]
    assert lengths(ours) == [5]


def test_item_8_loops_stay_native_in_this_configuration(as_the_issue):
    """4 loops, as vanilla: the Scans keep their own mode, so innergraph does not lift them.

    The two ``grad_of_scan`` loops cannot merge while one of them reads the grad-of-grad
    loop's per-step output, which reads the other's trace; innergraph's per-step
    push-out computes that output after the loop, which is how the default mode reaches
    3 loops. Without the scan's own mode the same compiling mode gives 3.
    """
    ours, vanilla = as_the_issue
    assert len(_scans(vanilla)) == len(_scans(ours)) == 4
    assert len({id(n.op) for n in _scans(ours)}) == 3  # the two grad_of_scan loops share one Op
    assert len(ours.maker.fgraph.apply_nodes) < len(vanilla.maker.fgraph.apply_nodes)
    without_own_mode = _compiled(lambda: _issue_configuration(own_mode=False), mode=ISSUE_MODE)
    assert len(_scans(without_own_mode)) == 3
    np.testing.assert_allclose(without_own_mode(0.3), vanilla(0.3), rtol=1e-13)
