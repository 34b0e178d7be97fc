"""``carry_from_zero``: a carried cotangent reads the outer cotangent buffer once, as the mit-mot did.

The pattern of the GARCH(1,1) likelihood written with ``pm.Potential`` (issue 21): a
variance recursion by scan, a likelihood of its trace, the gradient. PyTensor's
gradient loop reads the cotangent buffer whole, as a mit-mot (``B[::-1]``); the carried
form of `innergraph.rewriting.carry` read it twice (a contribution sequence
``B[::-1][1:]`` and an initial row ``B[::-1][0]``), one node more than vanilla in the
compiled function. Carrying from zero reads it once again (``B[::-1]``) and keeps the
carried loop (no buffer written per step).

The rewrite is also called directly (first, so that a planted fault fails fast) on loops
made without a gradient: the count it returns, the initial row 0 and a row j > 0, either
order of the ``add``, two loops, and each case its guards leave (values against NumPy).
"""

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.compile.mode import Mode
from pytensor.graph.basic import Constant, equal_computations
from pytensor.scan.op import Scan
from pytensor.tensor.subtensor import IncSubtensor, Subtensor

import innergraph
from innergraph.ops.scan import Scan as InGraphScan
from innergraph.rewriting.carry_from_zero import _initial_row, _rows_from, carry_from_zero
from innergraph.rewriting.untrace import untrace_final_states
from innergraph.stats import graph_stats
from innergraph.testing.rewrites import rewritten
from test_rewrites import canonicalized_then
from vanilla import vanilla_function
from typed import grad

Y = np.random.default_rng(21).normal(size=60)
THETA = np.array([-2.0, -1.0, 1.5])


def _garch() -> tuple[list, Any]:
    """The GARCH(1,1) log-likelihood and its gradient in ``theta``."""
    theta = pt.dvector("theta")
    omega, alpha, beta = pt.exp(theta[0]), pt.sigmoid(theta[1]), pt.sigmoid(theta[2])
    s2 = pytensor.scan(
        lambda y_tm1, s2_tm1, o, a, b: o + a * y_tm1**2 + b * s2_tm1,
        sequences=[pt.as_tensor(Y[:-1])],
        outputs_info=[pt.as_tensor(np.var(Y))],
        non_sequences=[omega, alpha, beta],
        return_updates=False,
    )
    ll = (-0.5 * (pt.log(s2) + Y[1:] ** 2 / s2)).sum()
    return [theta], [ll, grad(ll, theta)]


# -- the rewrite called directly ----------------------------------------------------------
#
# A carry whose final value nobody reads, read back through a sequence of the rows after its
# initial one: made here without a gradient, from `innergraph.scan` over ``X[j + 1:]`` whose
# states' final values `untrace_final_states` takes as carries; the outputs not in ``keep``
# are then dropped, so nothing reads those carries' final values, as nothing reads a
# cotangent carry's.

X, A = pt.dvector("X"), pt.dscalar("a")
XV = np.array([0.5, -1.0, 2.0, 0.25, 1.5, -0.75, 3.0])


def _direct(step, sequences, outputs_info, keep, non_sequences=(A,), inputs=(X, A)):
    """The graph of the states' final values in ``keep`` after `carry_from_zero`, and its count."""
    states = innergraph.scan(
        step, sequences=list(sequences), outputs_info=list(outputs_info), non_sequences=list(non_sequences), return_updates=False
    )
    finals = [s[-1] for s in (states if isinstance(states, list) else [states])]
    fgraph, untraced = rewritten(canonicalized_then(untrace_final_states), list(inputs), finals)
    assert untraced == 1  # one loop, its states now carries
    for i in sorted(set(range(len(finals))) - set(keep), reverse=True):
        fgraph.remove_output(i)
    return fgraph, carry_from_zero(fgraph)


def _values(fgraph, *values):
    fn = pytensor.function(fgraph.inputs, fgraph.outputs, mode=Mode(linker="py", optimizer="None"), on_unused_input="ignore")
    return [float(v) for v in fn(*values)]


def _loop(fgraph):
    (node,) = [n for n in fgraph.apply_nodes if isinstance(n.op, InGraphScan)]
    return node


def _h_then_g(rows, h0, a):
    """NumPy: ``h`` carried over ``rows`` from ``h0`` (``h = row + h * a``), ``g`` summing the ``h`` each step reads."""
    h, g = h0, 0.0
    for row in rows:
        h, g = row + h * a, g + h
    return g


def _step(row, h, g, a):
    return row + h * a, g + h


def test_a_carry_from_row_0_reads_the_buffer_whole_from_zero():
    fgraph, changed = _direct(_step, [X[1:]], [X[0], pt.as_tensor(np.float64(0.0))], keep=[1])
    assert changed == 1
    node = _loop(fgraph)
    seqs = node.inputs[2 : 2 + node.op.layout.info.n_seqs]
    assert seqs == [fgraph.inputs[0]]  # the buffer itself, not X[1:]
    starts = node.inputs[3:5]  # the carries' initial values: 0 where X[0] was, and g's 0
    assert all(isinstance(v, Constant) and v.data == 0.0 for v in starts), starts
    assert _values(fgraph, XV, 0.5) == pytest.approx([_h_then_g(XV[1:], XV[0], 0.5)], rel=1e-14)
    assert carry_from_zero(fgraph) == 0  # nothing left to do: the count of a pass over its own result


@pytest.mark.parametrize("add_order", ["row + rest", "rest + row"])
@pytest.mark.parametrize("j", [1, 2])  # at j = 1, j ^ 1 and j | 1 are not j + 1 (at j = 2 both are)
def test_a_carry_from_row_j_reads_the_buffer_from_row_j(add_order, j):
    def step(row, h, g, a):
        return (row + h * a if add_order == "row + rest" else h * a + row), g + h

    fgraph, changed = _direct(step, [X[j + 1 :]], [X[j], pt.as_tensor(np.float64(0.0))], keep=[1])
    assert changed == 1
    node = _loop(fgraph)
    (seq,) = node.inputs[2:3]
    assert equal_computations([seq], [fgraph.inputs[0][j:]])  # rows from j, the initial row among them
    assert _values(fgraph, XV, 0.5) == pytest.approx([_h_then_g(XV[j + 1 :], XV[j], 0.5)], rel=1e-14)


def test_a_carry_after_one_it_leaves_is_read_from_zero():
    """The loop's first carry (``g``) is not one the rewrite takes; the second (``h``) is."""

    def step(row, g, h, a):
        return g + h, row + h * a

    fgraph, changed = _direct(step, [X[1:]], [pt.as_tensor(np.float64(0.0)), X[0]], keep=[0])
    assert changed == 1
    assert _values(fgraph, XV, 0.5) == pytest.approx([_h_then_g(XV[1:], XV[0], 0.5)], rel=1e-14)


def test_a_while_loop_is_left_and_a_counted_loop_after_it_is_taken():
    """An until-scan of the same pattern is left (it may stop before its sequence ends, so
    `untrace_final_states` keeps its traces: no carry), and the counted loop after it in the
    consumers' order is still taken (a ``break`` for the pass's first ``continue`` stops before it)."""
    from pytensor.scan.utils import until

    def step_until(row, h, g, a):
        return (row + h * a, g + h), until(g > 100.0)

    h1, g1 = innergraph.scan(step_until, sequences=[X[1:]], outputs_info=[X[0], pt.as_tensor(np.float64(0.0))],
                             non_sequences=[A], return_updates=False)
    h2, g2 = innergraph.scan(_step, sequences=[X[1:]], outputs_info=[X[0], g1[-1]], non_sequences=[A], return_updates=False)
    fgraph, untraced = rewritten(canonicalized_then(untrace_final_states), [X, A], [g2[-1], h2[-1], h1[-1]])
    fgraph.remove_output(2)
    fgraph.remove_output(1)
    assert carry_from_zero(fgraph) == 1
    first, second = sorted(
        (n for n in fgraph.apply_nodes if isinstance(n.op, InGraphScan)), key=lambda n: n.op.layout.info.as_while, reverse=True
    )
    assert first.op.layout.info.as_while and equal_computations([first.inputs[2]], [pt.as_tensor(fgraph.inputs[0])[1:]])  # unchanged
    assert second.inputs[2] is fgraph.inputs[0]  # the counted loop reads the buffer whole
    assert _values(fgraph, XV, 0.5) == pytest.approx([_h_then_g(XV[1:], XV[0], 0.5) * 2], rel=1e-14)


def test_two_loops_are_counted_and_each_reads_its_buffer_whole():
    Y = pt.dvector("Y")
    finals = []
    for buffer in (X, Y):
        h, g = innergraph.scan(_step, sequences=[buffer[1:]], outputs_info=[buffer[0], pt.as_tensor(np.float64(0.0))],
                               non_sequences=[A], return_updates=False)
        finals += [g[-1], h[-1]]
    fgraph, untraced = rewritten(canonicalized_then(untrace_final_states), [X, Y, A], finals)
    assert untraced == 2
    fgraph.remove_output(3)
    fgraph.remove_output(1)
    assert carry_from_zero(fgraph) == 2
    assert carry_from_zero(fgraph) == 0
    YV = XV[::-1].copy()
    assert _values(fgraph, XV, YV, 0.5) == pytest.approx([_h_then_g(XV[1:], XV[0], 0.5), _h_then_g(YV[1:], YV[0], 0.5)], rel=1e-14)


def _left(fgraph, changed):
    assert changed == 0
    return _loop(fgraph)


def test_carries_it_leaves():
    zero = pt.as_tensor(np.float64(0.0))
    # the carry's final value is read: it is the carried value, which `rest` would not be
    _left(*_direct(_step, [X[1:]], [X[0], zero], keep=[0, 1]))
    # the sequence does not start after the initial row (X[2:] after X[0]), or reads every other row
    _left(*_direct(_step, [X[2:]], [X[0], zero], keep=[1]))
    _left(*_direct(_step, [X[1::2]], [X[0], zero], keep=[1]))
    # the initial value is not a constant row of the buffer: a symbolic row, a negative row, the whole sum
    k = pt.lscalar("k")
    _left(*_direct(_step, [X[1:]], [X[k], zero], keep=[1], inputs=(X, A, k)))
    _left(*_direct(_step, [X[1:]], [X[-1], zero], keep=[1]))
    _left(*_direct(_step, [X[1:]], [X.sum(), zero], keep=[1]))
    # an initial row that is not one constant index: two of them, and a negative row before a sequence from row 0
    M = pt.dmatrix("M")
    _left(*_direct(lambda row, h, g, a: (row[0] + h * a, g + h), [M[2:]], [M[1, 0], zero], keep=[1], inputs=(M, A)))
    _left(*_direct(_step, [X[0:]], [X[-1], zero], keep=[1]))
    # the sequence starts before the row after the initial one, or stops early
    _left(*_direct(_step, [X[1:]], [X[2], zero], keep=[1]))
    _left(*_direct(_step, [X[1:-1]], [X[0], zero], keep=[1]))
    # the initial row of another buffer
    Y = pt.dvector("Y")
    _left(*_direct(_step, [X[1:]], [Y[0], zero], keep=[1], inputs=(X, A, Y)))
    # the row is read elsewhere in the body too, or not added to the rest, or added to a row of another type
    _left(*_direct(lambda row, h, g, a: (row + h * a, g + h + row), [X[1:]], [X[0], zero], keep=[1]))
    _left(*_direct(lambda row, h, g, a: (row * h * a, g + h), [X[1:]], [X[0], zero], keep=[1]))
    _left(*_direct(lambda row, h, g, a: (row - h * a, g + h), [X[1:]], [X[0], zero], keep=[1]))
    _left(*_direct(lambda row, h, g, a: (row + h * a + a, g + h), [X[1:]], [X[0], zero], keep=[1]))  # add of three terms
    # a sequence read at two taps: a slot per tap, each rows with a stop (X[1:][:-1], X[1:][1:]), none moved
    _left(*_direct(lambda row, nxt, h, g, a: (row + h * a, g + h + nxt), [{"input": X[1:], "taps": [0, 1]}], [X[0], zero], keep=[1]))
    # the row is returned as it is (another state's update), or the carry's update is a param, computed by no node
    _left(*_direct(lambda row, h, g, a: (row + h * a, row), [X[1:]], [X[0], zero], keep=[1]))
    _left(*_direct(lambda row, h, g, a: (a, g + h + row), [X[1:]], [X[0], zero], keep=[1]))


def test_the_initial_row_is_a_constant_row_from_zero_up():
    """`_initial_row` on literal slots: in the pipeline canonicalize has removed ``X[0:]``, so a
    negative row never meets a sequence it could take (``X[-1]`` before ``X[0:]``); called on a
    graph as built, the pass must still refuse it."""
    def slot(arg):
        return SimpleNamespace(args=(arg,))

    assert _initial_row(slot(X[3])) == (X, 3)
    assert _initial_row(slot(X[0])) == (X, 0)
    assert _initial_row(slot(X[-1])) is None and _initial_row(slot(X[-2])) is None
    assert _initial_row(slot(X[1:])) is None and _initial_row(slot(X.sum())) is None
    # the rows after it: a slice from that row to the end, by steps of 1 (canonicalize writes X[1::1] as X[1:]);
    # rows above CPython's cached small ints compare by value
    assert _rows_from(slot(X[1:]), X, 1) and _rows_from(slot(X[1::1]), X, 1) and _rows_from(slot(X[300:]), X, 300)
    assert not _rows_from(slot(X[1::2]), X, 1) and not _rows_from(slot(X[1:5]), X, 1) and not _rows_from(slot(X[2:]), X, 1)


def test_a_carry_of_a_shape_not_fully_static_is_left():
    """The zero the carry would start from is a constant only for a fully static shape."""
    M = pt.dmatrix("M")

    def step(row, h, g):
        return row + h * 0.5, g + h.sum()

    fgraph, changed = _direct(step, [M[1:]], [M[0], pt.as_tensor(np.float64(0.0))], keep=[1], non_sequences=(), inputs=(M,))
    _left(fgraph, changed)
    S = pt.dmatrix("S", shape=(None, 3))
    # a rest of another type than the update's (a number added to a row): left
    fgraph, changed = _direct(lambda row, h, g: (row + (h * 0.5).sum(), g + h.sum()), [S[1:]], [S[0], pt.as_tensor(np.float64(0.0))],
                              keep=[1], non_sequences=(), inputs=(S,))
    _left(fgraph, changed)
    fgraph, changed = _direct(step, [S[1:]], [S[0], pt.as_tensor(np.float64(0.0))], keep=[1], non_sequences=(), inputs=(S,))
    assert changed == 1  # the same loop over rows of static shape (3,)
    SV = np.arange(15.0).reshape(5, 3) / 7.0
    h, g = SV[0], 0.0
    for row in SV[1:]:
        h, g = row + h * 0.5, g + h.sum()
    assert _values(fgraph, SV) == pytest.approx([g], rel=1e-14)


# -- compiled: the GARCH likelihood's gradient ----------------------------------------------

MODE = Mode(linker="numba", optimizer="fast_run")
VARIANTS = {
    "innergraph": MODE,
    "innergraph, carry_from_zero excluded": MODE.excluding("carry_from_zero"),
}


@pytest.fixture(scope="module")
def compiled():
    made = {name: pytensor.function(*_garch(), mode=mode) for name, mode in VARIANTS.items()}
    made["vanilla"] = vanilla_function(_garch, MODE, first_call=[THETA])  # built, compiled and called uninstalled
    return made


def _gradient_loop(fn):
    (loop,) = [n for n in fn.maker.fgraph.apply_nodes if isinstance(n.op, Scan) and (n.op.name or "").startswith("grad_of")]
    return loop


def _buffer_reads(fn):
    """The outer ``Subtensor`` nodes the gradient loop reads the cotangent buffer through (an ``IncSubtensor``)."""
    loop = _gradient_loop(fn)
    return [
        i.owner
        for i in loop.inputs
        if i.owner is not None and isinstance(i.owner.op, Subtensor)
        and i.owner.inputs[0].owner is not None and isinstance(i.owner.inputs[0].owner.op, IncSubtensor)
    ]


def test_the_gradient_gives_vanillas_numbers(compiled):
    expected = compiled["vanilla"](THETA)
    for name in ("innergraph", "innergraph, carry_from_zero excluded"):
        for a, b in zip(expected, compiled[name](THETA), strict=True):
            np.testing.assert_allclose(b, a, rtol=1e-12, atol=1e-12, err_msg=name)


def test_the_cotangent_buffer_is_read_once_as_vanilla_reads_it(compiled):
    assert len(_buffer_reads(compiled["vanilla"])) == 1  # the mit-mot, B[::-1]
    assert len(_buffer_reads(compiled["innergraph, carry_from_zero excluded"])) == 2  # B[-2::-1] and B[-1]
    (read,) = _buffer_reads(compiled["innergraph"])
    assert read.op == _buffer_reads(compiled["vanilla"])[0].op  # the same reversal


def test_the_loop_stays_carried_and_no_bigger_than_vanillas(compiled):
    vanilla, ours = (graph_stats(compiled[n]) for n in ("vanilla", "innergraph"))
    without = graph_stats(compiled["innergraph, carry_from_zero excluded"])
    assert ours["total_nodes"] <= vanilla["total_nodes"]
    assert ours["total_nodes"] == without["total_nodes"] - 1
    loop = _gradient_loop(compiled["innergraph"]).op.info
    assert loop.n_mit_mot == 0 and loop.n_untraced_sit_sot >= 1  # carried: no cotangent buffer written per step
