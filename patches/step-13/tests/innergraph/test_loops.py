"""Loops that take bodies, and PyTensor's own Scan lifted into the in-graph form and lowered back.

The loop builders read their bodies folded, so their graphs compile with
``pytensor.function`` as they are (the Python linker, ``fast_run``); lifting and
lowering are the rule tables of the lifting step, applied by hand here, since no
rewrite of innergraph is registered yet.
"""

import numpy as np

import pytensor
import pytensor.tensor as pt
from pytensor.compile.mode import Mode
from pytensor.graph.basic import equal_computations
from pytensor.graph.fg import FunctionGraph
from pytensor.innergraph.core.fold import fold_inner_graphs
from pytensor.innergraph.lifting.rules import lift, lower
from pytensor.innergraph.loops import fori_loop, while_loop
from pytensor.innergraph.ops.scan import Scan
from pytensor.scan.op import Scan as NativeScan


PY = Mode(linker="py", optimizer="fast_run")


def test_a_while_loop_runs_until_its_condition_fails():
    x = pt.dscalar("x")
    steps, value = while_loop(
        lambda state: state[1] < 100.0,
        lambda state: (state[0] + 1, state[1] * 2),
        (pt.constant(0, dtype="int64"), x),
    )
    fn = pytensor.function([x], [steps, value], mode=PY)

    assert [int(v) for v in fn(3.0)] == [6, 192]
    assert [int(v) for v in fn(500.0)] == [0, 500]  # zero steps


def test_a_for_loop_and_its_gradient():
    x = pt.dvector("x")
    total = fori_loop(0, 4, lambda i, acc: acc * x + i, pt.zeros_like(x))
    fn = pytensor.function([x], [total, pytensor.grad(total.sum(), x)], mode=PY)

    x_val = np.array([0.5, 2.0])
    expected = (x_val + 2) * x_val + 3  # i = 0 leaves zeros, i = 1 gives ones
    value, grad = fn(x_val)
    np.testing.assert_allclose(value, expected)
    np.testing.assert_allclose(grad, 2 * x_val + 2)  # d(x**2 + 2x + 3)/dx


def scan_graph():
    x = pt.dvector("x")
    trace = pytensor.scan(
        lambda v, acc: acc + v**2,
        sequences=[x],
        outputs_info=[pt.zeros(())],
        return_updates=False,
    )
    return FunctionGraph([x], [trace], clone=True)


def test_pytensors_scan_is_lifted_and_lowered_back():
    fgraph = scan_graph()
    original = scan_graph()

    assert lift(fgraph, only={NativeScan}) == 1
    assert [type(n.op) for n in fgraph.apply_nodes].count(Scan) == 1
    assert not any(isinstance(n.op, NativeScan) for n in fgraph.apply_nodes)

    lifted = fgraph.clone()
    fold_inner_graphs(lifted)
    fn = pytensor.function(lifted.inputs, lifted.outputs, mode=PY)
    x_val = np.array([1.0, 2.0, 3.0])
    (trace,) = fn(x_val)
    np.testing.assert_allclose(trace, np.cumsum(x_val**2))

    assert lower(fgraph, only={Scan}) == 1
    assert equal_computations(
        fgraph.outputs, original.outputs, fgraph.inputs, original.inputs
    )
