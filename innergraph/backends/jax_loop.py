"""A PyTensor Scan as a JAX while loop over preallocated buffers, as its Python runtime runs it.

PyTensor's own JAX conversion of a Scan (``lax.scan``) refuses while loops, because
a while Scan returns traces whose length depends on when the loop stopped. This
module runs any Scan the way ``Scan.perform`` does, so the numbers and the
lengths are the runtime's:

Terms
-----
buffer
    The outer array a traced state lives in (mit-mot, mit-sot, sit-sot: the outer
    input, initial taps first; nit-sot: zeros of the length the Scan is given).
    Its length is the *store*; a state is read and written modulo the store, as
    in the runtime (a store shorter than the trace is a circular buffer).
step ``i``
    At step ``i`` a state whose oldest input tap is ``m`` is read at
    ``(i - m + tap) % store`` and a new value written at ``(i - m) % store``
    (``i - m + tap`` for a mit-mot's output taps): the runtime's offsets, whatever
    the taps (PyTensor's ``lax.scan`` conversion normalizes a mit-mot's output
    taps by their own minimum instead; see `innergraph.backends.jax`).
settling
    After the loop, as the runtime's step 6: a circular buffer is rotated so its
    oldest entry comes first, the unwritten tail of a longer buffer is zeroed, and
    a while loop that stopped early drops ``n_steps - i`` entries. That last cut
    has a length only known when the loop ran: under ``jax.jit`` it raises
    `DynamicTraceLength` unless the buffer is short enough that no cut can happen
    (e.g. a last-value-only trace, length ``1 - m``), and the JAX linker's compiled
    function falls back to running eagerly (`innergraph.backends.jax.jit_compile`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax
from pytensor.graph.basic import Apply
from pytensor.scan.op import Scan as NativeScan

__all__ = ["DynamicTraceLength", "is_traced", "needs_loop", "scan_as_loop"]


class DynamicTraceLength(RuntimeError):
    """A while loop's trace must be cut to a length known only once the loop ran (not under ``jax.jit``)."""


def is_traced(value: Any) -> bool:
    """Whether ``value`` is abstract (being traced by ``jax.jit``, ``lax.scan``, ...)."""
    return isinstance(value, jax.core.Tracer)


def scan_as_loop(op: NativeScan, node: Apply, inner: Callable[..., Sequence[Any]]) -> Callable[..., Any]:
    """A JAX function of the Scan's outer inputs, ``inner`` being its step function.

    Parameters
    ----------
    op, node
        The native Scan and its node (for the output dtypes and the messages).
    inner
        The JAX function of the inner graph: inner inputs to inner outputs.
    """
    info = op.info
    in_taps = [*info.mit_mot_in_slices, *info.mit_sot_in_slices, *info.sit_sot_in_slices]
    oldest = [min(taps) for taps in in_taps]
    n_mm, n_traced = info.n_mit_mot, len(in_taps)
    out_dtypes = [o.type.dtype for o in node.outputs]

    def step_args(i: Any, seqs: Sequence[Any], buffers: Sequence[Any], untraced: Sequence[Any], non_seqs: Sequence[Any]) -> list[Any]:
        args = [s[i] for s in seqs]
        for buf, taps, m in zip(buffers, in_taps, oldest, strict=True):
            args += [buf[(i - m + t) % buf.shape[0]] for t in taps]
        return [*args, *untraced, *non_seqs]

    def step(carry: tuple[Any, ...], seqs: Sequence[Any], non_seqs: Sequence[Any]) -> tuple[Any, ...]:
        i, _, buffers, nit_bufs, untraced = carry
        outs = iter(inner(*step_args(i, seqs, buffers, untraced, non_seqs)))
        new_buffers = []
        for g, buf in enumerate(buffers):
            for t in info.mit_mot_out_slices[g] if g < n_mm else (0,):
                buf = buf.at[(i - oldest[g] + t) % buf.shape[0]].set(next(outs))
            new_buffers.append(buf)
        new_nit = [buf.at[i % buf.shape[0]].set(next(outs)) for buf in nit_bufs]
        new_untraced = [jnp.asarray(next(outs), dtype=jnp.result_type(u)) for u in untraced]
        stop = jnp.asarray(next(outs)) != 0 if info.as_while else jnp.asarray(False)
        return i + 1, stop, new_buffers, new_nit, new_untraced

    def run(n_steps: Any, seqs: list[Any], buffers: list[Any], nit_bufs: list[Any], untraced: list[Any], non_seqs: list[Any]) -> Any:
        carry = (jnp.asarray(0), jnp.asarray(False), buffers, nit_bufs, untraced)
        i, _, buffers, nit_bufs, untraced = lax.while_loop(
            lambda c: (c[0] < n_steps) & ~c[1], lambda c: step(c, seqs, non_seqs), carry
        )
        return i, buffers, nit_bufs, untraced

    loop = jax.jit(run)

    def scan(n_steps: Any, *outer: Any) -> Any:
        outer = tuple(outer)
        seqs, outer = list(outer[: info.n_seqs]), outer[info.n_seqs :]
        buffers, outer = [jnp.asarray(b) for b in outer[:n_traced]], outer[n_traced:]
        untraced, outer = list(outer[: info.n_untraced_sit_sot]), outer[info.n_untraced_sit_sot :]
        lengths, non_seqs = outer[: info.n_nit_sot], list(outer[info.n_nit_sot :])
        nit_bufs = _nit_sot_buffers(op, inner, step_args(0, seqs, buffers, untraced, non_seqs), lengths)
        i, buffers, nit_bufs, untraced = loop(n_steps, seqs, buffers, nit_bufs, untraced, non_seqs)
        traced = [
            _settle(op, buf, m, i, n_steps)
            for buf, m in zip(buffers[n_mm:] + nit_bufs, oldest[n_mm:] + [0] * len(nit_bufs), strict=True)
        ]
        results = [*buffers[:n_mm], *traced, *untraced]
        results = [jnp.asarray(r, dtype=d) for r, d in zip(results, out_dtypes, strict=True)]
        return results[0] if len(results) == 1 else results

    return scan


def _nit_sot_buffers(op: NativeScan, inner: Callable[..., Any], first_args: list[Any], lengths: Sequence[Any]) -> list[Any]:
    """Zeros of each nit-sot's length and step shape (the length must be known when the loop is traced)."""
    if not lengths:
        return []
    shapes = jax.eval_shape(inner, *first_args)
    first = sum(len(t) for t in op.info.mit_mot_out_slices) + op.info.n_mit_sot + op.info.n_sit_sot
    buffers = []
    for k, length in enumerate(lengths):
        if is_traced(length):
            raise NotImplementedError(
                f"JAX conversion of {op}: the length of nit-sot output {k} must be known when the "
                "function is compiled (PyTensor's JAX Scan asks the same of n_steps)"
            )
        shape = shapes[first + k]
        buffers.append(jnp.zeros((int(length), *shape.shape), dtype=shape.dtype))
    return buffers


def _settle(op: NativeScan, buf: Any, oldest: int, i: Any, n_steps: Any) -> Any:
    """A traced state's buffer after ``i`` steps, as the runtime leaves it (see the module docstring)."""
    store = buf.shape[0]
    if store == 0:
        return buf
    filled = i - oldest
    rolled = jnp.roll(buf, -(filled % store), axis=0)
    written = (jnp.arange(store) < filled).reshape((store,) + (1,) * (buf.ndim - 1))
    kept = jnp.where(store <= filled, rolled, jnp.where(written, buf, jnp.zeros_like(buf)))
    if not op.info.as_while or store <= 1 - oldest:  # i >= 1 once a step ran: never longer than filled
        return kept
    if is_traced(i):
        raise DynamicTraceLength(
            f"{op}: a traced output (buffer of {store} entries) is cut to the number of steps the "
            "while loop ran, which jax.jit cannot know before it runs"
        )
    i, n = int(i), int(n_steps)
    if store > i - oldest and i < n:
        kept = kept[: store - (n - i)]
    return kept


def needs_loop(op: NativeScan) -> bool:
    """Whether ``op`` must run as `scan_as_loop`: a while loop, or a mit-mot writing before its oldest input tap."""
    info = op.info
    odd = any(min(o) < min(i) for i, o in zip(info.mit_mot_in_slices, info.mit_mot_out_slices, strict=True))
    return bool(info.as_while) or odd

