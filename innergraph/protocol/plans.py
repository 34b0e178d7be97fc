"""Plans: a consumer's step semantics applied to one of its nodes, what the code generators read.

Terms
-----
plan
    The semantics (`innergraph.protocol.semantics`) applied to one node (`LoopPlan`,
    `BranchPlan`, `OncePlan`): for every param of every body where its value comes
    from (`Role`), which update-body output is each carried value's next value, which
    node input each carried value starts from, and which carried value each node
    output is. Generators (`innergraph.backends.numba_generated`, `jax_generated`)
    read only the plan.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from pytensor.graph.basic import Apply, NominalVariable, Variable

from innergraph.core.graph import body_of, params
from innergraph.protocol.semantics import Branch, Iterate, Once, semantics_of
from innergraph.protocol.slots import form_of

__all__ = ["BranchPlan", "LoopPlan", "OncePlan", "Role", "branch_plan", "loop_plan", "once_plan"]

_S = TypeVar("_S", Iterate, Branch, Once)

#: The slot meanings a generated loop runs (traced states and buffers, Scan's, are not generated).
_LOOP_MEANINGS = ("invariant", "sequence", "carry", "per-step output", "condition")

Role = tuple[str, int]


@dataclass(frozen=True)
class LoopPlan:
    """An `Iterate` applied to one node (module docstring, *plan*); positions are node-input positions.

    Attributes
    ----------
    n_inputs
        How many inputs the node has (the generated function takes them all).
    functions
        The position of each body's function input, in body order.
    update, pre_condition
        As `Iterate` (body indices).
    count, bound
        The position of the number of steps (counted loops) and of the bound, or None.
    sequences
        The position of each sequence.
    carries
        The position of each carried value's initial value.
    roles
        Per body, the `Role` of each of its params (empty for a body that never runs).
    next_values
        Per carried value, the update body's output giving its next value.
    per_step
        Per per-step output, the update body's output giving its row of each step and
        the position of the node input giving its number of rows (at least the number
        of steps; rows no step writes are zero).
    pre, post
        The pre-condition's output index in the pre-condition body, the post-condition's
        in the update body, or None.
    results
        Per node output, what it is: ``("carry", k)`` carried value ``k``'s final value,
        ``("per_step", j)`` per-step output ``j`` (every step's row).
    """

    n_inputs: int
    functions: tuple[int, ...]
    update: int
    pre_condition: int | None
    count: int | None
    bound: int | None
    sequences: tuple[int, ...]
    carries: tuple[int, ...]
    roles: tuple[tuple[Role, ...], ...]
    next_values: tuple[int, ...]
    per_step: tuple[tuple[int, int], ...]
    pre: int | None
    post: int | None
    results: tuple[Role, ...]

    @property
    def bodies_run(self) -> tuple[int, ...]:
        """The bodies the loop runs: the pre-condition's (if any), then the update."""
        return (self.update,) if self.pre_condition is None else (self.pre_condition, self.update)


def _position(node: Apply, var: Variable, what: str) -> int:
    for i, v in enumerate(node.inputs):
        if v is var:
            return i
    raise ValueError(f"{node.op}: its form's split gave {what} {var}, which is not an input of the node")


def _output_index(outputs: Sequence[Variable], var: Variable) -> int:
    return next(i for i, o in enumerate(outputs) if o is var)


class _OutputTaker:
    """Body output positions for the slots that read them, one position per slot.

    A body may output one variable at several positions (a zero branch returning the
    constant ``0.0`` twice); its prepared code copies each position
    (`innergraph.backends.numba_code.prepared_body`), so the node outputs they give are
    distinct arrays only if each slot takes a position of its own. Looking the variable
    up by identity gave every such slot the first position: two node outputs then
    shared one array, and an in-place update of one changed the other.
    """

    def __init__(self, bodies: Sequence[Any]) -> None:
        self._bodies = bodies
        self._taken: list[set[int]] = [set() for _ in bodies]

    def take(self, b: int, var: Variable) -> int:
        """The first position of ``var`` among body ``b``'s outputs no slot took yet (the first one if all are taken)."""
        outputs = self._bodies[b].outputs
        found = [i for i, o in enumerate(outputs) if o is var]
        free = [i for i in found if i not in self._taken[b]]
        index = (free or found)[0]
        self._taken[b].add(index)
        return index


def _check_semantics(op: Any, form: Any, sem: Iterate, header: Sequence[Variable]) -> None:
    n = form.n_bodies
    where = f"{op}: its step semantics {sem}"
    if not 0 <= sem.update < n:
        raise ValueError(f"{where} name update body {sem.update}; the consumer has {n} bodies")
    if sem.pre_condition is not None and (not 0 <= sem.pre_condition < n or sem.pre_condition == sem.update):
        raise ValueError(f"{where} name pre-condition body {sem.pre_condition}: it must be another of its {n} bodies")
    if n != 1 + (sem.pre_condition is not None):
        raise ValueError(f"{where} run {1 + (sem.pre_condition is not None)} of its {n} bodies; every body must be run")
    if not form.capabilities.loop:
        raise ValueError(f"{where}: Iterate is for loops; the form's capabilities do not say it is one")
    if sem.bound is not None and (form.capabilities.counted or not 0 <= sem.bound < len(header)):
        raise ValueError(f"{where} bound the steps by header input {sem.bound}; the header is {list(header)} (counted loops have no bound)")



@dataclass(frozen=True)
class _Declared:
    """What a plan reads of a node: its form, header and slots, and its bodies' params."""

    form: Any
    header: Sequence[Variable]
    slots: Sequence[Any]
    functions: Sequence[Variable]
    bodies: list[Any]
    param_lists: list[list[NominalVariable]]


def _declared(op: Any, node: Apply, kind: type[_S], missing: str, needs: str) -> tuple[_Declared, _S]:
    """``node``'s declaration and its semantics, of class ``kind`` (``ValueError`` naming the Op: ``missing`` / ``needs``)."""
    form = form_of(op)
    sem = semantics_of(form, op) if form is not None else None
    if form is None or not isinstance(sem, kind):
        raise ValueError(f"{op}: {missing}")
    split = sem.slots(node) if isinstance(sem, Once) and sem.slots is not None else form.split(node)
    if split is None:
        raise ValueError(f"{op}: its form's split gives no slots for {node}; {needs} needs them")
    header, slots = split
    functions = form.functions(node)
    bodies = [body_of(f) for f in functions]
    return _Declared(form, header, slots, functions, bodies, [params(b.param_types) for b in bodies]), sem


def _per_step(op: Any, node: Apply, sem: Iterate, slot: Any, taker: _OutputTaker) -> tuple[int, int]:
    """A per-step output slot's update-body output and the position of its number of rows (``ValueError`` naming the Op)."""
    where = f"{op}: per-step output slot of kind {slot.kind!r}"
    if len(slot.args) != 1 or len(slot.results) != 1:
        raise ValueError(f"{where} must have one argument (its number of rows) and one result; it has {len(slot.args)} and {len(slot.results)}")
    outs = [o for b, o in slot.outputs if b == sem.update]
    if len(outs) != 1 or len(slot.outputs) != 1:
        raise ValueError(f"{where}: its row must be one output of the update body {sem.update}")
    return taker.take(sem.update, outs[0]), _position(node, slot.args[0], f"the number of rows of a {slot.kind!r} slot")


def loop_plan(op: Any, node: Apply) -> LoopPlan:
    """The `LoopPlan` of ``node``, a node of a registered consumer declaring `Iterate` semantics.

    Raises
    ------
    ValueError
        Naming the Op, when its semantics or slots cannot be run as a loop: a body
        that never runs, a slot meaning a loop does not run (Scan's traces), a
        sequence in a loop that is not counted, a loop that cannot stop, ...
    """
    d, sem = _declared(op, node, Iterate, "no loop step semantics declared (register_consumer(..., Form(..., semantics=Iterate(...))))", "a loop's code")
    form, header, slots, functions, bodies, param_lists = d.form, d.header, d.slots, d.functions, d.bodies, d.param_lists
    _check_semantics(op, form, sem, header)
    roles: list[dict[int, Role]] = [{} for _ in bodies]
    sequences: list[int] = []
    carries: list[int] = []
    next_values: list[int] = []
    per_step: list[tuple[int, int]] = []
    results: dict[int, Role] = {}
    conditions: dict[int, int] = {}
    taker = _OutputTaker(bodies)
    for slot in slots:
        meaning = form.meaning(slot).value
        if meaning not in _LOOP_MEANINGS:
            raise ValueError(f"{op}: slot kind {slot.kind!r} means {meaning!r}; a generated loop runs slots meaning {list(_LOOP_MEANINGS)}")
        if meaning == "condition":
            (b, out), = slot.outputs
            conditions[b] = taker.take(b, out)
            continue
        if meaning == "per-step output":
            per_step.append(_per_step(op, node, sem, slot, taker))
            results[_output_index(node.outputs, slot.results[0])] = ("per_step", len(per_step) - 1)
            continue
        pos = _position(node, slot.args[0], f"the argument of a {slot.kind!r} slot")
        if meaning == "sequence":
            if not form.capabilities.counted:
                raise ValueError(f"{op}: slot kind {slot.kind!r} is a sequence, but the loop is not counted")
            role: Role = ("row", len(sequences))
            sequences.append(pos)
        elif meaning == "carry":
            role = ("carry", len(carries))
            carries.append(pos)
            outs = [o for b, o in slot.outputs if b == sem.update]
            if len(outs) != 1:
                raise ValueError(f"{op}: a {slot.kind!r} slot's next value must be one output of the update body {sem.update}")
            next_values.append(taker.take(sem.update, outs[0]))
            for r in slot.results:
                results[_output_index(node.outputs, r)] = ("carry", len(carries) - 1)
        else:
            role = ("input", pos)
        for b, p in slot.params:
            roles[b][param_lists[b].index(p)] = role
    run = (sem.update,) if sem.pre_condition is None else (sem.pre_condition, sem.update)
    for b in run:
        missing = [i for i in range(len(param_lists[b])) if i not in roles[b]]
        if missing:
            raise ValueError(f"{op}: no slot binds params {missing} of body {b}")
    extra = [b for b in conditions if b not in run]
    if extra or (sem.pre_condition is not None and sem.pre_condition not in conditions):
        raise ValueError(f"{op}: conditions are output by bodies {sorted(conditions)}; the pre-condition body must output one, and only it and the update body may")
    count = _position(node, header[0], "the number of steps") if form.capabilities.counted else None
    bound = _position(node, header[sem.bound], "the bound") if sem.bound is not None else None
    post = conditions.get(sem.update)
    if count is None and bound is None and post is None:
        raise ValueError(f"{op}: a loop that is not counted needs a post-condition (a CONDITION output of the update body) or a bound")
    if per_step and (count is None or conditions):
        raise ValueError(
            f"{op}: a generated loop writes per-step outputs only when it is counted and has no condition "
            "(the number of rows is known before the loop and every step runs)"
        )
    if sorted(results) != list(range(len(node.outputs))):
        raise ValueError(f"{op}: a generated loop's outputs must each be a carried value's final value or a per-step output")
    return LoopPlan(
        n_inputs=len(node.inputs),
        functions=tuple(_position(node, f, "function input") for f in functions),
        update=sem.update,
        pre_condition=sem.pre_condition,
        count=count,
        bound=bound,
        sequences=tuple(sequences),
        carries=tuple(carries),
        roles=tuple(tuple(r[i] for i in range(len(ps))) if b in run else () for b, (r, ps) in enumerate(zip(roles, param_lists, strict=True))),
        next_values=tuple(next_values),
        per_step=tuple(per_step),
        pre=conditions.get(sem.pre_condition) if sem.pre_condition is not None else None,
        post=post,
        results=tuple(results[i] for i in range(len(node.outputs))),
    )


@dataclass(frozen=True)
class BranchPlan:
    """A `Branch` applied to one node; positions are node-input positions.

    Attributes
    ----------
    n_inputs
        How many inputs the node has.
    functions
        The position of each body's function input (then, else).
    condition
        The position of the condition.
    roles
        Per body, the node input each param reads.
    outputs
        Per body, the body output giving each node output.
    """

    n_inputs: int
    functions: tuple[int, ...]
    condition: int
    roles: tuple[tuple[int, ...], ...]
    outputs: tuple[tuple[int, ...], ...]


def _bound(op: Any, node: Apply, d: _Declared, what: str) -> tuple[list[dict[int, int]], list[dict[int, int]]]:
    """Per body, the node input each param reads and the body output giving each node output (invariant and output slots only)."""
    roles: list[dict[int, int]] = [{} for _ in d.bodies]
    outputs: list[dict[int, int]] = [{} for _ in d.bodies]
    taker = _OutputTaker(d.bodies)
    for slot in d.slots:
        meaning = d.form.meaning(slot).value
        if meaning == "invariant":
            pos = _position(node, slot.args[0], f"the argument of a {slot.kind!r} slot")
            for b, p in slot.params:
                roles[b][d.param_lists[b].index(p)] = pos
        elif meaning == "output":
            (result,) = slot.results
            for b, o in slot.outputs:
                outputs[b][_output_index(node.outputs, result)] = taker.take(b, o)
        else:
            raise ValueError(f"{op}: slot kind {slot.kind!r} means {meaning!r}; a generated {what} runs invariant and output slots")
    n_out = len(node.outputs)
    for b in range(len(d.bodies)):
        if sorted(roles[b]) != list(range(len(d.param_lists[b]))) or sorted(outputs[b]) != list(range(n_out)):
            raise ValueError(f"{op}: body {b}'s params and outputs must each be bound by one slot")
    return roles, outputs


def branch_plan(op: Any, node: Apply) -> BranchPlan:
    """The `BranchPlan` of ``node``, a node of a registered consumer declaring `Branch` semantics (``ValueError`` naming the Op otherwise)."""
    d, sem = _declared(op, node, Branch, "no branch step semantics declared (Form(..., semantics=Branch()))", "a branch's code")
    roles, outputs = _bound(op, node, d, "branch")
    n_out = len(node.outputs)
    return BranchPlan(
        n_inputs=len(node.inputs),
        functions=tuple(_position(node, f, "function input") for f in d.functions),
        condition=_position(node, d.header[sem.condition], "the condition"),
        roles=tuple(tuple(r[i] for i in range(len(r))) for r in roles),
        outputs=tuple(tuple(o[k] for k in range(n_out)) for o in outputs),
    )


@dataclass(frozen=True)
class OncePlan:
    """A `Once` applied to one node; positions are node-input positions.

    Attributes
    ----------
    n_inputs
        How many inputs the node has (function inputs included: they arrive as data).
    function
        The position of the body's function input.
    roles
        The node input each param reads.
    outputs
        The body output giving each node output.
    """

    n_inputs: int
    function: int
    roles: tuple[int, ...]
    outputs: tuple[int, ...]


def once_plan(op: Any, node: Apply) -> OncePlan:
    """The `OncePlan` of ``node``, a node of a registered consumer declaring `Once` semantics (``ValueError`` naming the Op otherwise)."""
    d, _ = _declared(op, node, Once, "no call semantics declared (Form(..., semantics=Once()))", "a call's code")
    (roles,), (outputs,) = _bound(op, node, d, "call")
    return OncePlan(
        n_inputs=len(node.inputs),
        function=_position(node, d.functions[0], "function input"),
        roles=tuple(roles[i] for i in range(len(roles))),
        outputs=tuple(outputs[k] for k in range(len(node.outputs))),
    )
