"""A Scan built with a mode of its own keeps vanilla's inner graph (`convert._rewritten_by_its_own_mode`).

PyTensor rewrites a Scan's inner graph with the Scan's own mode; a lifted body is
rewritten with the outer graph's. A loop whose mode keeps a rewrite off (here the
ones that turn ``log(1 + exp(z))`` into ``softplus(z)``) must compute what vanilla
computes: ``log1p(exp(1000))`` overflows to ``inf`` where ``softplus(1000)`` is 1000.
"""

from typing import Any

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.compile.mode import Mode, get_default_mode
from pytensor.scan.op import Scan as NativeScan

import innergraph
from innergraph.lifting.rules import _rewritten_by_its_own_mode

NO_SOFTPLUS = get_default_mode().excluding("local_log1p_plusminus_exp", "local_exp_log1p_softplus")
X = np.array([1.0, -2.0, 10_000.0])  # the last step's log(1 + exp(acc * x)) overflows without softplus


def program(scan_mode) -> tuple[list, Any]:
    x = pt.dvector("x")
    ys = pytensor.scan(
        lambda xt, acc: acc * 0.5 + pt.log(1 + pt.exp(acc * xt)),
        sequences=[x],
        outputs_info=[pt.constant(0.1, dtype="float64")],
        mode=scan_mode,
        return_updates=False,
    )
    return [x], ys[-1]


def scan_op(out):
    from pytensor.graph.traversal import ancestors

    (op,) = {v.owner.op for v in ancestors([out]) if v.owner is not None and isinstance(v.owner.op, NativeScan)}
    return op


def inner_op_names(fn):
    (scan,) = [n for n in fn.maker.fgraph.apply_nodes if isinstance(n.op, NativeScan)]
    return sorted(str(m.op) for m in scan.op.fgraph.apply_nodes)


@pytest.mark.parametrize("linker", ["numba", "cvm"])
@pytest.mark.parametrize(
    "scan_mode",
    [NO_SOFTPLUS, Mode(linker="cvm", optimizer=None), "FAST_COMPILE"],  # type: ignore[arg-type]  # PyTensor accepts None: no rewriting
    ids=["excluding-softplus", "optimizer-None", "FAST_COMPILE"],
)
def test_a_scan_with_its_own_mode_computes_what_vanilla_computes(linker, scan_mode):
    mode = Mode(linker=linker, optimizer="fast_run")
    with innergraph.uninstalled():
        ref = pytensor.function(*program(scan_mode), mode=mode)
        want = ref(X)
    fn = pytensor.function(*program(scan_mode), mode=mode)
    np.testing.assert_array_equal(fn(X), want)
    assert inner_op_names(fn) == inner_op_names(ref)
    assert not any("softplus" in name for name in inner_op_names(fn))
    assert np.isinf(want)  # log(1 + exp(z)) unrewritten overflows: softplus would give a finite number


def test_a_scan_without_a_mode_or_with_the_compiled_ones_is_lifted():
    # PyTensor's default (no mode, what PyMC's loops use), and modes whose rewriter query
    # is the compiled mode's whatever their linker
    from pytensor import config

    compiled = Mode(linker="numba", optimizer="fast_run")
    same_query = [None, Mode(linker="cvm", optimizer="fast_run"), Mode(linker="numba", optimizer="fast_run")]
    other_query = [NO_SOFTPLUS, Mode(linker="cvm", optimizer=None),  # type: ignore[arg-type]  # None: no rewriting
                   "FAST_COMPILE", compiled.including("fast_compile")]
    with config.change_flags(mode=compiled):
        for scan_mode in same_query:
            (_, out) = program(scan_mode)
            assert not _rewritten_by_its_own_mode(scan_op(out)), scan_mode
        for scan_mode in other_query:
            (_, out) = program(scan_mode)
            assert _rewritten_by_its_own_mode(scan_op(out)), scan_mode


def test_the_default_scan_is_still_rewritten_with_the_outer_graph():
    fn = pytensor.function(*program(None), mode=Mode(linker="numba", optimizer="fast_run"))
    assert any("softplus" in name for name in inner_op_names(fn))
    assert np.isfinite(fn(X))


def test_a_call_compiled_without_rewriting_runs_the_loop_in_its_body():
    """An in-graph call holding a loop under ``Mode(optimizer=None)``: its body is compiled when it first runs.

    That compilation rewrites the body with the default mode's rewriter, queried once (a
    rewriter object, no query); the loop lowered there cannot carry that mode less the
    passes the body went through, so it rewrites its own inner graph, as under a debugging
    mode. Lowering it raised AttributeError (``excluding``), logged unless rewrite errors
    raise.
    """
    x = pt.dvector("x")

    def body(v):
        total = pytensor.scan(lambda a, acc: acc + pt.exp(a), sequences=[v], outputs_info=[pt.zeros(())], return_updates=False)
        return total[-1] * 2.0

    with pytensor.config.change_flags(on_opt_error="raise"):
        fn = pytensor.function([x], innergraph.call(body, x), mode=Mode(linker="py", optimizer=None))  # type: ignore[arg-type]  # None: no rewriting
        np.testing.assert_allclose(fn(X[:2]), 2.0 * np.exp(X[:2]).sum(), rtol=1e-12)
