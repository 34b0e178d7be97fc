"""`innergraph.rewriting.outer.local_fill_read_by_consumers`: the ones a gradient sends into a loop, made constant in canonicalize.

The graph is the CustomDist GARCH's in small: a loop with a constant step count
emits a per-step value ``ys`` (a nit-sot), the cost is ``ys.sum()``, and its gradient
sends ``fill(ys[::-1], 1.0)`` into the reverse loop as a sequence. Stabilize would
turn that ``fill`` into an ``Alloc`` and fold it into a constant; doing so costs it a
second round over the whole graph (bodies included). With the rewrite, canonicalize
leaves the constant, and stabilize makes no change: one round.
"""

from __future__ import annotations

import numpy as np
import pytest
import pytensor
import pytensor.tensor as pt
from pytensor.compile.mode import Mode, optdb
from pytensor.graph.basic import Constant, equal_computations
from pytensor.graph.fg import FunctionGraph
from pytensor.graph.rewriting.db import RewriteDatabaseQuery
from pytensor.scalar.basic import Second
from pytensor.tensor.basic import Alloc
from pytensor.tensor.elemwise import Elemwise
from pytensor.tensor.rewriting.shape import ShapeFeature

import innergraph  # noqa: F401  (installs the rewrites)
from innergraph.rewriting.outer import local_fill_read_by_consumers
from innergraph.protocol.slots import form_of
from vanilla import vanilla_values
from typed import grad as grad_of

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

OFF = "innergraph_fill_read_by_consumers"


def _cost_and_gradient(n_steps):
    a = pt.dscalar("a")

    def step(s_tm1, a):
        s = a + 0.5 * s_tm1
        return s, pt.log(s)

    _, ys = pytensor.scan(step, outputs_info=[pt.constant(0.5, dtype="float64"), None], non_sequences=[a], n_steps=n_steps, return_updates=False)
    cost = ys.sum()
    return [a], [cost, grad_of(cost, a)]


def _rewritten(outputs_and_inputs, *excluded, cutoff=1.49):
    """The graph after every ``fast_run`` pass before ``cutoff`` (1.49: canonicalize is the last)."""
    inputs, outputs = outputs_and_inputs
    fgraph = FunctionGraph(inputs, outputs, clone=True)
    optdb.query(RewriteDatabaseQuery(include=["fast_run"], exclude=list(excluded), position_cutoff=cutoff)).rewrite(fgraph)
    return fgraph


def _fills(fgraph):
    return [n for n in fgraph.apply_nodes if isinstance(n.op, Elemwise) and isinstance(n.op.scalar_op, Second)]


def _stabilize_rounds(fgraph):
    """How many rounds stabilize's equilibrium makes over ``fgraph`` (the last one changes nothing)."""
    stabilize = optdb["stabilize"].query(RewriteDatabaseQuery(include=["fast_run"]))
    stabilize.add_requirements(fgraph)
    profile = stabilize.apply(fgraph)
    return len(profile[1])


def test_canonicalize_leaves_the_gradients_ones_as_a_constant_sequence():
    without = _rewritten(_cost_and_gradient(20), OFF)
    (fill,) = _fills(without)  # the pattern is there: the reverse loop reads fill(ys[::-1], 1.0)
    assert all(form_of(client.op) is not None for client, _ in without.clients[fill.outputs[0]])

    fgraph = _rewritten(_cost_and_gradient(20))
    assert not _fills(fgraph)
    ones = [
        x for n in fgraph.apply_nodes if form_of(n.op) is not None for x in n.inputs if isinstance(x, Constant) and x.type.ndim == 1 and x.data.shape == (20,)
    ]
    assert any(np.array_equal(c.data, np.ones(20)) for c in ones)


def test_stabilize_then_makes_one_round_and_the_graph_it_would_have_made():
    without = _rewritten(_cost_and_gradient(20), OFF)
    fgraph = _rewritten(_cost_and_gradient(20))
    assert _stabilize_rounds(without) == 2  # its first round turns the fill into a folded Alloc
    assert _stabilize_rounds(fgraph) == 1
    assert not any(isinstance(n.op, Alloc) for n in fgraph.apply_nodes)
    assert equal_computations(fgraph.outputs, without.outputs, fgraph.inputs, without.inputs)  # the graph stabilize made


def test_a_symbolic_step_count_leaves_the_fill():
    n = pt.lscalar("n")
    inputs, outputs = _cost_and_gradient(n)
    assert len(_fills(_rewritten(([*inputs, n], outputs)))) == 1


def test_a_fill_an_elemwise_also_reads_is_left_to_stabilize():
    inputs, (cost, grad) = _cost_and_gradient(20)
    fgraph = _rewritten((inputs, [cost, grad]), OFF)
    (fill,) = _fills(fgraph)
    fgraph.add_output(fill.outputs[0] * 2.0)  # an Elemwise reader: stabilize keeps an Alloc for it
    if not hasattr(fgraph, "shape_feature"):
        fgraph.attach_feature(ShapeFeature())
    assert local_fill_read_by_consumers.transform(fgraph, fill) is None
    fgraph.remove_output(len(fgraph.outputs) - 1)
    assert local_fill_read_by_consumers.transform(fgraph, fill) is not None


@pytest.mark.parametrize("linker", ["cvm", "numba"])
def test_values_equal_vanillas(linker):
    inputs, outputs = _cost_and_gradient(20)
    mode = Mode(linker=linker, optimizer="fast_run")
    ours = pytensor.function(inputs, outputs, mode=mode)(0.3)
    theirs = vanilla_values(lambda: _cost_and_gradient(20), [0.3], mode)
    np.testing.assert_allclose(ours, theirs, rtol=1e-12)
