"""Branches whose static shapes are both known and differ (a mixture of components of
different lengths, PyMC's ``test_ifelse_mixture_*``): the in-graph IfElse takes the
output types PyTensor's IfElse gives (the shape known in both branches), so a plain
``pytensor.ifelse`` lifts (`innergraph.lift_graph`) instead of the lift raising
`BodyTypeError`."""

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.compile.mode import Mode
from pytensor.ifelse import ifelse

import innergraph
import innergraph.ops.ifelse as ig_ifelse
from innergraph.core.errors import BodyTypeError
from innergraph.ops.ifelse import IfElse

c = pt.scalar("c", dtype="bool")
# larger than SMALL_STATIC_SIZE (16 elements): statically small branches are left native
a = pt.vector("a", shape=(20,))
b = pt.vector("b", shape=(40,))
m2 = pt.matrix("m2", shape=(5, 5))
m4 = pt.matrix("m4", shape=(6, 6))
VALUES = [np.linspace(0.5, 1.0, 20), np.linspace(1.0, 4.0, 40), np.eye(5) + 1.0, np.arange(36.0).reshape(6, 6)]
OUTPUTS = ifelse(c, [pt.exp(a) / 3, pt.exp(m2).sum(0)[:, None] * m2], [pt.log(b), pt.sqrt(m4)])


@pytest.fixture(scope="module", params=["numba", "py"])
def functions(request):
    mode = Mode(linker=request.param, optimizer="fast_run")
    inputs = [c, a, b, m2, m4]
    with pytensor.config.change_flags(on_opt_error="raise"):
        ours = pytensor.function(inputs, innergraph.lift_graph(OUTPUTS), mode=mode)
    with innergraph.uninstalled():
        return ours, pytensor.function(inputs, OUTPUTS, mode=mode)


def test_the_output_types_are_pytensors():
    assert [o.type.shape for o in OUTPUTS] == [(None,), (None, None)]
    built = ig_ifelse.ifelse(c, [pt.exp(a) / 3, m2 * 2], [pt.log(b), pt.sqrt(m4)])
    assert isinstance(built, list)
    assert [o.type for o in built] == [o.type for o in OUTPUTS]


def test_plain_ifelse_lifts_and_gives_vanillas_values(functions):
    ours, vanilla = functions
    assert any(isinstance(n.op, IfElse) for n in ours.maker.fgraph.apply_nodes)
    for cond in (True, False):
        got, expected = ours(cond, *VALUES), vanilla(cond, *VALUES)
        assert [g.shape for g in got] == ([(20,), (5, 5)] if cond else [(40,), (6, 6)])
        for g, e in zip(got, expected, strict=True):
            np.testing.assert_allclose(g, e)


def test_branches_of_different_ranks_or_dtypes_still_name_the_output():
    then_c = ig_ifelse.inner_graph([pt.exp(a)], [], capture="leaves")
    for other in (pt.exp(m2), pt.cast(b, "float32")):
        else_c = ig_ifelse.inner_graph([other], [], capture="leaves")
        with pytest.raises(BodyTypeError, match="output 0 has type .* in the then branch and .* in the else branch"):
            IfElse(len(then_c.captured))(c, then_c.function, else_c.function, *then_c.captured, *else_c.captured)
