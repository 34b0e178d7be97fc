"""Numba implementations of `WhileLoop` and `ForiLoop`: one generated function with the bodies inline.

Loaded on the first Numba link (`innergraph.consumer.load_on_link`), written with
the public consumer API only: each body's code (`numba_body_code`) is rendered into
the loop's own function, so a step costs no call into another jitted function and
no object mode. The function's cache key combines its source with the bodies' keys.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from innergraph import consumer as api
from innergraph.ops.loop import ForiLoop, WhileLoop

__all__ = ["numba_funcify_fori", "numba_funcify_while"]


def _names(prefix: str, n: int) -> list[str]:
    return [f"{prefix}{i}" for i in range(n)]


def _assign(targets: list[str], values: list[str]) -> str:
    return f"{', '.join(targets)}, = {', '.join(values)}," if targets else "pass"


def _returned(names: list[str]) -> str:
    return f"return {names[0]}" if len(names) == 1 else f"return ({', '.join(names)},)"


def _indent(lines: list[str], depth: int) -> list[str]:
    return [" " * (4 * depth) + line for line in lines]


@api.register_numba(WhileLoop)
def numba_funcify_while(op: WhileLoop, node: Any = None, **kwargs: Any) -> tuple[Any, str | None]:
    """A jitted ``(cond_function, step_function, [max_steps], *init, *cond_args, *step_args, *args)``."""
    parts = op.split(node.inputs)
    cond_body, step_body = api.body_value(parts["cond_fn"]), api.body_value(parts["step_fn"])
    key = ("numba_while", step_body, op)

    def make() -> tuple[Any, str | None]:
        cond_code, step_code = api.numba_body_code(cond_body), api.numba_body_code(step_body)
        c = op.n_carry
        init, x = _names("init", c), _names("x", c)
        cond_args, step_args, args = _names("ca", op.n_cond_args), _names("sa", op.n_step_args), _names("a", len(parts["args"]))
        cond_r = cond_code.render("c_", [*x, *cond_args, *args])
        step_r = step_code.render("s_", [*x, *step_args, *args])
        step = [*step_r.lines, _assign(x, step_r.outputs[:-1]), f"go = {step_r.outputs[-1]}.item()", "steps += 1"]
        guard = "while go and steps < max_steps:" if op.bounded else "while go:"
        start = [*(f"{xi} = {i}.copy()" for xi, i in zip(x, init, strict=True)), "steps = 0", *cond_r.lines, f"go = {cond_r.outputs[0]}.item()"]
        lines = [*start, guard, *_indent(step, 1), _returned(x)]
        params = ["cond_function", "step_function", *(["max_steps"] if op.bounded else []), *init, *cond_args, *step_args, *args]
        return api.numba_function("innergraph_while", params, lines, cond_r.env | step_r.env, [cond_code.key, step_code.key])

    return cond_body.cached(key, make)


@api.register_numba(ForiLoop)
def numba_funcify_fori(op: ForiLoop, node: Any = None, **kwargs: Any) -> tuple[Any, str | None]:
    """A jitted ``(step_function, n_steps, *seqs, *init, *args)``."""
    parts = op.split(node.inputs)
    body = api.body_value(parts["step_fn"])
    key = ("numba_fori", op, len(parts["args"]))

    def make() -> tuple[Any, str | None]:
        code = api.numba_body_code(body)
        seqs, init, x = _names("q", op.n_seqs), _names("init", op.n_carry), _names("x", op.n_carry)
        args = _names("a", len(parts["args"]))
        rows = _names("row", op.n_seqs)
        r = code.render("b_", [*rows, *x, *args])
        step = [*(f"{row} = np.asarray({q}[t])" for row, q in zip(rows, seqs, strict=True)), *r.lines, _assign(x, r.outputs)]
        lines = [_assign(x, init), "for t in range(n_steps):", *_indent(step, 1), _returned(x)]
        params = ["step_function", "n_steps", *seqs, *init, *args]
        return api.numba_function("innergraph_fori", params, lines, r.env | {"np": np}, [code.key])

    return body.cached(key, make)
