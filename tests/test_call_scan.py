"""`innergraph.call` around a Scan, with some of the call's outputs unused.

Dead-slot removal renumbers a call's params and outputs; when the called body holds
a loop, the loop's own inputs must follow. The reference is the same function
written as PyTensor's `OpFromGraph`, compiled with innergraph uninstalled, for the
values and for the gradient (which also goes through the call's pullback).
"""

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.compile.builders import OpFromGraph
from pytensor.compile.mode import Mode

import innergraph
from innergraph import graph_stats
from typed import call, grad

x, a, b, c = pt.dvector("x"), pt.dscalar("a"), pt.dscalar("b"), pt.dscalar("c")
INPUTS = [x, a, b, c]
SAMPLE = (np.linspace(-1.0, 2.0, 6), 0.5, 0.9, 3.0)


def body(xv, av, bv, cv):
    """A recursion's last value and its sum (reading x, a, b), and an output reading c only."""
    trace = pytensor.scan(
        lambda s, acc, k: acc * k + s, sequences=[xv], outputs_info=[av], non_sequences=[bv], return_updates=False
    )
    return trace[-1], trace.sum(), cv * 2


OUTS = call(body, *INPUTS)
with innergraph.uninstalled():
    _inner = [v.type() for v in INPUTS]
    VANILLA_OUTS = OpFromGraph(_inner, list(body(*_inner)))(*INPUTS)

LINKERS = {"cvm": "cvm", "py": "py", "numba": "numba"}


def _evaluate(outputs, selected, linker):
    mode = Mode(linker=linker, optimizer="fast_run")
    chosen = [outputs[i] for i in selected]
    cost = sum(v.sum() for v in chosen)
    grads = grad(cost, [a, b, c], disconnected_inputs="ignore")
    fn = pytensor.function(INPUTS, chosen + grads, mode=mode, on_unused_input="ignore")
    return fn, [np.asarray(v) for v in fn(*SAMPLE)]


@pytest.mark.parametrize("linker", sorted(LINKERS))
@pytest.mark.parametrize("selected", [(1,), (0, 2), (2,)], ids=["sum", "last+c", "c-only"])
def test_call_around_scan_with_unused_outputs_matches_vanilla(selected, linker):
    fn, got = _evaluate(OUTS, selected, linker)
    with innergraph.uninstalled():
        _, expected = _evaluate(VANILLA_OUTS, selected, linker)
    assert len(got) == len(expected) == len(selected) + 3
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-12, atol=1e-12)
    if selected == (2,):  # only c is read: the loop is dead, in the forward and in the gradient
        assert graph_stats(fn.maker.fgraph)["consumers"]["scan"] == 0  # counts loops inside folded bodies too
    else:
        assert graph_stats(fn.maker.fgraph)["consumers"]["scan"] >= 2  # the forward loop and its reverse
