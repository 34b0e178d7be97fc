"""Untraced states on PyTensor's own Scan runtime (``Scan.perform`` and its C twin).

That runtime keeps the inner function's intermediate storage from step to step
and feeds an untraced state's next value back as the next step's input. On
PyTensor 3.0 an inner function computing that value in place of an intermediate
(``Add{inplace}`` over a ``Sum``) lost the state at the next step, so innergraph
traced such states again for that runtime. PyTensor 3.3 copies the value where it
aliases (``Scan.prepare_fgraph``, PyTensor issue #2252): innergraph now lowers
untraced states as they are for every linker, as it always did for the JIT ones.
"""

from typing import Any

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.compile.mode import Mode
from pytensor.compile.ops import DeepCopyOp
from pytensor.link.vm import VMLinker
from pytensor.scan.op import Scan as NativeScan

import innergraph
from typed import grad as grad_of

s0, k = pt.dvector("s0"), pt.dscalar("k")
TRACE = pytensor.scan(lambda s: s * k + 1.0, outputs_info=[s0], n_steps=3, return_updates=False)
GRAD = grad_of(TRACE[-1].sum(), [k])  # reverse loop: a mit-mot and an untraced accumulator
SAMPLE = (np.array([1.0, 2.0]), 2.5)
EXPECTED = 68.25  # d/dk of sum(s3): sum(s2) + k sum(s1) + k^2 sum(s0)

LINKERS: dict[str, Any] = {
    "py": "py",
    "cvm": "cvm",
    "vm": VMLinker(use_cloop=False, c_thunks=False),
    "numba": "numba",
}


def _native_scans(fn):
    return [n for n in fn.maker.fgraph.apply_nodes if isinstance(n.op, NativeScan)]


@pytest.mark.parametrize("name", sorted(LINKERS))
def test_untraced_gradient_accumulator_matches_vanilla(name):
    mode = Mode(linker=LINKERS[name], optimizer="fast_run")
    fn = pytensor.function([s0, k], GRAD, mode=mode)
    (got,) = fn(*SAMPLE)
    with innergraph.uninstalled():
        (expected,) = pytensor.function([s0, k], GRAD, mode=mode)(*SAMPLE)
    assert expected == pytest.approx(EXPECTED)
    assert got == pytest.approx(expected, rel=1e-12)
    untraced = [n for n in _native_scans(fn) if n.op.info.n_untraced_sit_sot]
    copied = [
        isinstance(o.owner.op, DeepCopyOp) if o.owner else False
        for n in untraced
        for o in n.op.inner_untraced_sit_sot_outs(n.op.inner_outputs)
    ]
    # every runtime converts the loop as it is: the accumulator and the carried cotangent stay untraced, uncopied
    assert len(copied) == 2 and not any(copied)


def test_an_in_graph_scan_run_by_its_thunk_gives_vanillas_value():
    """Not lowered (its lowering excluded), the in-graph Scan runs its native Scan, rewritten for the runtime."""
    from innergraph.ops.scan import Scan

    mode = Mode(linker="cvm", optimizer="fast_run").excluding("innergraph_lower")
    fn = pytensor.function([s0, k], GRAD, mode=mode)
    consumers = [n for n in fn.maker.fgraph.apply_nodes if isinstance(n.op, Scan)]
    assert consumers and not _native_scans(fn)
    (got,) = fn(*SAMPLE)
    assert got == pytest.approx(EXPECTED)


def test_the_runtime_keeps_a_state_computed_in_place_of_an_intermediate():
    """An untraced state whose next value the inner function computes in place survives PyTensor 3.3's runtime.

    On PyTensor 3.0 this form gave 37.5 (the carried sum overwritten); a step of its own
    keeps the bodies of the other tests (and their cached native Scans) apart.
    """
    trace = pytensor.scan(lambda s: s * k + 2.0, outputs_info=[s0], n_steps=3, return_updates=False)
    grad = grad_of(trace[-1].sum(), [k])
    mode = Mode(linker="py", optimizer="fast_run")
    fn = pytensor.function([s0, k], grad, mode=mode)
    assert any(n.op.info.n_untraced_sit_sot for n in _native_scans(fn))
    (got,) = fn(*SAMPLE)
    with innergraph.uninstalled():
        (right,) = pytensor.function([s0, k], grad, mode=mode)(*SAMPLE)
    assert right == pytest.approx(80.25)
    assert got == pytest.approx(right, rel=1e-12)


@pytest.mark.parametrize("linker", ["py", "cvm"])
def test_nested_loops_gradient_of_a_vector_non_sequence(linker):
    """The inner reverse loop accumulates ``v``'s gradient in an untraced state (found by issue 24's work)."""
    X, v, init = pt.dmatrix("X"), pt.dvector("v"), pt.dscalar("init")

    def outer(row, s, w):
        inner = pytensor.scan(
            lambda xt, s, w: s * 0.9 + xt * pt.sum(w) + w[0], sequences=[row], outputs_info=[s], non_sequences=[w],
            return_updates=False,
        )
        return inner[-1]

    trace = pytensor.scan(outer, sequences=[X], outputs_info=[init], non_sequences=[v], return_updates=False)
    grad = grad_of(trace[-1], v)
    values = (np.arange(12.0).reshape(3, 4) / 10, np.array([0.5, -0.2, 0.3]), 0.7)
    mode = Mode(linker=linker, optimizer="fast_run")
    got = pytensor.function([X, v, init], grad, mode=mode)(*values)
    with innergraph.uninstalled():
        expected = pytensor.function([X, v, init], grad, mode=mode)(*values)
    np.testing.assert_allclose(got, expected, rtol=1e-12)
    np.testing.assert_allclose(expected, [12.0, 4.82429536, 4.82429536], rtol=1e-8)
