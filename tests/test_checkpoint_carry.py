"""The reverse loop inside each checkpoint segment carries its cotangents (issue 24, rev5).

PyTensor's gradient of a segment's inner loop allocates its cotangent buffers as
``zeros(n_steps + 1)`` inside the segment body; loop-invariant motion hoists that
allocation (and ``n_steps``) out of the segment loop, so in the body both are
params. `innergraph.rewriting.lengths.length_offset` follows them to the segment
loop's arguments (`innergraph.rewriting.carry.enclosing_bindings`), and the
cotangents become carried states instead of traced mit-mots.
"""

from typing import Any

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.compile.mode import Mode
from pytensor.graph.basic import NominalVariable
from pytensor.scan.op import Scan as NativeScan

from innergraph.ops import checkpoint
from innergraph.rewriting.lengths import length_offset
from typed import grad
from filters import filter_loglik

MODES = {linker: Mode(linker=linker, optimizer="fast_run") for linker in ("py", "cvm", "numba")}


def test_length_offset_follows_bound_params():
    n = pt.lscalar("n")
    buffer_param: Any = NominalVariable(901, pt.dvector().type)  # a tensor param: indexable
    steps_param: Any = NominalVariable(902, pt.lscalar().type)
    # the gradient's form: zeros(n + 1) written at its first row and reversed
    buffer = pt.inc_subtensor(buffer_param[-1], 1.0)[::-1]
    assert length_offset(buffer, steps_param) is None  # params alone prove nothing
    bound = {buffer_param: pt.zeros(n + 1), steps_param: n}
    assert length_offset(buffer, steps_param, [bound]) == 1
    other = {buffer_param: pt.zeros(n + 2), steps_param: n}
    assert length_offset(buffer, steps_param, [other]) == 2
    # a body shared by two consumers: proved only when both agree
    assert length_offset(buffer, steps_param, [bound, other]) is None
    assert length_offset(buffer, steps_param, [bound, dict(bound)]) == 1
    unrelated = {buffer_param: pt.zeros(n + 1), steps_param: pt.lscalar("m")}
    assert length_offset(buffer, steps_param, [unrelated]) is None


def _filter(policy, wrt_y) -> tuple[list, Any]:
    """A mean, a variance and a log-likelihood carried over one series; gradient w.r.t. two non-sequences (and the series)."""
    y, phi, q = pt.dvector("y"), pt.dscalar("phi"), pt.dscalar("q")

    ll = filter_loglik(y, phi, q)
    with checkpoint.checkpointing(policy):
        grads = grad(ll[-1], [phi, q, y] if wrt_y else [phi, q])
    return [y, phi, q], [ll[-1], *grads]


@pytest.fixture(scope="module", params=["py", "cvm", "numba"])
def compiled(request):
    mode = MODES[request.param]
    return {(policy, wrt_y): pytensor.function(*_filter(policy, wrt_y), mode=mode) for policy in (None, "sqrt") for wrt_y in (False, True)}


def _nested_scans(fgraph_nodes):
    for node in fgraph_nodes:
        if isinstance(node.op, NativeScan):
            yield node.op
            yield from _nested_scans(node.op.fgraph.apply_nodes)


def test_the_per_segment_reverse_loop_has_no_traced_cotangent(compiled):
    # (with the series' gradient asked for too, its per-step output reads two of the
    # cotangents' taps and is computed after the loop from their buffers: those stay)
    segments = [
        node for node in compiled["sqrt", False].maker.fgraph.apply_nodes
        if isinstance(node.op, NativeScan) and node.op.name == "grad_of_checkpoint_segments"
    ]
    assert len(segments) == 1
    inner = [op for op in _nested_scans(segments[0].op.fgraph.apply_nodes) if op.name.startswith("grad_of")]
    assert inner, "the segment's reverse loop"
    for op in inner:
        assert op.info.n_mit_mot == 0, op.info  # was 3 traced cotangent buffers


@pytest.mark.parametrize("wrt_y", [False, True])
@pytest.mark.parametrize("n", [1, 2, 9, 30])
def test_values_equal_the_stored_trace_gradient(compiled, n, wrt_y):
    values = [np.random.default_rng(n).normal(size=n), 0.8, 0.5]
    got, want = compiled["sqrt", wrt_y](*values), compiled[None, wrt_y](*values)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
