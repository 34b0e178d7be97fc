"""``innergraph_until_to_while``: a Scan with ``until`` read only at its final states becomes one
WhileLoop (by default under Numba and JAX, and under py and cvm with INNERGRAPH_UNTIL_TO_WHILE=always); the
values equal vanilla PyTensor's; a Scan any other way (traces read whole, JAX, the rewrite
excluded) stays a Scan."""

from typing import Any

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.compile.mode import Mode, get_mode
from pytensor.scan.op import Scan as NativeScan
from pytensor.scan.utils import until

from innergraph.ops.loop import WhileLoop
from innergraph.ops.scan import Scan
from innergraph.rewriting.until_while import ENV_FLAG
from vanilla import vanilla_function

c = pt.dvector("c")
a, x0 = pt.dscalar("a"), pt.dscalar("x0")
n = pt.lscalar("n")
VALUES: list[Any] = [np.linspace(1.0, 50.0, 7), 0.7, 0.3, 40]


def newton(c):
    """Newton's iteration for sqrt(c) written as PyTensor users do: scan until, the trace's last row."""
    def step(x):
        y = 0.5 * (x + c / x)
        return y, until(pt.max(pt.abs(y * y - c)) < 1e-10)

    return pytensor.scan(step, outputs_info=[pt.ones_like(c)], n_steps=200, return_updates=False)[-1]


def two_states(a, x0, n):
    """A fixed point with a step counter: two states, a non-sequence, a symbolic bound."""
    def step(x, k, a):
        y = pt.cos(a * x)
        return [y, k + 1], until(pt.abs(y - x) < 1e-12)

    xs, ks = pytensor.scan(step, outputs_info=[x0, pt.constant(0, dtype="int64")], non_sequences=[a], n_steps=n, return_updates=False)
    return [xs[-1], ks[-1]]


def graphs():
    return [newton(c), *two_states(a, x0, n)]


def kinds(fn):
    return sorted(type(node.op).__name__ for node in fn.maker.fgraph.apply_nodes if isinstance(node.op, WhileLoop | Scan | NativeScan))


def mode_for(linker, convert=True):
    mode = get_mode("NUMBA") if linker == "numba" else Mode(linker=linker, optimizer="fast_run")
    return mode.including("scan_until_to_while") if convert else mode


@pytest.fixture(scope="module", params=["numba", "cvm", "py"])
def compiled(request):
    """(converted function, vanilla function) per linker, compiled once for the module."""
    mode = mode_for(request.param)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(ENV_FLAG, "always")
        fn = pytensor.function([c, a, x0, n], graphs(), mode=mode)
    vanilla = vanilla_function(lambda: ([c, a, x0, n], graphs()), mode_for(request.param, convert=False), first_call=VALUES)
    return request.param, fn, vanilla


def test_each_until_scan_is_one_while_loop_with_vanilla_values(compiled):
    linker, fn, vanilla = compiled
    assert kinds(fn) == ["WhileLoop", "WhileLoop"], linker
    assert kinds(vanilla) == ["Scan", "Scan"]
    for bound in (40, 3, 1, 0):  # converged, stopped by n_steps, one step, no step at all
        values = [*VALUES[:3], bound]
        for got, want in zip(fn(*values), vanilla(*values), strict=True):
            np.testing.assert_allclose(got, want, rtol=0, atol=0)
    assert fn(*VALUES)[2] < 40  # the condition, not the bound, stopped the fixed point


def test_the_loop_is_a_bounded_do_while_with_the_negated_condition(compiled):
    linker, fn, _ = compiled
    loops = [node for node in fn.maker.fgraph.apply_nodes if isinstance(node.op, WhileLoop)]
    assert {(node.op.do_while, node.op.bounded) for node in loops} == {(True, True)}
    assert sorted(node.op.n_carry for node in loops) == [1, 2]


def test_not_converted_by_default_under_thunk_linkers(monkeypatch):
    monkeypatch.delenv(ENV_FLAG, raising=False)
    fn = pytensor.function([c], newton(c), mode=mode_for("cvm"))
    assert kinds(fn) == ["Scan"]


@pytest.mark.parametrize("name", ["NUMBA", "JAX"])
def test_on_by_default_under_numba_and_jax_and_excluded_on_request(name):
    cs = pt.dvector("cs", shape=(7,))
    default = pytensor.function([cs], newton(cs), mode=get_mode(name))
    excluded = pytensor.function([cs], newton(cs), mode=get_mode(name).excluding("scan_until_to_while"))
    assert kinds(default) == ["WhileLoop"] and kinds(excluded) == ["Scan"]
    np.testing.assert_array_equal(default(VALUES[0]), excluded(VALUES[0]))


@pytest.fixture(scope="module")
def numba_others():
    """Under Numba: a trace read whole, a trace read at [-2], the rewrite excluded; with vanilla twins."""
    def whole(a, x0, n):
        def step(x):
            return pt.cos(a * x), until(x > 10)

        return pytensor.scan(step, outputs_info=[x0], n_steps=n, return_updates=False)

    trace = whole(a, x0, n)
    outs = [trace, trace[-2]]
    mode = mode_for("numba")
    kept = pytensor.function([a, x0, n], outs, mode=mode)
    excluded = pytensor.function([c], newton(c), mode=mode.excluding("scan_until_to_while"))
    vanilla = vanilla_function(lambda: ([a, x0, n], [(t := whole(a, x0, n)), t[-2]]), get_mode("NUMBA"), first_call=(0.7, 0.3, 9))
    return kept, excluded, vanilla


def test_traces_read_otherwise_and_exclusion_keep_the_scan(numba_others):
    kept, excluded, vanilla = numba_others
    assert kinds(kept) == ["Scan"] and kinds(excluded) == ["Scan"]
    for got, want in zip(kept(0.7, 0.3, 9), vanilla(0.7, 0.3, 9), strict=True):
        np.testing.assert_array_equal(got, want)
    np.testing.assert_allclose(excluded(VALUES[0]), np.sqrt(VALUES[0]), rtol=1e-10)


def test_under_jax_the_until_scan_runs_as_a_while_loop():
    from innergraph.core.dispatch import runs
    from innergraph.core.dispatch import load_on_demand
    from pytensor.link.jax.linker import JAXLinker

    load_on_demand(JAXLinker)
    cs = pt.dvector("cs", shape=(7,))
    fn = pytensor.function([cs], newton(cs), mode=get_mode("JAX").including("scan_until_to_while"))
    assert runs(JAXLinker(), WhileLoop)  # the loop's JAX code, generated from its declaration
    assert kinds(fn) == ["WhileLoop"]
    np.testing.assert_allclose(fn(VALUES[0]), np.sqrt(VALUES[0]), rtol=1e-10)
