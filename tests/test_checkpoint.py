"""Checkpointed reverse mode (`innergraph.ops.checkpoint`): values, structure, memory, policy."""


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
from typed import grad as grad_of
from filters import filter_loglik

CVM = Mode(linker="cvm", optimizer="fast_run")
NUMBA = Mode(linker="numba", optimizer="fast_run")
LENGTHS = (1, 2, 3, 7, 12, 23)  # fewer steps than a segment, whole segments only, and a tail

x = pt.vector("x")
z = pt.vector("z")
a0 = pt.vector("a0")
b0 = pt.scalar("b0")
w = pt.scalar("w")
u = pt.scalar("u")
# Scalar non-sequences only: the gradient of a *vector* non-sequence through nested loops is
# wrong on the C/cvm linkers on main, checkpointed or not (an untraced accumulator in an inner
# loop aliases Scan's preallocated output storage; see design/checkpointing.md).
INPUTS = [x, z, a0, b0, w, u]


def _model(build_scan=pytensor.scan, **scan_kwargs):
    """Taps on a state (mit-sot) and a sequence, a sit-sot, a per-step output, two non-sequences."""

    def step(x_prev, x_t, z_t, a3, a1, b, w, u):
        a = a1 * w + 0.3 * a3 + x_t * x_prev + u * 0.01
        b_new = pt.tanh(b * w + z_t)
        return a, b_new, (a1 * b) ** 2 + u

    outs = build_scan(
        step,
        sequences=[dict(input=x, taps=[-1, 0]), z],
        outputs_info=[dict(initial=a0, taps=[-3, -1]), b0, None],
        non_sequences=[w, u],
        return_updates=False,
        **scan_kwargs,
    )
    a, b, c = outs
    return (a**2).sum() + b[-1] * 3.0 + c.sum() + a[-1]


def _values(n, rng):
    return [rng.normal(size=n + 1), rng.normal(size=n), rng.normal(size=3), 0.4, 0.7, -0.3]


def _gradients(policy, order=1):
    with checkpoint.checkpointing(policy):
        cost = _model()
        grads = grad_of(cost, INPUTS)
        if order == 2:
            grads = grad_of(grads[4] + grads[3], [w, b0, a0])
    return [cost, *grads]


def _segment_loops(fn):
    return [n for n in fn.maker.fgraph.apply_nodes if isinstance(n.op, NativeScan) and n.op.name == "checkpoint_segments"]


@pytest.fixture(scope="module")
def vanilla():
    with innergraph.uninstalled():
        return pytensor.function(INPUTS, _gradients(None), mode=CVM)


@pytest.fixture(scope="module")
def unchecked():
    return pytensor.function(INPUTS, _gradients(None), mode=CVM)


@pytest.fixture(scope="module", params=[1, 5, "sqrt"])
def checkpointed(request):
    return pytensor.function(INPUTS, _gradients(request.param), mode=CVM)


def _assert_close(actual, expected):
    for got, want in zip(actual, expected, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("n", LENGTHS)
def test_gradient_equals_stored_trace_and_vanilla(n, checkpointed, unchecked, vanilla, rng):
    values = _values(n, rng)
    got = checkpointed(*values)
    _assert_close(got, unchecked(*values))
    _assert_close(got, vanilla(*values))


def test_checkpointed_gradient_runs_the_segmented_loops(checkpointed, unchecked):
    assert len(_segment_loops(checkpointed)) == 1
    assert _segment_loops(unchecked) == []


def _small(x_, w_):
    """One mit-sot state, a sequence and a non-sequence: small enough to differentiate twice and to jit."""
    (s,) = pytensor.scan(
        lambda x_t, s2, s1, w: s1 * w - 0.2 * s2 + pt.sin(x_t * w),
        sequences=[x_],
        outputs_info=[dict(initial=pt.zeros(2, dtype="float64"), taps=[-2, -1])],
        non_sequences=[w_],
        return_updates=False,
        return_list=True,
    )
    return s[-1] + (s**2).sum()


def _small_derivatives(policy, mode):
    with checkpoint.checkpointing(policy):
        (g,) = grad_of(_small(x, w), [w])
        outs = [g, *grad_of(g, [x, w])]
    return pytensor.function([x, w], outs, mode=mode)


def test_second_derivative(rng):
    with innergraph.uninstalled():
        reference = _small_derivatives(None, CVM)
    fn = _small_derivatives(3, CVM)
    assert _segment_loops(fn)
    for n in (4, 11):
        values = (rng.normal(size=n), 0.7)
        _assert_close(fn(*values), reference(*values))


def test_py_linker(rng):
    py = Mode(linker="py", optimizer="fast_run")
    with innergraph.uninstalled():
        reference = pytensor.function([x, w], grad_of(_small(x, w), [x, w]), mode=py)
    with checkpoint.checkpointing(3):
        checked = pytensor.function([x, w], grad_of(_small(x, w), [x, w]), mode=py)
    assert _segment_loops(checked)
    for n in (2, 9):
        values = (rng.normal(size=n), 0.7)
        _assert_close(checked(*values), reference(*values))


def test_numba(rng):
    fn = pytensor.function([x, w], grad_of(_small(x, w), [x, w]), mode=NUMBA)
    with checkpoint.checkpointing("sqrt"):
        checked = pytensor.function([x, w], grad_of(_small(x, w), [x, w]), mode=NUMBA)
    for n in (5, 23):
        values = (rng.normal(size=n), 0.7)
        _assert_close(checked(*values), fn(*values))


def test_verify_grad(rng):
    with checkpoint.checkpointing(4):
        pytensor.gradient.verify_grad(_small, [rng.normal(size=10), np.array(0.8)], rng=rng, mode=CVM)


def test_builder_option(unchecked, rng):
    cost = _model(build_scan=innergraph.scan, checkpoint=4)
    fn = pytensor.function(INPUTS, [cost, *grad_of(cost, INPUTS)], mode=CVM)
    assert len(_segment_loops(fn)) == 1
    for n in (3, 13):
        values = _values(n, rng)
        _assert_close(fn(*values), unchecked(*values))


def test_a_node_policy_overrides_the_default():
    with checkpoint.checkpointing("sqrt"):
        cost = _model()
        checkpoint.mark(cost.owner.inputs[0].owner.inputs[0], None)  # whichever read of the loop
        grads = grad_of(cost, [w])
    fn = pytensor.function(INPUTS, grads, mode=CVM, on_unused_input="ignore")
    assert _segment_loops(fn) == []


def test_unsupported_loops_keep_pytensors_gradient(rng):
    k = pt.scalar("k")
    with checkpoint.checkpointing(2):
        s, _ = pytensor.scan(
            lambda s: (s * k, until(s > 100)),
            outputs_info=[pt.constant(1.5, dtype="float64")],
            n_steps=50,
        )
        grad = grad_of(s[-1], k)
    fn = pytensor.function([k], grad, mode=CVM)
    assert _segment_loops(fn) == []
    with innergraph.uninstalled():
        ref = pytensor.function([k], grad_of(pytensor.scan(
            lambda s: (s * k, until(s > 100)),
            outputs_info=[pt.constant(1.5, dtype="float64")],
            n_steps=50,
        )[0][-1], k), mode=CVM)
    np.testing.assert_allclose(fn(1.3), ref(1.3))


def test_bad_policy_is_named():
    with pytest.raises(ValueError, match="'cube'"):
        checkpoint.set_checkpointing("cube")
    with pytest.raises(ValueError, match="-3"):
        innergraph.scan(lambda a: a, outputs_info=[b0], n_steps=3, checkpoint=-3)
    with pytest.raises(TypeError, match="not computed by a Scan"):
        checkpoint.mark(w + 1)
    assert checkpoint.current_policy() is None


def _filter_gradient(policy):
    y, phi, q = pt.vector("y"), pt.scalar("phi"), pt.scalar("q")

    ll = filter_loglik(y, phi, q)
    with checkpoint.checkpointing(policy):
        grads = grad_of(ll[-1], [phi, q])
    return pytensor.function([y, phi, q], [ll[-1], *grads], mode=CVM)


def test_reverse_pass_memory_is_sublinear(rng):
    # The peak of one call at n = 5,000, 20,000 and 80,000 steps. Stored traces grow by 4x per
    # 4x steps (32 bytes a step); sqrt segments by 2x. Growth, not the peak: the peak also
    # holds what does not depend on n (inputs, outputs, the interpreter's own), and innergraph
    # made the stored variant smaller since this test first compared peaks (issue 48).
    stored, checked = _filter_gradient(None), _filter_gradient("sqrt")
    peaks: dict[str, list[int]] = {"stored": [], "checked": []}
    for n in (5_000, 20_000, 80_000):
        values = (rng.normal(size=n), 0.8, 0.5)
        _assert_close(checked(*values), stored(*values))
        peaks["stored"].append(peak_bytes(stored, values))
        peaks["checked"].append(peak_bytes(checked, values))
    growth = {name: (p[1] - p[0], p[2] - p[1]) for name, p in peaks.items()}
    assert growth["stored"][1] > 3.5 * growth["stored"][0]  # linear: the measure sees what it should
    assert growth["checked"][1] < 2.5 * growth["checked"][0], peaks  # sqrt(4) = 2
    assert growth["checked"][1] < 0.05 * growth["stored"][1], peaks


def test_read_back_of_a_written_region():
    a, b = pt.vector("a"), pt.vector("b")
    zeros = pt.zeros(a.shape[0] + 5, dtype="float64")
    reads = [pt.set_subtensor(a[:2], b)[:2], pt.inc_subtensor(zeros[1:3], b)[1:3], pt.inc_subtensor(a[:2], b)[:2]]
    fn = pytensor.function([a, b], reads, mode=CVM)
    got = fn(np.arange(3.0), np.array([5.0, 7.0]))
    np.testing.assert_array_equal(got[0], [5.0, 7.0])
    np.testing.assert_array_equal(got[1], [5.0, 7.0])
    np.testing.assert_array_equal(got[2], [5.0, 8.0])  # an increment of non-zeros is not a read-back
    written = pytensor.function([a, b], reads[:2], mode=CVM)
    assert not [n for n in written.maker.fgraph.apply_nodes if "IncSubtensor" in type(n.op).__name__]
