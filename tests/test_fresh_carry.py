"""`innergraph.rewriting.fresh_carry`: a carried cotangent that a triangular solve reads is overwritten in place.

The graph is SARIMAX's chain in small: a non-sequence ``w = solve_triangular(L, b)``
read by every step of a loop, so the gradient with respect to ``b`` solves with the
cotangent of ``w``, which the gradient loop accumulates in an untraced state that
starts from a constant zero (static shapes). PyTensor's Scan declares that state's
result a view of its initial value; without a fresh initial buffer the solve must
copy its right-hand side (``overwrite_b=False``).
"""

from __future__ import annotations

import numpy as np
import pytest
import pytensor
import pytensor.tensor as pt
from pytensor.compile.mode import get_mode
from pytensor.graph.basic import Constant
from pytensor.graph.fg import FunctionGraph
from pytensor.tensor.basic import AllocEmpty
from pytensor.tensor.linalg import SolveTriangular

import innergraph  # noqa: F401  (installs the rewrites)
from innergraph.rewriting.fresh_carry import fresh_carries, may_overwrite
from vanilla import vanilla_values
from typed import grad

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _loss(L, b, ys):
    w = pt.linalg.solve_triangular(L, b, lower=True)
    s = pytensor.scan(
        lambda y, s, w: s + pt.tanh(w * y).sum(),
        sequences=[ys],
        outputs_info=[pt.zeros(())],
        non_sequences=[w],
        return_updates=False,
    )
    return s[-1], w


def _graph():
    L = pt.tensor("L", shape=(3, 3))
    b = pt.tensor("b", shape=(3,))
    ys = pt.tensor("ys", shape=(5, 3))
    cost, w = _loss(L, b, ys)
    return [L, b, ys], cost, w


@pytest.fixture(scope="module")
def graph():
    return _graph()


def _vanilla(point, wrt):
    """Vanilla's cost and gradient with respect to ``wrt(inputs, w)``, built and compiled uninstalled."""

    def build():
        inputs, cost, w = _graph()
        return inputs, [cost, grad(cost, wrt(inputs, w))]

    return vanilla_values(build, point, get_mode("FAST_RUN"))


@pytest.fixture(scope="module")
def point():
    rng = np.random.default_rng(0)
    return np.tril(rng.normal(size=(3, 3))) + 3 * np.eye(3), rng.normal(size=3), rng.normal(size=(5, 3))


def _solves_reading_loops(fn):
    """``overwrite_b`` of each triangular solve whose right-hand side a loop computes."""
    found = []
    for node in fn.maker.fgraph.apply_nodes:
        op = getattr(node.op, "core_op", node.op)
        if not isinstance(op, SolveTriangular):
            continue
        rhs = node.inputs[1]
        if rhs.owner is not None and type(rhs.owner.op).__name__ == "Scan":
            found.append(op.overwrite_b)
    return found


def _count(fn, op_class):
    return sum(isinstance(n.op, op_class) for n in fn.maker.fgraph.apply_nodes)


def test_the_solve_of_a_carried_cotangent_overwrites_it(graph, point):
    inputs, cost, _ = graph
    outputs = [cost, grad(cost, inputs[1])]
    mode = get_mode("FAST_RUN")
    fn = pytensor.function(inputs, outputs, mode=mode)
    without = pytensor.function(inputs, outputs, mode=mode.excluding("innergraph_fresh_carries"))

    assert _solves_reading_loops(without) == [False]  # the view of a constant: a copy
    assert _solves_reading_loops(fn) == [True]
    assert _count(fn, AllocEmpty) == _count(without, AllocEmpty) + 1  # the fresh buffer, and nothing else
    for got, want in zip(fn(*point), _vanilla(point, lambda inputs, w: inputs[1]), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_a_carry_no_in_place_op_reads_keeps_its_constant(graph, point):
    inputs, cost, w = graph
    outputs = [cost, grad(cost, w)]  # the accumulated cotangent itself is the output
    mode = get_mode("FAST_RUN")
    fn = pytensor.function(inputs, outputs, mode=mode)
    without = pytensor.function(inputs, outputs, mode=mode.excluding("innergraph_fresh_carries"))

    assert len(fn.maker.fgraph.apply_nodes) == len(without.maker.fgraph.apply_nodes)
    assert _count(fn, AllocEmpty) == _count(without, AllocEmpty)
    for got, want in zip(fn(*point), _vanilla(point, lambda inputs, w: w), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


# --- the pass called directly: its count, what it leaves, and `may_overwrite` ----------------------


def _compiled_without_the_pass(b_shape):
    """The compiled graph of the cost and its gradient with respect to ``b`` (of ``b_shape``), the pass left out: a copy."""
    L = pt.tensor("L", shape=(3, 3))
    b = pt.tensor("b", shape=b_shape)
    ys = pt.tensor("ys", shape=(5, *b_shape))
    cost, _ = _loss(L, b, ys)
    mode = get_mode("FAST_RUN").excluding("innergraph_fresh_carries")
    fn = pytensor.function([L, b, ys], [cost, grad(cost, b)], mode=mode)
    return fn.maker.fgraph.clone()


def _carries(fgraph):
    """The untraced sit-sots' initial values of ``fgraph``'s Scans, in graph order."""
    return [v for n in fgraph.toposort() if type(n.op).__name__ == "Scan" for v in n.op.outer_untraced_sit_sot(n.inputs)]


@pytest.mark.parametrize("b_shape", [(3,), (3, 2)], ids=["vector carry", "matrix carry"])
def test_the_pass_counts_the_carries_it_starts_fresh_and_takes_each_once(b_shape):
    fgraph = _compiled_without_the_pass(b_shape)
    # the gradient loop's three carries start from constants: two scalars nothing overwrites, and
    # the cotangent of the solve's result, which the gradient's solve may overwrite
    assert [(type(v).__name__, v.type.ndim) for v in _carries(fgraph)] == [("TensorConstant", 0), ("TensorConstant", len(b_shape)), ("TensorConstant", 0)]
    assert fresh_carries(fgraph) == 1
    assert [(isinstance(v, Constant), v.type.ndim) for v in _carries(fgraph)] == [(True, 0), (False, len(b_shape)), (True, 0)]
    assert fresh_carries(fgraph) == 0  # its initial value is no constant any more


def test_a_carry_from_a_variable_is_left_alone():
    fgraph = _compiled_without_the_pass((3,))
    [scan] = [n for n in fgraph.toposort() if type(n.op).__name__ == "Scan"]
    [(i, constant)] = [(i, v) for i, v in scan.op.outer_untraced_sit_sot(scan.inputs, with_idx=True) if v.type.ndim == 1]
    start = constant.type("start")
    fgraph.add_input(start)
    fgraph.change_node_input(scan, i, start)
    assert fresh_carries(fgraph) == 0
    assert start in _carries(fgraph)


def test_a_graph_without_loops_counts_none():
    x = pt.vector("x")
    assert fresh_carries(FunctionGraph([x], [pt.exp(x)], clone=False)) == 0


class _Op:
    """A stand-in Op for `may_overwrite`: its in-place protocol given, or raising ``raises``."""

    def __init__(self, destroy_map=None, offers=True, raises=None):
        self.destroy_map = destroy_map or {}
        self.offers, self.raises = offers, raises

    def inplace_on_inputs(self, allowed_inplace_inputs):
        if self.raises is not None:
            raise self.raises("no in-place form")
        return _Op(destroy_map={0: list(allowed_inplace_inputs)} if self.offers else {})


class _NoProtocol:
    """An Op-like object without the in-place protocol (``inplace_on_inputs`` is None)."""

    destroy_map: dict = {}
    inplace_on_inputs = None


def _node(op):
    return type("Node", (), {"op": op})()


@pytest.mark.parametrize("error", [TypeError, ValueError, NotImplementedError])
def test_may_overwrite_reads_an_op_that_cannot_say_as_no(error):
    assert not may_overwrite(_node(_Op(raises=error)), 0)


def test_may_overwrite_asks_the_ops_in_place_protocol():
    assert may_overwrite(_node(_Op()), 1)
    assert not may_overwrite(_node(_Op(offers=False)), 1)
    assert not may_overwrite(_node(_NoProtocol()), 1)
    assert not may_overwrite(_node(_Op(destroy_map={0: [1]})), 1)  # already in place: nothing more to offer
    blockwise = type("Blockwise", (), {"core_op": _Op(), "destroy_map": {}})()
    assert may_overwrite(_node(blockwise), 1)  # a Blockwise answers with its core Op


def test_may_overwrite_a_triangular_solve_overwrites_b_not_the_triangle(graph):
    fgraph = _compiled_without_the_pass((3,))
    solves = [n for n in fgraph.apply_nodes if type(getattr(n.op, "core_op", n.op)).__name__ == "SolveTriangular"]
    assert len(solves) == 2  # the cost's and its gradient's
    assert all(may_overwrite(solve, 1) and not may_overwrite(solve, 0) for solve in solves)
