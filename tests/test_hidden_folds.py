"""Bodies with a hidden fold are compiled with canonicalize and stabilize (`innergraph.core.hidden_folds`).

VARMAX's Kalman filter (issue 21): its forward body and its gradient body compute
the same zero matrix (``dot(diag(mask), obs_cov)`` with a zero ``obs_cov``), which
canonicalize turns into ``Alloc(0.0, 2, 2)``; in the shared graph that node is one
node, and the gradient body also uses it as an ``IncSubtensor`` buffer, so
``Alloc.do_constant_folding`` declines and the forward body kept a zero *expression*
that, alone, canonicalize folds away. The lowered body skipped canonicalize, so the
forward loop kept two Ops per step that vanilla does not run (a ``Dot`` by a zero
matrix and an increment by 0.0).

Here the same mechanism without PyMC: a loop reads the diagonal of a zero matrix
that the outer graph writes in place (the two ``zeros((2, 2))`` are one node after
merging). Without the fix the lowered body keeps the zero matrix (an ``Alloc``) and
the ``AdvancedIncSubtensor`` that builds ``diag(0 * ...)``; with it, the body is
compiled with canonicalize and both are gone.
"""

from typing import Any

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.compile.mode import Mode
from pytensor.graph.basic import Constant
from pytensor.scan.op import Scan
from pytensor.tensor.basic import Alloc

from innergraph.core.graph import param
from innergraph.core.hidden_folds import hidden_folds
from innergraph.core.types import Body
from vanilla import vanilla_function

M = pt.TensorType("float64", shape=(2, 2))
V = pt.TensorType("float64", shape=(2,))


def test_an_alloc_read_by_extract_diag_is_a_hidden_fold():
    zero = pt.zeros((2, 2))
    (found,) = hidden_folds([pt.diagonal(zero) * param(0, V)])
    assert found is zero.owner


@pytest.mark.parametrize(
    "make",
    [
        lambda z, p: pt.set_subtensor(z[[0, 1], [0, 1]], p),  # a buffer written in place: vanilla keeps the Alloc too
        lambda z, p: z + p[None, :],  # an Elemwise client absorbs it
        lambda z, p: z,  # a body output
    ],
    ids=["in-place buffer", "elemwise", "output"],
)
def test_allocs_that_vanilla_does_not_fold_are_not_hidden_folds(make):
    assert hidden_folds([make(pt.zeros((2, 2)), param(0, V))]) == []


def test_a_body_without_constant_only_nodes_has_none():
    p = param(0, M)
    assert hidden_folds([pt.exp(p) * p]) == []


def test_a_blocking_client_outside_the_body_does_not_count():
    """The same node with a blocking client outside the body is still a hidden fold inside it."""
    zero = pt.zeros((2, 2))
    outside = pt.set_subtensor(zero[[0, 1], [0, 1]], pt.dvector())  # not part of the body
    body = [pt.diagonal(zero) * param(0, V)]
    assert outside.owner.inputs[0] is zero
    assert [n.op for n in hidden_folds(body)] == [zero.owner.op]
    assert all(isinstance(i, Constant) for i in zero.owner.inputs)


def _graph() -> tuple[list, Any]:
    seq, x0, w = pt.matrix("seq", shape=(None, 2)), pt.matrix("x0", shape=(2, 2)), pt.vector("w", shape=(2,))

    def step(s, P):
        d = pt.diag(pt.diagonal(pt.zeros((2, 2))) * pt.diagonal(P))  # zero, but reads the carry
        return pt.tanh(P + pt.linalg.solve(P + 3.0 * pt.eye(2), d) + pt.outer(s, s))

    out = pytensor.scan(step, sequences=[seq], outputs_info=[x0], return_updates=False)
    buffer = pt.set_subtensor(pt.zeros((2, 2))[[0, 1], [0, 1]], w)  # the same zero matrix, written in place
    return [seq, x0, w], [out[-1], buffer]


@pytest.fixture(scope="module")
def compiled():
    values = [np.random.default_rng(0).normal(size=(5, 2)), np.eye(2), np.array([1.0, 2.0])]
    mode = Mode("cvm", "fast_run")
    fn = pytensor.function(*_graph(), mode=mode)
    vanilla = vanilla_function(_graph, mode, first_call=values)  # built, compiled and first called uninstalled
    return {"innergraph": (fn, fn(*values)), "vanilla": (vanilla, vanilla(*values))}


def _loop_ops(fn):
    (scan,) = [n for n in fn.maker.fgraph.apply_nodes if isinstance(n.op, Scan)]
    return [n for n in scan.op.fn.maker.fgraph.apply_nodes if type(n.op).__name__ != "DeepCopyOp"]


def test_the_loop_keeps_no_zero_matrix(compiled):
    ops = _loop_ops(compiled["innergraph"][0])
    assert not [n for n in ops if isinstance(n.op, Alloc | pt.subtensor.AdvancedIncSubtensor)], ops
    assert len(ops) <= len(_loop_ops(compiled["vanilla"][0]))


def test_values_equal_vanillas(compiled):
    for ours, theirs in zip(compiled["innergraph"][1], compiled["vanilla"][1], strict=True):
        np.testing.assert_array_equal(ours, theirs)


def _body(outputs):
    from innergraph.core.types import InnerGraphType

    return Body(InnerGraphType((V,), tuple(o.type for o in outputs)), outputs)


def test_one_conversion_gives_a_hidden_fold_the_whole_rewriter_whatever_body_came_first():
    """`prepared_body` shares late passes within a conversion by `body_rewriter`'s own kinds."""
    from innergraph.backends.numba_code import one_conversion, prepared_body
    from innergraph.core.types import mark_rewritten

    p = param(0, V)
    plain = mark_rewritten(_body([pt.exp(p)]))
    folded = mark_rewritten(_body([pt.diagonal(pt.zeros((2, 2))) * p + p]))  # canonicalize: p
    for order in ([plain, folded], [folded, plain]):
        with one_conversion():
            prepared = {id(b): prepared_body(b) for b in order}
        ops = [type(n.op).__name__ for n in prepared[id(folded)].apply_nodes]
        assert "Alloc" not in ops and "ExtractDiag" not in ops, (order.index(folded), ops)
