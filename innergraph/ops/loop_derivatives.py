"""The derivatives of `WhileLoop` and `ForiLoop`: pushforward for every loop, pullback through a Scan.

Pushforward runs the loop carrying values and tangents together. Pullback needs what
reverse mode reads: a fori loop has it (its trip count); a while loop has it when
bounded (``max_steps``, the bound of its carry history); any other while loop raises
an error naming the loop and saying what to pass. Reverse mode re-runs the loop as
the equivalent Scan, which stores every step's state (checkpointed when the loop
carries a policy, `innergraph.ops.checkpoint`).

The loop Ops call these through `innergraph.ops.loop.DERIVATIVES`, which this module
fills when it loads (it builds loops, so the Op's module cannot import it);
``innergraph.ops`` loads it with the Ops.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytensor
import pytensor.tensor as pt
from pytensor.gradient import DisconnectedType, disconnected_type
from pytensor.graph.basic import Variable
from pytensor.graph.null_type import NullType
from pytensor.scan.op import Scan as NativeScan
from pytensor.scan.utils import until
from pytensor.tensor.basic import get_underlying_scalar_constant_value
from pytensor.tensor.subtensor import Subtensor, get_idx_list

from innergraph.core.compat import pushforward
from innergraph.core.instantiate import instantiate
from innergraph.ops import checkpoint
from innergraph.ops.ifelse import ifelse
from innergraph.ops.loop import DERIVATIVES, ForiLoop, WhileLoop
from innergraph.ops.loop_build import build_fori, build_while

__all__ = ["fori_pullback", "fori_pushforward", "is_live", "while_pullback", "while_pushforward"]


def is_live(t: Variable) -> bool:
    """Whether ``t`` is a real (co)tangent: neither disconnected nor null."""
    return not isinstance(t.type, DisconnectedType | NullType)


def _or_zeros(t: Variable, like: Variable) -> Variable:
    return t if is_live(t) else pt.zeros_like(like)


def _jvp(outputs: list[Variable], wrt: list[Variable], tangents: list[Variable]) -> list[Variable]:
    """Jacobian-vector products (`innergraph.consumer.jvp`) over the continuous ``wrt`` only (integers have no tangent)."""
    kept = [(w, t) for w, t in zip(wrt, tangents, strict=True) if getattr(w.type, "dtype", "float") in pt.type.continuous_dtypes]
    if not kept:
        return [pt.zeros_like(o) for o in outputs]
    return pushforward(list(outputs), [w for w, _ in kept], [t for _, t in kept])


def _as_tangent(d: Variable, dx: Variable) -> Variable:
    """The tangent ``d`` of a carried value, as its carried tangent ``dx``'s type (zeros for an integer carry)."""
    if d.type == dx.type:
        return d
    if getattr(dx.type, "dtype", None) in pt.type.discrete_dtypes:
        return pt.zeros_like(dx)  # an integer (e.g. a carried index) has no tangent
    return dx.type.filter_variable(d, allow_convert=True)


def while_pushforward(op: WhileLoop, inputs: Sequence[Variable], tangents: Sequence[Variable]) -> list[Variable]:
    """Tangents of a while loop's results: the loop carrying values and tangents together."""
    parts, tparts = op.split(inputs), op.split(tangents)
    if not any(is_live(t) for t in [*tparts["init"], *tparts["step_args"], *tparts["args"]]):
        return [disconnected_type() for _ in range(op.n_carry)]
    c = op.n_carry
    cond_fn, step_fn = parts["cond_fn"], parts["step_fn"]
    d_init = [_or_zeros(t, x) for t, x in zip(tparts["init"], parts["init"], strict=True)]
    d_others = [_or_zeros(t, x) for t, x in zip([*tparts["step_args"], *tparts["args"]], [*parts["step_args"], *parts["args"]], strict=True)]
    others = [*parts["step_args"], *parts["args"]]

    def pre(state: list[Variable]) -> Variable:
        return instantiate(cond_fn, [*state[:c], *parts["cond_args"], *parts["args"]])[0]

    def step(state: list[Variable]) -> tuple[list[Variable], Variable]:
        xs, dxs = state[:c], state[c:]
        *outs, post = instantiate(step_fn, [*xs, *others])
        douts = _jvp(outs, [*xs, *others], [*dxs, *d_others])
        fitted = [_as_tangent(d, x) for d, x in zip(douts, dxs, strict=True)]
        return [*outs, *fitted], post

    out = build_while(pre, step, [*parts["init"], *d_init], parts["max_steps"], op.do_while)
    return out[c:]


def _pullback_by_scan(
    op: Any, inputs: Sequence[Variable], finals: list[Variable], cotangents: Sequence[Variable], n_header: int
) -> list[Variable]:
    """Vector-Jacobian products of ``finals`` (the loop re-run as a Scan) w.r.t. the loop's inputs."""
    live = [(f, g) for f, g in zip(finals, cotangents, strict=True) if is_live(g)]
    head = [disconnected_type() for _ in range(n_header)]
    wrt = list(inputs[n_header:])
    if not live:
        return head + [_zero_cotangent(x) for x in wrt]
    grads: Any = pytensor.grad(
        None, wrt, known_grads=dict(live), disconnected_inputs="ignore", return_disconnected="disconnected", null_gradients="return"
    )
    # the connection pattern says every input after the header is connected: zeros where none flows
    return head + [g if not isinstance(g.type, DisconnectedType) else _zero_cotangent(x) for g, x in zip(grads, wrt, strict=True)]


def _zero_cotangent(x: Variable) -> Variable:
    """A zero cotangent for ``x`` (a float one for an integer ``x``, as PyTensor expects)."""
    dtype = getattr(x.type, "dtype", None)
    return pt.zeros_like(x, dtype=pytensor.config.floatX) if dtype in pt.type.discrete_dtypes else pt.zeros_like(x)


def _final(init: Variable, trace: Variable) -> Variable:
    """The last row of ``trace`` after ``init`` (``init`` itself when no step ran)."""
    return pt.concatenate([pt.shape_padleft(init), trace])[-1]


def while_pullback(op: WhileLoop, inputs: Sequence[Variable], outputs: Sequence[Variable], cotangents: Sequence[Variable]) -> list[Variable]:
    """Cotangents of a bounded while loop's inputs, through the Scan that stores its carry history."""
    if not op.bounded:
        raise ValueError(
            f"{op} ({', '.join(map(str, outputs))}): reverse mode needs the loop's carry history, whose length is "
            "unknown; pass max_steps= to innergraph.while_loop/do_while/loop (a bound on the steps), reverse= to "
            "innergraph.loop (a function undoing one step), or use innergraph.fori_loop for a known trip count"
        )
    parts = op.split(inputs)
    c = op.n_carry
    go = instantiate(parts["cond_fn"], [*parts["init"], *parts["cond_args"], *parts["args"]])[0]

    node = outputs[0].owner
    policy = _while_checkpoint_policy(node)

    def scan_step(*state: Variable) -> Any:
        xs, go_on = list(state[:-1]), state[-1]
        outs = instantiate(parts["step_fn"], [*xs, *parts["step_args"], *parts["args"]])
        if policy is None:
            taken = ifelse(go_on, list(outs), [*xs, pt.zeros_like(go_on)])  # a step after the loop ended changes nothing
            taken = [taken] if isinstance(taken, Variable) else list(taken)
        else:
            taken = [pt.switch(go_on, o, x) for o, x in zip(outs, [*xs, pt.zeros_like(go_on)], strict=True)]
        # checkpointed: no early exit (the segmented form needs the trip count), the
        # steps after the loop ended are frozen: O(max_steps) time, O(sqrt) memory
        return taken if policy is not None else (taken, until(pt.eq(taken[-1], 0)))

    scanned = pytensor.scan(scan_step, outputs_info=[*parts["init"], go], n_steps=parts["max_steps"], return_updates=False)
    traces = list(scanned)[:c]
    if policy is None:
        finals = [_final(x, t) for x, t in zip(parts["init"], traces, strict=True)]
    else:
        if checkpoint.scan_node_of(scanned[0]) is not None:  # (a constant max_steps=1 builds no Scan)
            checkpoint.mark(list(scanned), policy)
        finals = [_last_row(x, t) for x, t in zip(parts["init"], traces, strict=True)]
    return _pullback_by_scan(op, inputs, finals, cotangents, op.n_header)


def _while_checkpoint_policy(node: Any) -> Any:
    """A bounded while loop's own checkpoint policy (``while_loop(checkpoint=)``), or None.

    The default policy (`innergraph.checkpointing`) does not apply to while loops:
    checkpointed, the reverse pass runs all ``max_steps`` steps, however few the loop
    took, a cost only the loop's author can judge.
    """
    own = getattr(getattr(node, "tag", None), checkpoint.TAG, None)
    return None if own in (None, "none") else own


def _carry_policy(node: Any, scan_outputs: Sequence[Variable]) -> None:
    """Pass a loop node's own checkpoint policy, if any, to the Scan its pullback re-runs it as."""
    own = getattr(getattr(node, "tag", None), checkpoint.TAG, None)
    if own is not None:
        checkpoint.mark(list(scan_outputs), None if own == "none" else own)


def fori_pushforward(op: ForiLoop, inputs: Sequence[Variable], tangents: Sequence[Variable]) -> list[Variable]:
    """Tangents of a fori loop's results: the loop carrying values and tangents together."""
    parts, tparts = op.split(inputs), op.split(tangents)
    if not any(is_live(t) for t in [*tparts["seqs"], *tparts["init"], *tparts["args"]]):
        return [disconnected_type() for _ in range(op.n_carry)]
    s, c = op.n_seqs, op.n_carry
    d_seqs = [_or_zeros(t, x) for t, x in zip(tparts["seqs"], parts["seqs"], strict=True)]
    d_init = [_or_zeros(t, x) for t, x in zip(tparts["init"], parts["init"], strict=True)]
    d_args = [_or_zeros(t, x) for t, x in zip(tparts["args"], parts["args"], strict=True)]

    def step(rows: list[Variable], state: list[Variable]) -> list[Variable]:
        xs, dxs = state[:c], state[c:]
        inputs_ = [*rows[:s], *xs, *parts["args"]]
        outs = instantiate(parts["step_fn"], inputs_)
        douts = _jvp(outs, inputs_, [*rows[s:], *dxs, *d_args])
        return [*outs, *(_as_tangent(d, x) for d, x in zip(douts, dxs, strict=True))]

    out = build_fori(parts["n_steps"], [*parts["seqs"], *d_seqs], step, [*parts["init"], *d_init])
    return out[c:]


def fori_pullback(op: ForiLoop, inputs: Sequence[Variable], outputs: Sequence[Variable], cotangents: Sequence[Variable]) -> list[Variable]:
    """Cotangents of a fori loop's inputs, through the Scan that stores its every state."""
    parts = op.split(inputs)
    s = op.n_seqs

    def scan_step(*values: Variable) -> list[Variable]:
        rows, xs = list(values[:s]), list(values[s:])
        return list(instantiate(parts["step_fn"], [*rows, *xs, *parts["args"]]))

    scanned = pytensor.scan(
        scan_step, sequences=list(parts["seqs"]), outputs_info=list(parts["init"]), n_steps=parts["n_steps"], return_updates=False
    )
    traces = [scanned] if isinstance(scanned, Variable) else list(scanned)
    _carry_policy(outputs[0].owner, traces)
    finals = [_last_row(x, t) for x, t in zip(parts["init"], traces, strict=True)]
    return _pullback_by_scan(op, inputs, finals, cotangents, 2)


def _last_row(init: Variable, trace: Variable) -> Variable:
    """`_final`, read as the last row of the Scan's own buffer when ``trace`` is ``buffer[1:]``.

    The buffer starts with the initial value, so its last row is the final value
    (the initial one when no step ran). Its cotangent is then zero except at the
    last position, which a checkpointed gradient recognises (it asks the segmented
    form for the final value only and never builds the trace, `innergraph.ops.checkpoint`).
    """
    node = trace.owner
    if node is not None and isinstance(node.op, Subtensor):
        buffer = node.inputs[0]
        (index, *rest) = get_idx_list(node.inputs, node.op.idx_list)
        if (
            not rest and isinstance(index, slice) and index.stop is None and index.step is None
            and _is_one(index.start) and buffer.owner is not None and isinstance(buffer.owner.op, NativeScan)
        ):
            return buffer[-1]
    return _final(init, trace)


def _is_one(value: Any) -> bool:
    return value is not None and get_underlying_scalar_constant_value(value, raise_not_constant=False) == 1


DERIVATIVES.update(
    while_pushforward=while_pushforward, while_pullback=while_pullback, fori_pushforward=fori_pushforward, fori_pullback=fori_pullback
)
