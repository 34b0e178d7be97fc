"""A carried cotangent whose outside contributions are a constant zero buffer: the zero row is inlined at once.

`innergraph.rewriting.carry.carry_cotangents` turns a mit-mot into a carried state
plus one sequence per input tap above its output tap (the outside contributions).
When nothing outside the loop reads the forward state's trace (the CustomDist
GARCH's variance), those contributions are rows of a constant zero buffer.
`merge_arguments` would inline that row in the next round of the consumer rewrites,
which cost the GARCH's compilation a third round; the carry now inlines it itself
(`innergraph.rewriting.args.inlined_row`), and nothing is left for that round.
"""

from __future__ import annotations

import numpy as np
import pytest
import pytensor
import pytensor.tensor as pt
from pytensor.compile.mode import Mode, optdb
from pytensor.graph.basic import Constant
from pytensor.graph.fg import FunctionGraph
from pytensor.graph.rewriting.db import RewriteDatabaseQuery

import innergraph  # noqa: F401  (installs the rewrites)
from innergraph.rewriting import carry
from innergraph.rewriting.args import merge_arguments
from innergraph.rewriting.carry import carry_cotangents
from innergraph.protocol.signature import consumers
from innergraph.rewriting.simplify import simplify_consumers
from innergraph.protocol.slots import Meaning
from vanilla import vanilla_values
from typed import grad

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _garch_like():
    """A loop whose state trace nothing reads, a per-step value summed, and the gradient."""
    a = pt.dscalar("a")

    def step(s_tm1, a):
        s = a + 0.5 * s_tm1
        return s, pt.log(s)

    _, ys = pytensor.scan(step, outputs_info=[pt.constant(0.5, dtype="float64"), None], non_sequences=[a], n_steps=20, return_updates=False)
    cost = ys.sum()
    return [a], [cost, grad(cost, a)]


def _before_the_consumer_rewrites():
    """The graph as ``innergraph_simplify`` (1.56) receives it."""
    inputs, outputs = _garch_like()
    fgraph = FunctionGraph(inputs, outputs, clone=True)
    optdb.query(RewriteDatabaseQuery(include=["fast_run"], position_cutoff=1.555)).rewrite(fgraph)
    merge_arguments(fgraph)  # the gradient's ones (a constant sequence) go into the body, as in the first round
    assert not _uniform_constant_sequences(fgraph)
    return fgraph


def _uniform_constant_sequences(fgraph):
    return [
        s.args[0]
        for sig in consumers(fgraph)
        for s in sig.having(Meaning.SEQUENCE)
        if isinstance(s.args[0], Constant) and np.asarray(s.args[0].data).ndim and (s.args[0].data == s.args[0].data[:1]).all()
    ]


def test_the_carry_leaves_no_constant_row_for_the_next_round(monkeypatch):
    fgraph = _before_the_consumer_rewrites()
    assert carry_cotangents(fgraph) == 1
    assert not _uniform_constant_sequences(fgraph)
    assert merge_arguments(fgraph) == 0  # nothing left for the next round

    # without the inlining, the zero contributions are a sequence merge_arguments inlines one round later
    monkeypatch.setattr(carry, "_inline_constant_rows", lambda sig, slots: (slots, {}))
    fgraph = _before_the_consumer_rewrites()
    assert carry_cotangents(fgraph) == 1
    assert len(_uniform_constant_sequences(fgraph)) == 1
    assert merge_arguments(fgraph) == 1


def test_the_consumer_rewrites_end_with_the_same_graph(monkeypatch):
    ours = _before_the_consumer_rewrites()
    simplify_consumers(ours)
    monkeypatch.setattr(carry, "_inline_constant_rows", lambda sig, slots: (slots, {}))
    theirs = _before_the_consumer_rewrites()
    simplify_consumers(theirs)
    text = [pytensor.dprint(fg, file="str", print_type=True) for fg in (ours, theirs)]
    assert text[0] == text[1]


@pytest.mark.parametrize("linker", ["cvm", "numba"])
def test_values_equal_vanillas(linker):
    inputs, outputs = _garch_like()
    mode = Mode(linker=linker, optimizer="fast_run")
    ours = pytensor.function(inputs, outputs, mode=mode)(0.3)
    theirs = vanilla_values(_garch_like, [0.3], mode)
    np.testing.assert_allclose(ours, theirs, rtol=1e-12)
