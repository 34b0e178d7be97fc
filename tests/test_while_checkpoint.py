"""Checkpointed reverse mode for `innergraph.while_loop(max_steps=, checkpoint=)`: values against
the stored-trace gradient (py, cvm, numba) and vanilla PyTensor, the segmented form in the
compiled graph, memory at a long run, the policy's checks."""

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.compile.mode import Mode
from pytensor.scan.op import Scan as NativeScan
from pytensor.scan.utils import until

import innergraph
from innergraph.ops import checkpoint
from innergraph_bench.checkpoint_bench import peak_bytes
from typed import grad

x0, w, lim = pt.dscalar("x0"), pt.dscalar("w"), pt.dscalar("lim")
v0 = pt.dvector("v0")
INPUTS = [x0, v0, w, lim]
MAX_STEPS = 12
#: the loop stops when ``a`` reaches ``lim``: before any step, after a few, or at max_steps
LIMITS = (-10.0, 0.5, 1.5, 1e9)


def _step(s):
    a, v = s
    return a * w + pt.sin(v).sum() * 0.1 + 0.05, v * 0.9 + pt.tanh(a * w)


def _gradients(policy, default=None):
    with checkpoint.checkpointing(default):
        a, v = innergraph.while_loop(lambda s: s[0] < lim, _step, (x0, v0), max_steps=MAX_STEPS, checkpoint=policy)
        cost = a**2 + (v**3).sum()
        return [cost, *grad(cost, [x0, v0, w])]


def _vanilla_gradients():
    """The same loop as a plain `pytensor.scan` with ``until``, differentiated by PyTensor alone."""

    def step(a, v, go, w_, lim_):
        a_n, v_n = a * w_ + pt.sin(v).sum() * 0.1 + 0.05, v * 0.9 + pt.tanh(a * w_)
        a_n, v_n = pt.switch(go, a_n, a), pt.switch(go, v_n, v)
        go_n = go & (a_n < lim_)
        return [a_n, v_n, go_n], until(pt.eq(go_n, 0))

    (a, v, _) = pytensor.scan(step, outputs_info=[x0, v0, x0 < lim], non_sequences=[w, lim], n_steps=MAX_STEPS, return_updates=False)
    a_f = pt.concatenate([pt.shape_padleft(x0), a])[-1]
    v_f = pt.concatenate([pt.shape_padleft(v0), v])[-1]
    cost = a_f**2 + (v_f**3).sum()
    return [cost, *grad(cost, [x0, v0, w])]


def _mode(linker):
    return Mode(linker=linker, optimizer="fast_run")


def _segment_loops(fn):
    return [n for n in fn.maker.fgraph.apply_nodes if isinstance(n.op, NativeScan) and n.op.name == "checkpoint_segments"]


def _values(limit):
    return [0.3, np.array([0.1, -0.2, 0.3]), 0.8, limit]


def _assert_close(actual, expected):
    for got, want in zip(actual, expected, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.fixture(scope="module")
def vanilla():
    with innergraph.uninstalled():
        return pytensor.function(INPUTS, _vanilla_gradients(), mode=_mode("cvm"))


@pytest.fixture(scope="module", params=["py", "cvm"])
def functions(request):
    linker = request.param
    built = {p: pytensor.function(INPUTS, _gradients(p), mode=_mode(linker)) for p in (None, "sqrt", 5)}
    return linker, built


@pytest.mark.parametrize("limit", LIMITS)
def test_gradient_equals_stored_trace_and_vanilla(limit, functions, vanilla):
    _, built = functions
    values = _values(limit)
    want = built[None](*values)
    _assert_close(want, vanilla(*values))
    for policy in ("sqrt", 5):
        _assert_close(built[policy](*values), want)


def test_checkpointed_gradient_runs_the_segmented_loops(functions):
    _, built = functions
    assert len(_segment_loops(built["sqrt"])) == 1 and len(_segment_loops(built[5])) == 1
    assert _segment_loops(built[None]) == []


def test_numba_checkpointed_gradient_equals_stored_trace():
    """One scalar carry under Numba (its JIT compilation dominates this test's time), against cvm's stored
    trace (Numba's own stored-trace gradient at zero steps: ``test_codegen``'s two-arrays test)."""

    def build(policy, linker):
        s = innergraph.while_loop(lambda s: s < lim, lambda s: s * w + pt.sin(s) * 0.1 + 0.05, x0, max_steps=MAX_STEPS, checkpoint=policy)
        return pytensor.function([x0, w, lim], [s, *grad(s**2, [x0, w])], mode=_mode(linker))

    sqrt, reference = build("sqrt", "numba"), build(None, "cvm")
    assert len(_segment_loops(sqrt)) == 1
    for limit in LIMITS:
        _assert_close(sqrt(0.3, 1.1, limit), reference(0.3, 1.1, limit))


def test_the_default_policy_leaves_while_loops_alone():
    """Checkpointed, the reverse pass runs all max_steps steps: only the loop's own policy asks for that."""
    fn = pytensor.function(INPUTS, _gradients(None, default="sqrt"), mode=_mode("cvm"))
    assert _segment_loops(fn) == []


def test_checkpoint_needs_max_steps():
    with pytest.raises(ValueError, match=r"while_loop: checkpoint='sqrt' needs max_steps="):
        innergraph.while_loop(lambda s: s < 1.0, lambda s: s * w, x0, checkpoint="sqrt")
    with pytest.raises(ValueError, match=r"while_loop: checkpoint policy must be"):
        innergraph.while_loop(lambda s: s < 1.0, lambda s: s * w, x0, max_steps=3, checkpoint=0)


def _long(policy, n):
    s, _ = innergraph.while_loop(
        lambda c: c[1] < n, lambda c: (c[0] * w + pt.sin(c[0]) * 0.01, c[1] + 1.0), (x0, pt.constant(0.0)), max_steps=n, checkpoint=policy
    )
    (g,) = grad(s, [w])
    return pytensor.function([x0, w], [s, g], mode=_mode("cvm"))


def test_checkpointed_reverse_pass_stores_sqrt_n_carries():
    n = 4000
    stored_fn, sqrt_fn = _long(None, n), _long("sqrt", n)
    values = [0.5, 0.999]
    _assert_close(sqrt_fn(*values), stored_fn(*values))
    stored_peak, sqrt_peak = peak_bytes(stored_fn, values), peak_bytes(sqrt_fn, values)
    assert stored_peak >= n * 8  # the stored carry history alone
    assert sqrt_peak < stored_peak / 5, (sqrt_peak, stored_peak)
