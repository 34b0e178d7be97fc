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
from pytensor.tensor.basic import AllocEmpty
from pytensor.tensor.slinalg import SolveTriangular

import innergraph  # noqa: F401  (installs the rewrites)
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
