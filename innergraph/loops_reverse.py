"""Reverse mode of a `innergraph.loop` given its reverse loop (``loop(..., reverse=...)``).

Terms
-----
reverse
    A function of the state giving the state one step earlier: ``reverse(update(v))
    == v``. The design notes' ``Loop(pre_condition, update, post_condition,
    reverse)``: a loop whose update can be undone needs no carry history for
    reverse mode.
step count
    How many steps the loop ran: found by running the loop again with a counter
    carried along (no history stored).

Pullback, from the final state and its cotangent: run the loop again to count its
steps, then run that many steps backwards (a `ForiLoop`): each recovers the
previous state with ``reverse`` and takes the vector-Jacobian product of the
update at it, carrying the state's cotangent and accumulating the arguments'.
Memory is the state's size, whatever the number of steps.

The loop is wrapped in an inline ``OpFromGraph`` whose pullback override is that
construction: compiled, the wrapper is inlined (the forward graph is the bare
`WhileLoop`); differentiated, PyTensor calls the override.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytensor
import pytensor.tensor as pt
from pytensor.compile.builders import OpFromGraph
from pytensor.graph.basic import Constant, Variable
from pytensor.graph.replace import clone_replace

from innergraph.core.build import inner_graph
from innergraph.core.instantiate import instantiate
from innergraph.ops.loop import WhileLoop
from innergraph.ops.loop_build import build_fori, build_while
from innergraph.ops.loop_derivatives import is_live

__all__ = ["reversible_while", "reverse_pullback"]


def _continuous(v: Variable) -> bool:
    return getattr(v.type, "dtype", "") in pt.type.continuous_dtypes


def _unique(values: Sequence[Variable]) -> list[Variable]:
    out: list[Variable] = []
    for v in values:
        if not any(v is w for w in out) and not isinstance(v, Constant):
            out.append(v)
    return out


def reversible_while(
    build: Callable[[list[Variable]], list[Variable]],
    reverse: Callable[[list[Variable]], list[Variable]],
    init: list[Variable],
    where: str,
) -> list[Variable]:
    """``build(init)`` (the flat results of one `WhileLoop`), differentiated through ``reverse``."""
    fresh = [x.type() for x in init]
    outs = build(fresh)
    node = outs[0].owner
    if node is None or not isinstance(node.op, WhileLoop):
        raise TypeError(f"{where}: reverse= needs the loop's results to be a while loop's, got {outs}")
    rev_fn, rev_args = _reverse_function(reverse, init)
    captured = _unique([*node.inputs[2:node.op.n_header], *node.inputs[node.op.n_header + node.op.n_carry :], *rev_args])
    inner = [v.type() for v in captured]
    inner_outs = clone_replace(outs, dict(zip(captured, inner, strict=True)))
    position = {id(v): i for i, v in enumerate(captured)}
    rev_positions = [position[id(v)] for v in rev_args]

    def pullback(inputs: list[Variable], outputs: list[Variable], cotangents: list[Variable]) -> list[Variable]:
        rev = [inputs[len(init) + i] for i in rev_positions]
        return reverse_pullback(rev_fn, rev, inputs, outputs, cotangents)

    ofg = OpFromGraph([*fresh, *inner], list(inner_outs), inline=True, pullback=pullback, name=f"{where}_reversible")
    result = ofg(*init, *captured)
    return [result] if isinstance(result, Variable) else list(result)


def _reverse_function(reverse: Callable[[list[Variable]], list[Variable]], init: Sequence[Variable]) -> tuple[Variable, list[Variable]]:
    xs = [x.type() for x in init]
    closure = inner_graph(reverse(xs), xs, capture="leaves")
    return closure.function, list(closure.captured)


def _step_count(op: WhileLoop, parts: dict[str, Any]) -> Variable:
    """The number of steps the loop of ``parts`` runs: the loop again, carrying a counter."""
    c = op.n_carry

    def pre(xs: list[Variable]) -> Variable:
        return instantiate(parts["cond_fn"], [*xs[:c], *parts["cond_args"], *parts["args"]])[0]

    def step(xs: list[Any]) -> tuple[list[Variable], Variable]:
        *new, post = instantiate(parts["step_fn"], [*xs[:c], *parts["step_args"], *parts["args"]])
        return [*new, xs[c] + 1], post

    counted = build_while(pre, step, [*parts["init"], pt.constant(0, dtype="int64")], parts["max_steps"], op.do_while)
    return counted[c]


def _loop_node(v: Variable) -> Any:
    """The `WhileLoop` node under ``v`` (``OpFromGraph`` puts an ``Identity`` over its inner outputs)."""
    while v.owner is not None and not isinstance(v.owner.op, WhileLoop) and len(v.owner.inputs) == 1:
        v = v.owner.inputs[0]
    if v.owner is None or not isinstance(v.owner.op, WhileLoop):
        raise TypeError(f"reverse pullback: {v} is not a while loop's result")
    return v.owner


def reverse_pullback(
    rev_fn: Variable, rev_args: Sequence[Variable], inputs: Sequence[Variable], outputs: Sequence[Variable], cotangents: Sequence[Variable]
) -> list[Variable]:
    """Cotangents of the wrapper's ``inputs`` (initial state, then captured values); see the module docstring."""
    node = _loop_node(outputs[0])
    outputs = node.outputs
    op: WhileLoop = node.op
    parts = op.split(node.inputs)
    c = op.n_carry
    diff = [i for i in range(c) if _continuous(outputs[i])]  # integer states carry no cotangent
    others = [*parts["step_args"], *parts["args"]]
    wrt_others = [i for i, v in enumerate(others) if _continuous(v)]
    g0 = [cotangents[i] if is_live(cotangents[i]) else pt.zeros_like(outputs[i]) for i in diff]
    g0 = [outputs[i].type.filter_variable(g, allow_convert=True) for i, g in zip(diff, g0, strict=True)]
    a0 = [pt.zeros_like(others[j]) for j in wrt_others]

    def back(rows: list[Variable], state: list[Any]) -> list[Variable]:
        xs, gs, acc = state[:c], state[c : c + len(diff)], state[c + len(diff) :]
        prev = instantiate(rev_fn, [*xs, *rev_args])
        prev = [x.type.filter_variable(p, allow_convert=True) for x, p in zip(xs, prev, strict=True)]
        at = [p.type() for p in prev]  # the step's vjp at the previous state, not through reverse
        new = instantiate(parts["step_fn"], [*at, *others])[:-1]
        wrt = [at[i] for i in diff] + [others[j] for j in wrt_others]
        known = {new[i]: g for i, g in zip(diff, gs, strict=True)}
        grads: Any = pytensor.grad(None, wrt, known_grads=known, disconnected_inputs="ignore", return_disconnected="zero")
        grads = clone_replace(grads, dict(zip(at, prev, strict=True)))
        new_gs = [g.type.filter_variable(d, allow_convert=True) for g, d in zip(gs, grads[: len(diff)], strict=True)]
        return [*prev, *new_gs, *(a + d for a, d in zip(acc, grads[len(diff) :], strict=True))]

    n = _step_count(op, parts)
    final = build_fori(n, [], back, [*outputs, *g0, *a0])
    g_init, g_others = final[c : c + len(diff)], final[c + len(diff) :]
    known: dict[Variable, Any] = {parts["init"][i]: g for i, g in zip(diff, g_init, strict=True)}
    for j, g in zip(wrt_others, g_others, strict=True):
        v = others[j]
        known[v] = known[v] + g if v in known else g
    result: Any = pytensor.grad(None, list(inputs), known_grads=known, disconnected_inputs="ignore", return_disconnected="zero")
    return list(result)
