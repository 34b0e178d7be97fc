"""Numba code generated from a consumer's declaration: one function per loop or conditional, its bodies inline or by reference.

Loaded on the first Numba link. Every registered consumer whose form declares step
semantics (`innergraph.protocol.semantics`) gets `numba_funcify_generated` as its Numba
conversion, unless its class has a conversion of its own; consumers registered
later get it at registration (`innergraph.protocol.slots.ON_REGISTER`). A consumer declaring
no semantics keeps PyTensor's fallback (``perform`` in object mode, with its warning).

The generated function takes the node's inputs (a function input arrives as
``None``). A call (`Once`) renders its body inline and returns its outputs (the
inputs that are gradient-override functions are passed and never read). A
conditional (`Branch`) renders body 0 under ``if`` and body 1 under ``else``:
exactly one runs per call. A loop, from the node's `LoopPlan`, runs:

* each carried value once, copied, so a loop that runs no step returns no input
  and the update body may overwrite it (its carry params are prepared mutable:
  an elementwise step writes into the carry instead of allocating a new one);
* the pre-condition body, rendered inline, once;
* ``for t in range(n)`` (counted), or ``while go`` / ``while go and steps < limit``;
  each step reads the sequences' rows ``t``, runs the update body inline, rebinds the
  carried values to its outputs (no copy: a body's outputs alias no param but an
  overwritten carry, and no other output) and
  reads the post-condition;
* per-step outputs (counted loops without conditions): each step writes its row
  ``t`` into the result, allocated once the first row's shape is known (zeros: rows
  no step writes stay zero; a loop of no steps returns the static row shape, 0
  where unknown);
* the carried values' final values and the per-step outputs, in the node's output order.

A body of ``MIN_NODES`` converted nodes or more is not inline: it is one call of a stub
that calls the body, compiled once as its own unit, by reference (`caller_code`,
`innergraph.backends.numba_reference`); such a loop step's carries are then copied by the
body rather than overwritten.

Its disk-cache key combines the source with the bodies' keys (`numba_function`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from pytensor.link.numba.dispatch import basic as numba_basic
from pytensor.link.numba.dispatch.basic import numba_funcify_and_cache_key, register_funcify_and_cache_key

from innergraph.backends.numba import caller_code, jitted
from innergraph.backends.numba_code import Converted, aliasing, code_key
from innergraph.protocol.runtime import body_value
from innergraph.protocol.semantics import Branch, Once, semantics_of
from innergraph.protocol.plans import BranchPlan, LoopPlan, OncePlan, Role, branch_plan, loop_plan, once_plan
from innergraph.protocol.slots import FORMS, ON_REGISTER, Form, form_of

__all__ = ["branch_source", "generated_source", "numba_funcify_generated", "once_source", "register_generated"]


def _value(role: Role) -> str:
    kind, i = role
    return {"input": f"i{i}", "row": f"r{i}", "carry": f"x{i}"}[kind]


def _indent(lines: list[str]) -> list[str]:
    return ["    " + line for line in lines]


def _per_step_rows(plan: LoopPlan, outputs: list[str], dtypes: Sequence[tuple[str, tuple[int | None, ...]]]) -> tuple[list[str], list[str]]:
    """Lines before the loop allocating each per-step output, and the step's lines writing its row ``t``.

    Before the first step a row's shape is unknown: the result starts with its static
    row shape (0 where unknown), which is what a loop of no steps returns, and is
    allocated again, zeros, once the first row is known. Fewer rows than steps, or a
    row of another shape than the first, is a `ValueError`, as in Scan.
    """
    before: list[str] = []
    step: list[str] = []
    for j, (out, length) in enumerate(plan.per_step):
        dtype, row_shape = dtypes[j]
        d = f"np.{np.dtype(dtype).type.__name__}"  # in the source, which the disk-cache key hashes
        static = "".join(f"{0 if d is None else d}, " for d in row_shape)
        v = outputs[out]
        before += [
            f"o{j} = np.zeros((i{length}.item(), {static}), {d})",
            f"if i{plan.count}.item() > i{length}.item():",
            f"    raise ValueError('innergraph: per-step output {j} has fewer rows than the loop has steps')",
        ]
        step += [
            "if t == 0:",
            f"    o{j} = np.zeros((i{length}.item(),) + np.shape({v}), {d})",
            f"elif np.shape({v}) != o{j}.shape[1:]:",
            f"    raise ValueError('innergraph: per-step output {j}: a step wrote a row of another shape than the first')",
            f"o{j}[t] = {v}" if row_shape else f"o{j}[t] = {v}.item()",
        ]
    return before, step


def generated_source(
    plan: LoopPlan, codes: dict[int, Any], dtypes: Sequence[tuple[str, tuple[int | None, ...]]] = ()
) -> tuple[list[str], list[str], dict[str, Any]]:
    """The generated function's params, body lines and environment, for ``plan`` and the bodies' `BodyCode`.

    ``dtypes`` gives, per per-step output, the dtype and static row shape of its result.
    """
    conditioned = plan.pre is not None or plan.post is not None
    lines = [f"x{k} = i{pos}.copy()" for k, pos in enumerate(plan.carries)]
    env: dict[str, Any] = {"np": np}
    if plan.pre_condition is not None:
        pre = codes[plan.pre_condition].render("c_", [_value(r) for r in plan.roles[plan.pre_condition]])
        lines += [*pre.lines, f"go = {pre.outputs[plan.pre]}.item()"]
        env |= pre.env
    elif conditioned:
        lines.append("go = True")
    step = [f"r{j} = np.asarray(i{pos}[t])" for j, pos in enumerate(plan.sequences)]
    update = codes[plan.update].render("s_", [_value(r) for r in plan.roles[plan.update]])
    env |= update.env
    step += update.lines
    rows, step_rows = _per_step_rows(plan, update.outputs, dtypes)
    lines += rows
    step += step_rows
    step += [f"x{k} = {update.outputs[o]}" for k, o in enumerate(plan.next_values)]
    if plan.post is not None:
        step.append(f"go = {update.outputs[plan.post]}.item()")
    if plan.count is not None:
        lines.append(f"for t in range(i{plan.count}.item()):")
        lines += _indent(["if not go:", "    break", *step] if conditioned else step)
    else:
        guard = [*(["go"] if conditioned else []), *(["steps < limit"] if plan.bound is not None else [])]
        if plan.bound is not None:
            lines += ["steps = 0", f"limit = i{plan.bound}.item()"]
            step.append("steps += 1")
        lines += [f"while {' and '.join(guard)}:", *_indent(step)]
    returned = [f"x{k}" if kind == "carry" else f"o{k}" for kind, k in plan.results]
    lines.append(f"return {returned[0]}" if len(returned) == 1 else f"return ({', '.join(returned)},)")
    return [f"i{i}" for i in range(plan.n_inputs)], lines, env


def _owned(plan: LoopPlan, body: int) -> frozenset[int]:
    """The params of the update body bound to carried values: the loop owns those arrays, the step may overwrite them."""
    if body != plan.update or not IN_PLACE_CARRIES:
        return frozenset()
    return frozenset(i for i, (kind, _) in enumerate(plan.roles[body]) if kind == "carry")


#: Whether the update body may overwrite the carried values it reads (measured: see design/loops.md).
IN_PLACE_CARRIES = True


def numba_funcify_generated(op: Any, node: Any = None, **kwargs: Any) -> Converted:
    """The jitted loop of ``node`` from its consumer's step semantics, and its cache key (cached on the update body).

    A subclass of a consumer declaring semantics reaches this function through
    the dispatch; without semantics of its own it gets PyTensor's fallback
    (object mode, with PyTensor's warning naming the Op).
    """
    form = form_of(op)
    sem = semantics_of(form, op)
    if sem is None or form is None:
        return numba_basic.generate_fallback_impl(op, node=node, **kwargs), None
    if isinstance(sem, Branch):
        return _branch(op, node, form)
    if isinstance(sem, Once):
        return _once(op, node, form)
    plan = loop_plan(op, node)
    bodies = {b: body_value(node.inputs[plan.functions[b]]) for b in plan.bodies_run}
    others = tuple(bodies[b] for b in plan.bodies_run if b != plan.update)

    def make() -> Converted:
        codes = {b: caller_code(body, _owned(plan, b)) for b, body in bodies.items()}
        params, lines, env = generated_source(plan, codes, rows)
        return jitted(f"innergraph_{type(op).__name__.lower()}", params, lines, env, [codes[b].key for b in plan.bodies_run])

    rows = _row_types(plan, node)
    keys = tuple((_owned(plan, b), code_key(body)) for b, body in bodies.items())  # what each body's code is keyed by
    return bodies[plan.update].cached(("numba_generated", plan, others, keys, rows), make)


def _row_types(plan: LoopPlan, node: Any) -> tuple[tuple[str, tuple[int | None, ...]], ...]:
    """Per per-step output of ``plan``, its result's dtype and static row shape."""
    by_index = {k: i for i, (kind, k) in enumerate(plan.results) if kind == "per_step"}
    return tuple((node.outputs[by_index[j]].type.dtype, tuple(node.outputs[by_index[j]].type.shape[1:])) for j in range(len(plan.per_step)))


def branch_source(plan: BranchPlan, codes: list[Any]) -> tuple[list[str], list[str], dict[str, Any]]:
    """The generated conditional's params, lines and environment: each body inline under its branch."""
    lines: list[str] = []
    env: dict[str, Any] = {}
    for b, (head, prefix) in enumerate(((f"if i{plan.condition}:", "t_"), ("else:", "e_"))):
        r = codes[b].render(prefix, [f"i{pos}" for pos in plan.roles[b]])
        outs = [r.outputs[o] for o in plan.outputs[b]]
        returned = outs[0] if len(outs) == 1 else f"({', '.join(outs)},)"
        lines += [head, *_indent([*r.lines, f"return {returned}"])]
        env |= r.env
    return [f"i{i}" for i in range(plan.n_inputs)], lines, env


def _wiring(node: Any) -> tuple[Any, ...]:
    """What a plan reads of ``node`` besides its Op and bodies: which inputs are one variable, and the types.

    A form splits a node by its Op's props, its bodies and the identity of its
    inputs (`innergraph.protocol.semantics` finds a slot's argument at the first input that
    is that variable), so nodes of an equal Op over the same bodies with equal
    wiring have equal plans: `_branch` and `_once` plan such nodes once, where K
    equal consumers (four conditionals over two bodies, K calls a push-out left)
    were planned K times (about 0.2 ms each).
    """
    return (
        aliasing(node),
        tuple(v.type for v in node.inputs),
        tuple(v.type for v in node.outputs),
    )


def _branch(op: Any, node: Any, form: Form) -> Converted:
    """The jitted conditional of ``node``: one body runs per call (cached on the then body, planned once per wiring)."""
    then_body, else_body = (body_value(f) for f in form.functions(node))

    def make() -> Converted:
        plan = branch_plan(op, node)  # its bodies are the form's functions (`innergraph.protocol.semantics._declared`)
        codes = [caller_code(then_body), caller_code(else_body)]
        params, lines, env = branch_source(plan, codes)
        return jitted(f"innergraph_{type(op).__name__.lower()}", params, lines, env, [c.key for c in codes])

    key = ("numba_generated", op, _wiring(node), else_body, code_key(then_body), code_key(else_body))
    return then_body.cached(key, make)


def once_source(plan: OncePlan, code: Any) -> tuple[list[str], list[str], dict[str, Any]]:
    """The generated call's params, lines and environment: the body inline, its outputs returned."""
    r = code.render("b_", [f"i{pos}" for pos in plan.roles])
    outs = [r.outputs[o] for o in plan.outputs]
    returned = outs[0] if len(outs) == 1 else f"({', '.join(outs)},)"
    return [f"i{i}" for i in range(plan.n_inputs)], [*r.lines, f"return {returned}"], r.env


def _once(op: Any, node: Any, form: Form) -> Converted:
    """The jitted call of ``node``: its body inline (cached on the body, planned once per wiring)."""
    (function,) = form.functions(node)
    body = body_value(function)

    def make() -> Converted:
        plan = once_plan(op, node)
        code = caller_code(body)
        params, lines, env = once_source(plan, code)
        return jitted(f"innergraph_{type(op).__name__.lower()}", params, lines, env, [code.key])

    return body.cached(("numba_generated", op, _wiring(node), code_key(body)), make)


def register_generated(op_class: type, form: Form) -> None:
    """Make `numba_funcify_generated` the Numba conversion of ``op_class`` if its form declares semantics.

    A class with a Numba conversion of its own (`innergraph.consumer.register_numba`)
    keeps it.
    """
    if form.semantics is None:
        return
    if numba_funcify_and_cache_key.registry.get(op_class, numba_funcify_generated) is numba_funcify_generated:
        register_funcify_and_cache_key(op_class)(numba_funcify_generated)


for _cls, _form in list(FORMS.items()):
    register_generated(_cls, _form)
ON_REGISTER.append(register_generated)
