"""Checkpointed reverse mode for `innergraph.fori_loop`: values against the stored-trace
gradient and vanilla PyTensor, the segmented form in the compiled graph, memory, policy."""

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.compile.mode import Mode
from pytensor.graph.traversal import ancestors
from pytensor.scan.op import Scan as NativeScan

import innergraph
from innergraph.ops import checkpoint
from innergraph_bench.checkpoint_bench import peak_bytes
from typed import grad

x0, w = pt.dscalar("x0"), pt.dscalar("w")
v0 = pt.dvector("v0")
lo, hi = pt.lscalar("lo"), pt.lscalar("hi")
INPUTS = [x0, v0, w, lo, hi]
LENGTHS = (0, 1, 3, 7, 12)  # no step, fewer steps than a segment, whole segments, a tail


def _step(i, s):
    """Two carried values, a scalar and a vector, coupled, reading the index and ``w``."""
    a, v = s
    return a * w + pt.sin(v).sum() * 0.1 + pt.cast(i, "float64") * 0.01, v * 0.9 + pt.tanh(a * w)


def _scan_step(i, a, v, w_):
    return a * w_ + pt.sin(v).sum() * 0.1 + pt.cast(i, "float64") * 0.01, v * 0.9 + pt.tanh(a * w_)


def _cost(a, v):
    return a**2 + (v**3).sum()


def _fori_gradients(own=None, default=None, order=1):
    with checkpoint.checkpointing(default):
        a, v = innergraph.fori_loop(lo, hi, _step, (x0, v0), checkpoint=own)
        cost = _cost(a, v)
        grads = grad(cost, [x0, v0, w])
        if order == 2:
            grads = [*grads, *grad(grads[0] + grads[2], [x0, w])]
    return [cost, *grads]


def _vanilla_gradients():
    """The same recursion as a plain `pytensor.scan`, differentiated by PyTensor alone."""
    a, v = pytensor.scan(_scan_step, sequences=[pt.arange(lo, pt.maximum(hi, lo))], outputs_info=[x0, v0], non_sequences=[w], return_updates=False)
    a_f = pt.concatenate([pt.shape_padleft(x0), a])[-1]
    v_f = pt.concatenate([pt.shape_padleft(v0), v])[-1]
    cost = _cost(a_f, v_f)
    return [cost, *grad(cost, [x0, v0, w])]


def _mode(linker):
    return Mode(linker=linker, optimizer="fast_run")


def _segment_loops(fn):
    return [n for n in fn.maker.fgraph.apply_nodes if isinstance(n.op, NativeScan) and n.op.name == "checkpoint_segments"]


def _values(n, rng):
    return [0.3, rng.normal(size=3), 0.8, 2, 2 + n]


def _assert_close(actual, expected):
    for got, want in zip(actual, expected, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.fixture(scope="module")
def vanilla():
    with innergraph.uninstalled():
        return pytensor.function(INPUTS, _vanilla_gradients(), mode=_mode("cvm"))


@pytest.fixture(scope="module", params=["py", "cvm"])
def stored(request):
    return request.param, pytensor.function(INPUTS, _fori_gradients(), mode=_mode(request.param))


@pytest.fixture(scope="module", params=[("own", 1), ("own", 5), ("own", "sqrt"), ("default", "sqrt"), ("default", 3)])
def checkpointed(request):
    how, policy = request.param
    kwargs = {"own": policy} if how == "own" else {"default": policy}
    return {linker: pytensor.function(INPUTS, _fori_gradients(**kwargs), mode=_mode(linker)) for linker in ("py", "cvm")}


@pytest.mark.parametrize("n", LENGTHS)
def test_gradient_equals_stored_trace_and_vanilla(n, checkpointed, stored, vanilla, rng):
    linker, reference = stored
    values = _values(n, rng)
    got = checkpointed[linker](*values)
    _assert_close(got, reference(*values))
    _assert_close(got, vanilla(*values))


def test_checkpointed_gradient_runs_the_segmented_loops(checkpointed, stored):
    _, reference = stored
    assert len(_segment_loops(checkpointed["cvm"])) == 1
    assert _segment_loops(reference) == []


def test_numba_checkpointed_gradient_equals_stored_trace():
    """One scalar carry under Numba (its JIT compilation dominates this test's time)."""

    def build(policy):
        s = innergraph.fori_loop(lo, hi, lambda i, s: s * w + pt.sin(s) * 0.1, x0, checkpoint=policy)
        return pytensor.function([x0, w, lo, hi], [s, *grad(s**2, [x0, w])], mode=_mode("numba"))

    stored_fn, sqrt_fn = build(None), build("sqrt")
    assert len(_segment_loops(sqrt_fn)) == 1 and _segment_loops(stored_fn) == []
    for n in (0, 5, 11):
        values = [0.4, 0.9, 1, 1 + n]
        _assert_close(sqrt_fn(*values), stored_fn(*values))


def test_second_derivative_equals_stored_trace(rng):
    got, want = (pytensor.function(INPUTS, _fori_gradients(own=p, order=2), mode=_mode("cvm")) for p in (4, None))
    assert len(_segment_loops(got)) >= 1
    # 0 steps included: the segment loop then runs one empty segment (a segment loop of
    # zero steps failed here, design/checkpointing.md)
    for n in (0, 1, 3, 9):
        values = _values(n, rng)
        _assert_close(got(*values), want(*values))


def _long(policy, n):
    s = innergraph.fori_loop(0, n, lambda i, s: s * w + pt.sin(s) * 0.01, x0, checkpoint=policy)
    (g,) = grad(s, [w])
    return pytensor.function([x0, w], [s, g], mode=_mode("cvm"))


def test_checkpointed_reverse_pass_stores_sqrt_n_carries():
    n = 4000
    stored_fn, sqrt_fn = _long(None, n), _long("sqrt", n)
    values = [0.5, 0.999]
    _assert_close(sqrt_fn(*values), stored_fn(*values))
    stored_peak, sqrt_peak = peak_bytes(stored_fn, values), peak_bytes(sqrt_fn, values)
    # the stored trace alone is n float64s (and its reverse-pass cotangents as many again)
    assert stored_peak >= n * 8
    assert sqrt_peak < stored_peak / 5, (sqrt_peak, stored_peak)


def test_own_none_policy_keeps_the_default():
    with checkpoint.checkpointing("sqrt"):
        s = innergraph.fori_loop(0, 10, lambda i, s: s * w, x0)
        (g,) = grad(s, [w])
    assert len(_segment_loops(pytensor.function([x0, w], g, mode=_mode("cvm")))) == 1


def test_own_policy_wins_over_the_default():
    """A loop's own segment length is used whatever the default (the segment loop runs n // k times)."""
    with checkpoint.checkpointing(2):
        s = innergraph.fori_loop(0, 12, lambda i, s: s * w, x0, checkpoint=6)
        (g,) = grad(s, [w])
    (segments,) = [
        v.owner for v in ancestors([g]) if v.owner is not None and isinstance(v.owner.op, NativeScan) and v.owner.op.name == "checkpoint_segments"
    ]
    # its trip count is 12 // 6 under the loop's own k = 6 (12 // 2 under the default)
    assert segments.inputs[0].eval({x0: 1.0, w: 0.9}, on_unused_input="ignore") == 2
    np.testing.assert_allclose(pytensor.function([x0, w], g, mode=_mode("py"))(1.0, 0.9), 12 * 0.9**11)


@pytest.mark.parametrize("bad", [0, -3, "log", 2.5, True])
def test_invalid_policy_names_the_loop(bad):
    with pytest.raises(ValueError, match=r"fori_loop: checkpoint policy must be"):
        innergraph.fori_loop(0, 3, lambda i, s: s * w, x0, checkpoint=bad)


@pytest.mark.parametrize("linker", ["py", "cvm"])
def test_zero_step_loop_leaves_the_callers_arrays_alone(linker):
    """A loop that runs no step returned its input arrays, which later in-place Ops overwrote."""
    vec = pt.dvector("vec")
    out = innergraph.fori_loop(lo, hi, lambda i, s: s * w, vec)
    back = innergraph.while_loop(lambda s: s.sum() < 0.0, lambda s: s - 1.0, vec)
    fn = pytensor.function([vec, w, lo, hi], (out**3).sum() + (back**3).sum(), mode=_mode(linker))
    given = np.array([1.0, 2.0, 3.0])
    for _ in range(3):
        np.testing.assert_allclose(fn(given, 0.5, 4, 4), 72.0)
        np.testing.assert_array_equal(given, [1.0, 2.0, 3.0])


def test_checkpointed_scan_over_an_integer_sequence():
    """An integer sequence (a loop index) gets zero gradients, not a disconnected one PyTensor rejects."""
    n = pt.lscalar("n")
    grads = {}
    for policy in (None, "sqrt"):
        t = innergraph.scan(
            lambda i, s: s * w + pt.cast(i, "float64"), sequences=[pt.arange(n)], outputs_info=[x0], return_updates=False, checkpoint=policy
        )
        grads[policy] = pytensor.function([x0, w, n], grad(t[-1], [x0, w]), mode=_mode("py"))
    for steps in (1, 7):
        _assert_close(grads["sqrt"](1.0, 0.9, steps), grads[None](1.0, 0.9, steps))
