"""JAX code generated from a consumer's declaration: a loop as ``lax.while_loop`` or ``lax.fori_loop``.

Loaded on the first JAX link. Every registered consumer whose form declares step
semantics (`innergraph.semantics`) gets `jax_funcify_generated` as its JAX
conversion, unless its class has one of its own; consumers registered later get it
at registration (`innergraph.slots.ON_REGISTER`).

The conversion reads the node's `LoopPlan` and calls the bodies' JAX functions
(`innergraph.backends.jax.jax_body`, made once per body):

* a counted loop without conditions is ``lax.fori_loop(0, n, step, carry)``;
* any other loop is ``lax.while_loop`` over ``(steps, go, carry)``: ``go`` starts as
  the pre-condition (true without one) and becomes the post-condition after each
  step; ``steps`` is compared with the count or the bound, if any.

Each step's new carried values are cast to the carried values' dtypes (a body may
return a Python scalar or a weakly typed value), as ``lax`` loops need. Both run
under ``jax.jit`` with a traced count or bound, and eagerly.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax.numpy as jnp
from jax import lax
from pytensor.link.jax.dispatch import jax_funcify

from innergraph.backends.jax import jax_body
from innergraph.ops.runtime import body_value
from innergraph.semantics import LoopPlan, loop_plan
from innergraph.slots import FORMS, ON_REGISTER, Form

__all__ = ["jax_funcify_generated", "jax_loop", "register_generated"]

Fn = Callable[..., Sequence[Any]]


def _arguments(plan: LoopPlan, body: int, inputs: Sequence[Any], rows: Sequence[Any], carry: Sequence[Any]) -> list[Any]:
    values = {"input": inputs, "row": rows, "carry": carry}
    return [values[kind][i] for kind, i in plan.roles[body]]


def jax_loop(plan: LoopPlan, functions: Mapping[int, Fn], dtypes: Sequence[Any]) -> Callable[..., Any]:
    """A JAX function of the node's inputs running ``plan`` with the bodies' JAX ``functions``."""
    conditioned = plan.pre is not None or plan.post is not None

    def step(t: Any, carry: tuple[Any, ...], inputs: Sequence[Any]) -> tuple[tuple[Any, ...], Any]:
        rows = [inputs[pos][t] for pos in plan.sequences]
        outs = functions[plan.update](*_arguments(plan, plan.update, inputs, rows, carry))
        new = tuple(jnp.asarray(outs[o], dtype=d) for o, d in zip(plan.next_values, dtypes, strict=True))
        go = jnp.asarray(outs[plan.post]).astype(bool) if plan.post is not None else jnp.asarray(True)
        return new, go

    def run(*inputs: Any) -> Any:
        carry = tuple(jnp.asarray(inputs[pos], dtype=d) for pos, d in zip(plan.carries, dtypes, strict=True))
        if plan.count is not None and not conditioned:
            final = lax.fori_loop(0, jnp.asarray(inputs[plan.count]), lambda t, c: step(t, c, inputs)[0], carry)
            return _results(plan, final)
        go = jnp.asarray(True)
        if plan.pre_condition is not None and plan.pre is not None:
            pre_outs = functions[plan.pre_condition](*_arguments(plan, plan.pre_condition, inputs, (), carry))
            go = jnp.asarray(pre_outs[plan.pre]).astype(bool)
        limit = inputs[plan.count] if plan.count is not None else inputs[plan.bound] if plan.bound is not None else None

        def cond(state: tuple[Any, Any, tuple[Any, ...]]) -> Any:
            t, going, _ = state
            return going if limit is None else going & (t < limit)

        def body(state: tuple[Any, Any, tuple[Any, ...]]) -> tuple[Any, Any, tuple[Any, ...]]:
            t, _, c = state
            new, going = step(t, c, inputs)
            return t + 1, going, new

        _, _, final = lax.while_loop(cond, body, (jnp.asarray(0, dtype="int64"), go, carry))
        return _results(plan, final)

    return run


def _results(plan: LoopPlan, carry: tuple[Any, ...]) -> Any:
    results = [carry[k] for k in plan.results]
    return results[0] if len(results) == 1 else tuple(results)


def jax_funcify_generated(op: Any, node: Any = None, **kwargs: Any) -> Callable[..., Any]:
    """The JAX loop of ``node`` from its consumer's step semantics."""
    plan = loop_plan(op, node)
    functions = {b: jax_body(body_value(node.inputs[plan.functions[b]])) for b in plan.bodies_run}
    return jax_loop(plan, functions, [node.inputs[pos].type.dtype for pos in plan.carries])


def register_generated(op_class: type, form: Form) -> None:
    """Make `jax_funcify_generated` the JAX conversion of ``op_class`` if its form declares semantics (and it has none of its own)."""
    if form.semantics is not None and jax_funcify.registry.get(op_class, jax_funcify_generated) is jax_funcify_generated:
        jax_funcify.register(op_class)(jax_funcify_generated)


for _cls, _form in list(FORMS.items()):
    register_generated(_cls, _form)
ON_REGISTER.append(register_generated)
