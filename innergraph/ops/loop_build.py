"""Build `WhileLoop` and `ForiLoop` nodes from Python functions over flat carried values.

What the user-facing loops (`innergraph.loops`) and the loops' own derivatives
(`loop_derivatives`) both build on: a step written as a Python function of the
carried values is closed over what it captures (`inner_graph`), folded, and given to
the loop Op with the captured values as its arguments.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytensor.tensor as pt
from pytensor.graph.basic import Variable

from innergraph.core.build import inner_graph
from innergraph.core.fold import fold_function
from innergraph.ops.loop import ForiLoop, WhileLoop

__all__ = ["build_fori", "build_while"]


def _closed(fn: Callable[[list[Variable]], list[Variable]], like: Sequence[Variable], shared: Sequence[Variable] = ()) -> tuple[Variable, list[Variable]]:
    """A folded function of fresh carried values, ``shared`` and what else it captures; and those others."""
    xs = [x.type() for x in like]
    outs = fn(xs)
    first = inner_graph(outs, xs, capture="leaves")
    own = [v for v in first.captured if not any(v is s for s in shared)]
    closure = inner_graph(outs, [*xs, *own, *shared], capture="leaves")
    assert not closure.captured
    return fold_function(closure.function), own


def _captures(fn: Callable[[list[Variable]], list[Variable]], like: Sequence[Variable]) -> list[Variable]:
    xs = [x.type() for x in like]
    return list(inner_graph(fn(xs), xs, capture="leaves").captured)


def _as_bool(c: Any, what: str) -> Variable:
    """``c`` as a boolean scalar variable; a `TypeError` naming ``what`` for any other type (no silent ``c != 0``)."""
    c = pt.as_tensor_variable(c)
    if c.ndim != 0 or c.dtype != "bool":
        raise TypeError(f"build_while: the {what} must be a boolean scalar, got {c} of type {c.type}; compare it (e.g. `pt.neq(x, 0)`)")
    return c


def build_while(
    pre: Callable[[list[Variable]], Any],
    step: Callable[[list[Variable]], tuple[list[Variable], Any]],
    init: list[Variable],
    max_steps: Any = None,
    do_while: bool = False,
) -> list[Variable]:
    """The results of a `WhileLoop` over flat carried values.

    ``pre(carry)`` is the pre-condition; ``step(carry)`` gives the next carried
    values and the post-condition (whether another step runs).
    """

    def cond_outs(xs: list[Variable]) -> list[Variable]:
        return [_as_bool(pre(xs), "pre-condition")]

    def step_outs(xs: list[Variable]) -> list[Variable]:
        new, post = step(xs)
        return [*new, _as_bool(post, "post-condition")]

    in_cond, in_step = _captures(cond_outs, init), _captures(step_outs, init)
    shared = [v for v in in_cond if any(v is w for w in in_step)]
    cond_fn, cond_args = _closed(cond_outs, init, shared)
    step_fn, step_args = _closed(step_outs, init, shared)
    op = WhileLoop(len(init), len(cond_args), len(step_args), do_while, max_steps is not None)
    header = [] if max_steps is None else [pt.as_tensor_variable(max_steps)]
    out = op(cond_fn, step_fn, *header, *init, *cond_args, *step_args, *shared)
    return [out] if isinstance(out, Variable) else list(out)


def build_fori(n_steps: Variable, seqs: list[Variable], step: Callable[[list[Variable], list[Variable]], list[Variable]], init: list[Variable]) -> list[Variable]:
    """The results of a `ForiLoop`: ``step(rows, carry)`` over the rows of ``seqs``."""
    rows = [q.type.clone(shape=q.type.shape[1:])() for q in seqs]
    fn, args = _closed(lambda xs: step(xs[: len(rows)], xs[len(rows) :]), [*rows, *init])
    out = ForiLoop(len(seqs), len(init))(fn, n_steps, *seqs, *init, *args)
    return [out] if isinstance(out, Variable) else list(out)
