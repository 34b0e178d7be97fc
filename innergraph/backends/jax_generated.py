"""JAX code generated from a consumer's declaration: a loop as ``lax.while_loop`` or ``lax.fori_loop``.

Loaded on the first JAX link. Every registered consumer whose form declares step
semantics (`innergraph.protocol.semantics`) gets `jax_funcify_generated` as its JAX
conversion, unless its class has one of its own; consumers registered later get it
at registration (`innergraph.protocol.slots.ON_REGISTER`).

A call (`Once`) is its body's JAX function, traced inline where the call is
(`jax_once`). A conditional (`Branch`) is ``lax.cond`` over its two bodies (`jax_branch`). A
loop's conversion reads the node's `LoopPlan` and calls the bodies' JAX functions
(`innergraph.backends.jax.jax_body`, made once per body):

* a counted loop without conditions is ``lax.fori_loop(0, n, step, carry)``; its
  per-step outputs, if any, are carried too, each allocated before the loop (its
  number of rows must be static under ``jax.jit``: a shape, not a value) and
  written one row per step;
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

import jax
import jax.numpy as jnp
from jax import lax
from pytensor.link.jax.dispatch import jax_funcify

from innergraph.backends.jax import jax_body
from innergraph.backends.jax_loop import is_traced
from innergraph.protocol.runtime import body_value
from innergraph.core.hooks import DispatchPatch, apply_late
from innergraph.protocol.semantics import Branch, Once, semantics_of
from innergraph.protocol.plans import BranchPlan, LoopPlan, OncePlan, branch_plan, loop_plan, once_plan
from innergraph.protocol.slots import FORMS, ON_REGISTER, Form, form_of

__all__ = ["jax_branch", "jax_funcify_generated", "jax_loop", "jax_once", "register_generated"]

Fn = Callable[..., Sequence[Any]]


def _arguments(plan: LoopPlan, body: int, inputs: Sequence[Any], rows: Sequence[Any], carry: Sequence[Any]) -> list[Any]:
    values = {"input": inputs, "row": rows, "carry": carry}
    return [values[kind][i] for kind, i in plan.roles[body]]


def jax_loop(plan: LoopPlan, functions: Mapping[int, Fn], dtypes: Sequence[Any], row_dtypes: Sequence[Any] = ()) -> Callable[..., Any]:
    """A JAX function of the node's inputs running ``plan`` with the bodies' JAX ``functions``.

    ``dtypes`` are the carried values' dtypes, ``row_dtypes`` the per-step outputs'.
    """
    conditioned = plan.pre is not None or plan.post is not None

    def step(t: Any, carry: tuple[Any, ...], inputs: Sequence[Any]) -> tuple[tuple[Any, ...], Any]:
        rows = [inputs[pos][t] for pos in plan.sequences]
        outs = functions[plan.update](*_arguments(plan, plan.update, inputs, rows, carry))
        new = tuple(jnp.asarray(outs[o], dtype=d) for o, d in zip(plan.next_values, dtypes, strict=True))
        go = jnp.asarray(outs[plan.post]).astype(bool) if plan.post is not None else jnp.asarray(True)
        return new, go

    def run(*inputs: Any) -> Any:
        carry = tuple(jnp.asarray(inputs[pos], dtype=d) for pos, d in zip(plan.carries, dtypes, strict=True))
        if plan.per_step:
            return _per_step_loop(plan, functions, dtypes, row_dtypes, inputs, carry)
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


def _results(plan: LoopPlan, carry: tuple[Any, ...], rows: tuple[Any, ...] = ()) -> Any:
    results = [carry[k] if kind == "carry" else rows[k] for kind, k in plan.results]
    return results[0] if len(results) == 1 else tuple(results)


def _static(value: Any, what: str) -> int:
    """``value`` as a Python int; a `ValueError` saying why when it is traced (JAX needs static result shapes)."""
    if is_traced(value):
        raise ValueError(
            f"JAX needs {what} known when the function is traced: compute it from a shape "
            "(e.g. ``xs.shape[0]``), not from an input's value"
        )
    return int(value)


def _per_step_loop(
    plan: LoopPlan, functions: Mapping[int, Fn], dtypes: Sequence[Any], row_dtypes: Sequence[Any], inputs: Sequence[Any], carry: tuple[Any, ...]
) -> Any:
    """A counted loop without conditions writing per-step outputs: ``lax.fori_loop`` over the carries and the results.

    Each result is allocated before the loop, zeros of its number of rows (static)
    and of the row shape the update body gives (``jax.eval_shape`` of step 0), and
    step ``t`` writes its row ``t``: rows no step writes stay zero, as in Numba.
    """
    assert plan.count is not None
    n = inputs[plan.count]
    lengths = [_static(inputs[pos], f"the number of rows of per-step output {j}") for j, (_, pos) in enumerate(plan.per_step)]
    if not is_traced(n) and any(int(n) > length for length in lengths):
        raise ValueError(f"innergraph: a per-step output has fewer rows ({min(lengths)}) than the loop has steps ({int(n)})")

    def apply(rows: Sequence[Any], c: tuple[Any, ...]) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        outs = functions[plan.update](*_arguments(plan, plan.update, inputs, rows, c))
        new = tuple(jnp.asarray(outs[o], dtype=d) for o, d in zip(plan.next_values, dtypes, strict=True))
        return new, tuple(jnp.asarray(outs[o], dtype=d) for (o, _), d in zip(plan.per_step, row_dtypes, strict=True))

    seqs = [inputs[pos] for pos in plan.sequences]
    row_specs = [jax.ShapeDtypeStruct(jnp.shape(x)[1:], jnp.result_type(x)) for x in seqs]
    shapes = jax.eval_shape(lambda rows, c: apply(rows, c)[1], row_specs, carry)
    buffers = tuple(jnp.zeros((length, *shape.shape), dtype=d) for length, shape, d in zip(lengths, shapes, row_dtypes, strict=True))
    if any(jnp.shape(x)[0] == 0 for x in seqs):  # no row to read (JAX refuses to index an empty axis, even in a dead loop)
        return _results(plan, carry, buffers)

    def body(t: Any, state: tuple[tuple[Any, ...], tuple[Any, ...]]) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        c, bufs = state
        new, written = apply([x[t] for x in seqs], c)
        return new, tuple(b.at[t].set(w) for b, w in zip(bufs, written, strict=True))

    final, results = lax.fori_loop(0, jnp.asarray(n), body, (carry, buffers))
    return _results(plan, final, results)


def jax_branch(plan: BranchPlan, functions: Sequence[Fn], dtypes: Sequence[Any]) -> Callable[..., Any]:
    """A JAX function of the node's inputs running one of the two bodies.

    Under ``jax.jit`` the condition is traced and ``lax.cond`` runs one branch; with
    a concrete condition (outside ``jit``) a plain ``if``. Each branch's outputs are
    cast to the node's dtypes, as ``lax.cond`` needs both branches to return the
    same types (a constant output is a Python scalar).
    """

    def branch(b: int, inputs: Sequence[Any]) -> tuple[Any, ...]:
        outs = functions[b](*(inputs[pos] for pos in plan.roles[b]))
        return tuple(jnp.asarray(outs[o], dtype=d) for o, d in zip(plan.outputs[b], dtypes, strict=True))

    def run(*inputs: Any) -> Any:
        cond = inputs[plan.condition]
        if not is_traced(cond):
            outputs = branch(0, inputs) if cond else branch(1, inputs)
        else:
            positions = sorted({*plan.roles[0], *plan.roles[1]})
            operands = tuple(inputs[pos] for pos in positions)

            def taken(b: int) -> Callable[[tuple[Any, ...]], tuple[Any, ...]]:
                def run_body(ops: tuple[Any, ...]) -> tuple[Any, ...]:
                    values = dict(zip(positions, ops, strict=True))
                    return branch(b, [values.get(i) for i in range(plan.n_inputs)])

                return run_body

            outputs = lax.cond(jnp.asarray(cond) != 0, taken(0), taken(1), operands)
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    return run


def jax_once(plan: OncePlan, function: Fn, dtypes: Sequence[Any]) -> Callable[..., Any]:
    """A JAX function of the node's inputs running the body once (its outputs cast to the node's dtypes)."""

    def run(*inputs: Any) -> Any:
        outs = function(*(inputs[pos] for pos in plan.roles))
        results = [jnp.asarray(outs[o], dtype=d) for o, d in zip(plan.outputs, dtypes, strict=True)]
        return results[0] if len(results) == 1 else tuple(results)

    return run


def jax_funcify_generated(op: Any, node: Any = None, **kwargs: Any) -> Callable[..., Any]:
    """The JAX function of ``node`` from its consumer's step semantics (a loop, a branch or a call)."""
    sem = semantics_of(form_of(op), op)
    if isinstance(sem, Once):
        oplan = once_plan(op, node)
        return jax_once(oplan, jax_body(body_value(node.inputs[oplan.function])), [o.type.dtype for o in node.outputs])
    if isinstance(sem, Branch):
        bplan = branch_plan(op, node)
        fns = [jax_body(body_value(node.inputs[pos])) for pos in bplan.functions]
        return jax_branch(bplan, fns, [o.type.dtype for o in node.outputs])
    plan = loop_plan(op, node)
    functions = {b: jax_body(body_value(node.inputs[plan.functions[b]])) for b in plan.bodies_run}
    rows = {k: node.outputs[i].type.dtype for i, (kind, k) in enumerate(plan.results) if kind == "per_step"}
    return jax_loop(plan, functions, [node.inputs[pos].type.dtype for pos in plan.carries], [rows[j] for j in range(len(plan.per_step))])


def register_generated(op_class: type, form: Form) -> None:
    """Make `jax_funcify_generated` the JAX conversion of ``op_class`` if its form declares semantics (and it has none of its own).

    Reversible, as innergraph's other JAX registrations: ``innergraph.uninstall``
    removes it and ``install`` restores it.
    """
    if form.semantics is not None and jax_funcify.registry.get(op_class, jax_funcify_generated) is jax_funcify_generated:
        apply_late(DispatchPatch(jax_funcify, op_class, jax_funcify_generated))


for _cls, _form in list(FORMS.items()):
    register_generated(_cls, _form)
ON_REGISTER.append(register_generated)
