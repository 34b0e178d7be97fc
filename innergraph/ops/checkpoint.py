"""Checkpointed reverse mode for Scan: store every k-th carry, recompute the rest.

Terms
-----
segment
    ``k`` consecutive steps of a loop. A loop of ``n`` steps is ``n // k`` whole
    segments and a *tail* of ``n % k`` steps.
segmented form
    The same loop written as two nested loops: an outer loop over the segments whose
    body runs an inner loop of ``k`` steps, then one loop over the tail. Its outer
    loop carries only each segment's *window* (the last ``-min(taps)`` values of every
    state), so its trace holds ``n // k`` windows, not ``n`` values.
checkpointed gradient
    The pullback of a Scan computed through its segmented form instead of the loop
    itself. PyTensor's gradient of the outer loop stores the segment windows and, in
    its reverse loop, differentiates the outer body: that recomputes the segment's
    ``k`` steps (the inner loop) and runs their ``k`` reverse steps. Peak memory of
    the reverse pass is ``O(n / k + k)`` carries instead of ``O(n)``; with
    ``k = ceil(sqrt(n))``, ``O(sqrt n)``. The forward and reverse steps are the very
    same Ops on the very same values; only the sums of a non-sequence's cotangent
    over steps are grouped per segment (rounding-level differences).
policy
    What segment length to use for a Scan's gradient: ``None`` (store every step,
    PyTensor's gradient), a positive ``int`` k, or ``"sqrt"``. A Scan's node may
    carry its own policy (`mark`, or ``innergraph.scan(..., checkpoint=...)``);
    otherwise the current default applies (`checkpointing`, `set_checkpointing`,
    or the ``INNERGRAPH_CHECKPOINT`` environment variable at import). The policy is
    read when a gradient is *built* (``pytensor.grad``), which is where PyMC builds
    its NUTS gradient.

A Scan whose gradient cannot be checkpointed here (a while loop, mit-mot states —
itself a gradient —, untraced states such as shared-variable updates or random
generators, ``truncate_gradient``) keeps PyTensor's gradient.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import pytensor
import pytensor.tensor as pt
from pytensor.gradient import DisconnectedType, NullType, disconnected_type
from pytensor.graph.basic import Apply, Variable
from pytensor.scan.op import Scan as NativeScan

from innergraph.core.compat import inner_graph_outputs
from innergraph.ops.scan import CARRIED_TAGS, Scan

__all__ = [
    "Policy",
    "checked",
    "checkpointed_pullback",
    "checkpointing",
    "current_policy",
    "mark",
    "policy_of",
    "scan_node_of",
    "segment_length",
    "segmented_outputs",
    "set_checkpointing",
    "supports",
]

Policy = int | str | None

#: Tag attribute naming a Scan node's own policy (``"none"`` for "never checkpoint").
TAG = "innergraph_checkpoint"
CARRIED_TAGS.add(TAG)  # an in-graph Scan hands it to the native Scan it differentiates through

_default: list[Policy] = [None]


def checked(policy: Any) -> Policy:
    """``policy`` if it is a valid policy (``"12"`` read as 12), else a `ValueError` naming it."""
    if policy is None or policy == "sqrt":
        return policy
    if isinstance(policy, str) and policy.isdigit():
        policy = int(policy)
    if isinstance(policy, int) and not isinstance(policy, bool) and policy > 0:
        return policy
    raise ValueError(f"checkpoint policy must be None, 'sqrt' or a positive int segment length; got {policy!r}")


def set_checkpointing(policy: Policy) -> None:
    """Set the default policy for gradients built from now on (see the module docstring).

    Parameters
    ----------
    policy
        ``None`` (off), ``"sqrt"`` or a positive segment length.
    """
    _default[0] = checked(policy)


def current_policy() -> Policy:
    """The default policy gradients built now use."""
    return _default[0]


@contextmanager
def checkpointing(policy: Policy = "sqrt") -> Iterator[None]:
    """Checkpoint the gradients of every Scan built in the block (unless a node says otherwise).

    Examples
    --------
    >>> with innergraph.checkpointing("sqrt"):
    ...     idata = pm.sample()          # the NUTS gradient stores O(sqrt n) carries
    """
    previous = _default[0]
    _default[0] = checked(policy)
    try:
        yield
    finally:
        _default[0] = previous


def mark(outputs: Any | Sequence[Any], policy: Policy = "sqrt") -> None:
    """Give the Scan that computed ``outputs`` its own policy (a tag on its node).

    ``outputs`` are what ``pytensor.scan`` or `innergraph.scan` returned (a slice of
    a Scan output is followed back to the Scan). ``policy=None`` keeps that Scan's
    gradient PyTensor's even under a default policy.
    """
    outs = [outputs] if isinstance(outputs, Variable) else list(outputs)
    for out in outs:
        node = scan_node_of(out)
        if node is None:
            raise TypeError(f"checkpoint.mark: {out} is not computed by a Scan (its owner is {out.owner})")
        setattr(node.tag, TAG, "none" if policy is None else checked(policy))


def scan_node_of(var: Any) -> Apply | None:
    """The Scan node that computed ``var`` (through a few slices and reshapes), or None."""
    seen = 0
    while var.owner is not None and seen < 8:
        if isinstance(var.owner.op, NativeScan | Scan):
            return var.owner
        var, seen = var.owner.inputs[0], seen + 1
    return None


#: The names of the loops a checkpointed gradient builds: their own gradients are PyTensor's.
OWN_LOOPS = ("checkpoint_segments", "checkpoint_steps")


def policy_of(node: Apply) -> Policy:
    """The policy that applies to a Scan node: its own tag, else the default.

    A loop of a checkpointed gradient (`OWN_LOOPS`) is never checkpointed again. It is
    told by its name, not only by its tag: PyTensor freezes the inner graph of the Scan
    around it, and the gradient of that Scan works on a copy of its nodes, without tags.
    """
    if getattr(node.op, "name", None) in OWN_LOOPS:
        return None
    own = getattr(node.tag, TAG, None)
    if own == "none":
        return None
    return own if own is not None else _default[0]


def segment_length(n_steps: Any, policy: Policy) -> Any:
    """The segment length for ``n_steps`` steps under ``policy``."""
    if policy == "sqrt":
        k = pt.cast(pt.ceil(pt.sqrt(pt.cast(n_steps, "float64"))), "int64")
    else:
        k = pt.constant(int(policy), dtype="int64")  # type: ignore[arg-type]
    return pt.maximum(k, 1)


def supports(op: Any) -> bool:
    """Whether `checkpointed_pullback` handles this native Scan op."""
    info = op.info
    return not (
        info.as_while or info.n_mit_mot or info.n_untraced_sit_sot or op.truncate_gradient != -1
    )


def checkpointed_pullback(
    node: Apply, cotangents: Sequence[Any], policy: Policy
) -> list[Any] | None:
    """The pullback of native Scan ``node`` through its segmented form, or ``None`` when unsupported.

    Returns one gradient per input of ``node``, in PyTensor's conventions
    (``disconnected_type()`` where no gradient flows).
    """
    if not supports(node.op) or any(isinstance(c.type, NullType) for c in cotangents):
        return None
    requests = [_request(node, i, cot) for i, cot in enumerate(cotangents)]
    outs = segmented_outputs(node, policy, [r for r, _ in requests])
    known = {out: cot for out, (_, cot) in zip(outs, requests, strict=True) if out is not None}
    if not known:
        return [disconnected_type() for _ in node.inputs]
    wrt = [i for i, inp in enumerate(node.inputs) if _differentiable(node, i, inp)]
    # the segmented form reads a scan-built buffer's initial values, not the buffer
    targets = [_initial_rows(node.inputs[i]) for i in wrt]
    grads: Any = pytensor.grad(
        None, targets, known_grads=known, disconnected_inputs="ignore", return_disconnected="disconnected"
    )
    result: list[Any] = [_integer_zeros(node, i, cotangents) for i in range(len(node.inputs))]
    for i, target, g in zip(wrt, targets, grads, strict=True):
        buffer = node.inputs[i]
        result[i] = g if target is buffer or isinstance(g.type, DisconnectedType) else _buffer_gradient(buffer, g)
    return result


def _integer_zeros(node: Apply, i: int, cotangents: Sequence[Any]) -> Any:
    """What PyTensor's pullback gives an input with no gradient: float zeros for a connected integer one.

    An integer sequence (a loop index ``arange(lo, hi)``) is connected to the outputs
    in Scan's connection pattern; its gradient must then be a (zero) tensor, not
    disconnected. Every other input not differentiated is disconnected.
    """
    inp = node.inputs[i]
    dtype = getattr(inp.type, "dtype", None)
    pattern = node.op.connection_pattern(node)[i]
    connected = any(c and not isinstance(g.type, DisconnectedType) for c, g in zip(pattern, cotangents, strict=True))
    if i == 0 or not connected or dtype not in pt.type.discrete_dtypes:
        return disconnected_type()
    return pt.zeros_like(inp, dtype=pytensor.config.floatX)


def _buffer_gradient(buffer: Any, initial_gradient: Any) -> Any:
    """The gradient of a scan-built buffer whose initial values receive ``initial_gradient``.

    Written with the very index of the ``set_subtensor`` that built the buffer, so
    that reading it back (the gradient of the initial values) is ``initial_gradient``
    itself after `innergraph.rewriting.read_back`, with no buffer-sized zeros left.
    """
    from pytensor.tensor.subtensor import IncSubtensor

    written = buffer.owner
    assert written is not None
    increment = IncSubtensor(written.op.idx_list)
    return increment(pt.zeros_like(buffer), initial_gradient, *written.inputs[2:])


def _request(node: Apply, i: int, cotangent: Any) -> tuple[str | None, Variable]:
    """What the gradient needs of output ``i``: ``None``, its ``"last"`` value or its ``"trace"``.

    A cotangent that is zero except at the last position (``trace[-1]``'s gradient,
    possibly under ``trace[s:]``'s) asks only for the state's final value, with that
    position's cotangent: the segmented form then never materialises the trace.
    """
    if isinstance(cotangent.type, DisconnectedType):
        return None, cotangent
    n_states = node.op.info.n_mit_sot + node.op.info.n_sit_sot
    last = _last_position_value(cotangent) if i < n_states else None
    return ("last", last) if last is not None else ("trace", cotangent)


def _last_position_value(cotangent: Any) -> Any | None:
    from pytensor.tensor.subtensor import IncSubtensor, get_idx_list

    var = cotangent
    while var.owner is not None and isinstance(var.owner.op, IncSubtensor) and not var.owner.op.set_instead_of_inc:
        x, y = var.owner.inputs[:2]
        indices: list[Any] = list(get_idx_list(var.owner.inputs[1:], var.owner.op.idx_list))
        if len(indices) != 1 or not _is_zero(x):
            return None
        index = indices[0]
        if isinstance(index, slice):
            if index.stop is not None or index.step is not None:
                return None  # only ``[s:]`` keeps the last position the last
            var = y
            continue
        return y if _constant(index) == -1 else None
    return None


def _constant(value: Any) -> Any:
    from pytensor.tensor.basic import get_underlying_scalar_constant_value

    return get_underlying_scalar_constant_value(value, raise_not_constant=False)


def _is_zero(var: Any) -> bool:
    from pytensor.tensor.basic import get_underlying_scalar_constant_value

    try:
        return bool(get_underlying_scalar_constant_value(var) == 0)
    except Exception:
        return False


def _differentiable(node: Apply, i: int, inp: Any) -> bool:
    info = node.op.info
    first_nit_sot_size = 1 + info.n_seqs + info.n_mit_sot + info.n_sit_sot
    if i == 0 or first_nit_sot_size <= i < first_nit_sot_size + info.n_nit_sot:
        return False  # n_steps and nit-sot sizes
    return inp.type.dtype in pt.type.continuous_dtypes if hasattr(inp.type, "dtype") else False


def segmented_outputs(node: Apply, policy: Policy, requests: Sequence[str | None] | None = None) -> list[Any | None]:
    """The outputs of native Scan ``node``, recomputed by its segmented form.

    ``requests[i]`` is ``"trace"`` (default: equal to ``node.outputs[i]``), ``"last"``
    (a state's final value, ``node.outputs[i][-1]``) or ``None`` (not computed).
    Values are those of ``node`` exactly: the same Ops on the same values, in the same order.
    """
    op, info = node.op, node.op.info
    requests = list(requests) if requests is not None else ["trace"] * len(node.outputs)
    n_steps = node.inputs[0]
    parts = _split_outer(node)
    init_lens = [-min(taps) for taps in info.mit_sot_in_slices] + [1] * info.n_sit_sot
    n_states = len(init_lens)
    traced = [i for i, r in enumerate(requests) if r == "trace"]
    # at most n steps a segment, and at least one segment: the segment loop always runs
    # (one empty segment when n == 0). A Scan that runs zero times gives its per-step
    # outputs the shape (0, 0, ...) whatever their rows (PyTensor's Scan.perform), which
    # broke the second derivative of a zero-step loop when the segment loop ran no step
    k = pt.minimum(segment_length(n_steps, policy), n_steps)
    n_seg = pt.switch(pt.gt(k, 0), n_steps // pt.maximum(k, 1), 1)
    heads = [_initial_rows(buf)[:length] for buf, length in zip(parts["states"], init_lens, strict=True)]
    # a sit-sot's carry is the value itself, a mit-sot's the window of its last values
    windows = heads[: info.n_mit_sot] + [head[0] for head in heads[info.n_mit_sot :]]
    step = _Step(op)

    def segment(*args: Any) -> list[Any]:
        n_seqs = len(parts["seqs"])
        seqs, wins, nons = args[:n_seqs], args[n_seqs : n_seqs + n_states], args[n_seqs + n_states :]
        traces = step.run(list(seqs), list(wins), list(nons), k)
        new_windows = [
            _last_rows(win, tr, length) for win, tr, length in zip(wins, traces[: info.n_mit_sot], init_lens, strict=False)
        ]
        new_windows += [_last_row(win, tr) for win, tr in zip(wins[info.n_mit_sot :], traces[info.n_mit_sot : n_states], strict=True)]
        return new_windows + [traces[i] for i in traced]

    outer = _scan(
        segment,
        sequences=[_blocks(seq, n_seg, k) for seq in parts["seqs"]],
        outputs_info=windows + [None] * len(traced),
        non_sequences=parts["non_seqs"],
        n_steps=n_seg,
        name="checkpoint_segments",
    )
    # the carry after the last whole segment (the initial one when there is none)
    # (the outer loop carries each window as one value: a sit-sot)
    last_windows = [_last_row(w0, w) for w0, w in zip(windows, outer, strict=False)]
    tail_seqs = [seq[n_seg * k : n_steps] for seq in parts["seqs"]]
    tail = step.run(tail_seqs, last_windows, parts["non_seqs"], n_steps - n_seg * k)
    results: list[Any | None] = [None] * len(requests)
    for i, seg_trace in zip(traced, outer[n_states:], strict=True):
        flat = seg_trace.reshape((n_seg * k, *tuple(seg_trace.shape[2:])), ndim=seg_trace.ndim - 1)
        trace = pt.concatenate([flat, tail[i]], axis=0)
        results[i] = pt.concatenate([heads[i], trace], axis=0) if i < n_states else trace
    for i, request in enumerate(requests):
        if request == "last":
            # the tail may be empty
            results[i] = _last_rows(last_windows[i], tail[i], init_lens[i])[-1] if i < info.n_mit_sot else _last_row(last_windows[i], tail[i])
    return results


def _scan_buffer(trace: Any, length: int) -> Any | None:
    """The buffer of the Scan that computed ``trace`` when ``trace`` is ``buffer[length:]``, else None.

    `pytensor.scan` lays a state out so: its buffer starts with the ``length`` initial rows.
    """
    from pytensor.tensor.subtensor import Subtensor, get_idx_list

    node = trace.owner
    if node is None or not isinstance(node.op, Subtensor):
        return None
    buffer = node.inputs[0]
    (index, *rest) = get_idx_list(node.inputs, node.op.idx_list)
    if (
        not rest and isinstance(index, slice) and index.stop is None and index.step is None
        and _constant(index.start) == length and buffer.owner is not None and isinstance(buffer.owner.op, NativeScan)
    ):
        return buffer
    return None


def _last_rows(window: Any, trace: Any, length: int) -> Any:
    """The last ``length`` rows of ``window`` followed by ``trace`` (a segment may be shorter than a window, or empty).

    When ``trace`` is the Scan's ``buffer[length:]`` they are the buffer's own last
    rows: no copy of the segment's trace, and right when the segment ran no step.
    """
    buffer = _scan_buffer(trace, length)
    return buffer[-length:] if buffer is not None else pt.concatenate([window, trace], axis=0)[-length:]


def _last_row(value: Any, trace: Any) -> Any:
    """A sit-sot's final value: the last row of ``value`` followed by ``trace``, as ``buffer[-1]``.

    Read so, the Scan's buffer is read only at its last row, which the pipeline turns
    into an untraced state (`innergraph.rewriting.untrace`): a segment's forward
    steps then write no trace at all (under Numba a traced step costs about 60x an
    untraced one). ``trace[-1]`` would be canonicalized to a computed index, which
    that rule does not recognise, and fails when the segment ran no step.
    """
    buffer = _scan_buffer(trace, 1)
    return buffer[-1] if buffer is not None else pt.concatenate([pt.shape_padleft(value), trace], axis=0)[-1]


def _split_outer(node: Apply) -> dict[str, list[Any]]:
    info = node.op.info
    inputs = list(node.inputs[1:])
    n_states = info.n_mit_sot + info.n_sit_sot
    seqs = inputs[: info.n_seqs]
    states = inputs[info.n_seqs : info.n_seqs + n_states]
    non_seqs = inputs[info.n_seqs + n_states + info.n_nit_sot :]
    return {"seqs": seqs, "states": states, "non_seqs": non_seqs}


def _initial_rows(buffer: Any) -> Any:
    """The defined leading rows of a state buffer: the initial values, not the buffer, when scan built it.

    ``pytensor.scan`` writes a state's initial values ``y`` into an uninitialised
    buffer (``set_subtensor(empty(n + len(y))[:len(y)], y)``); its first rows *are*
    ``y``. Reading ``y`` instead keeps the O(n) buffer out of the gradient graph.
    """
    from pytensor.tensor.basic import AllocEmpty
    from pytensor.tensor.subtensor import IncSubtensor, get_idx_list

    node = buffer.owner
    if node is None or not isinstance(node.op, IncSubtensor) or not node.op.set_instead_of_inc:
        return buffer
    x, y = node.inputs[:2]
    index = get_idx_list(node.inputs[1:], node.op.idx_list)
    if x.owner is None or not isinstance(x.owner.op, AllocEmpty) or len(index) != 1:
        return buffer
    (rows,) = index
    if not isinstance(rows, slice) or rows.start is not None or rows.step is not None:
        return buffer
    return y


def _blocks(seq: Any, n_seg: Any, k: Any) -> Any:
    return seq[: n_seg * k].reshape((n_seg, k, *tuple(seq.shape[1:])), ndim=seq.ndim + 1)


class _Step:
    """Runs ``k`` steps of a native Scan's body as a new (never checkpointed) Scan."""

    def __init__(self, op: Any):
        self.op = op
        info = op.info
        self.taps = [list(t) for t in info.mit_sot_in_slices] + [[-1]] * info.n_sit_sot
        self.n_nit_sot = info.n_nit_sot

    def body(self, *args: Any) -> list[Any]:
        return inner_graph_outputs(self.op, args)

    def run(
        self, seqs: list[Any], windows: list[Any], non_seqs: list[Any], n_steps: Any
    ) -> list[Any]:
        outputs_info: list[Any] = [
            {"initial": w, "taps": taps} if taps != [-1] else w for w, taps in zip(windows, self.taps, strict=True)
        ]
        return _scan(
            self.body,
            sequences=seqs,
            outputs_info=outputs_info + [None] * self.n_nit_sot,
            non_sequences=non_seqs,
            n_steps=n_steps,
            name="checkpoint_steps",
            strict=True,
        )


def _scan(fn: Any, **kwargs: Any) -> list[Any]:
    outs = pytensor.scan(fn, return_list=True, return_updates=False, **kwargs)
    node = scan_node_of(outs[0])
    if node is not None:
        setattr(node.tag, TAG, "none")  # its own gradient is PyTensor's: no checkpoint of a checkpoint
    return list(outs)


def _policy_from_environment() -> None:
    value = os.environ.get("INNERGRAPH_CHECKPOINT")
    if value:
        set_checkpointing(checked(value))


_policy_from_environment()
