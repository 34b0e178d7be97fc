"""How a consumer declares its slots: meanings, kinds, capabilities and the registry.

Terms
-----
slot
    One binding of a consumer node: the outer inputs it reads (``args``), the body
    params they bind (``params``, each tagged with its body), the body outputs it
    returns (``outputs``, tagged likewise) and the consumer outputs it produces
    (``results``). A slot binds one param in *each* body that reads it: a loop's
    carried state is read by its condition body and by its step body.
slot kind
    A consumer's own name for a group of slots (Scan's ``"seq"``, a conditional's
    ``"then_arg"``), declared with a `SlotKind`: its `Meaning` and the bodies its
    slots bind params in. Only the consumer reads kind names (to lay a node out);
    every generic rewrite reads meanings.
meaning
    What a slot is, in consumer-neutral terms (`Meaning`); the set is closed, and
    registering a kind with any other meaning is an error.
capabilities
    What a consumer is (`Capabilities`): a loop, lazy, counted (its first header
    input is the number of steps). Rewrites that move work out of bodies or across
    steps ask these, never the consumer's class.
form
    A consumer class's declaration (`Form`): its kinds, its capabilities, the order
    in which it lays out params, body outputs, outer inputs and results per kind, how
    to split a node into slots (``split``) and how to make one from slots (``make``).
    `register_consumer` records it; the registry is plain module state, so it
    survives ``innergraph.uninstall()``/``install()``.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any

from pytensor.graph.basic import Apply, Variable
from pytensor.graph.type import Type

from innergraph.protocol.semantics import Semantics, validate

__all__ = [
    "FORMS",
    "ON_REGISTER",
    "Capabilities",
    "Form",
    "Meaning",
    "Slot",
    "SlotKind",
    "form_of",
    "register_consumer",
]


class Meaning(str, Enum):
    """What a slot is, for every generic rewrite.

    Inputs (slots with ``args`` and ``params``, no outputs):

    ``INVARIANT``
        An argument every evaluation of a body reads with the same value: a call's
        or branch's argument, a loop's non-sequence. Duplicates merge, small
        constants are inlined, a loop's invariant work may read it.
    ``SEQUENCE``
        A per-step input: step ``t`` reads row ``t`` of the argument (counted loops).

    Carried state (``args`` = initial value, ``params`` read each step, ``outputs``
    = the next value, ``results`` = the final value or the trace):

    ``CARRY``
        Read and written each step; the result is the last value.
    ``TRACE``
        Read at the ``in_taps`` and written each step; the result is the initial
        rows followed by every step's value (Scan's sit-sot and mit-sot).
    ``BUFFER``
        A buffer read at ``in_taps`` and written at ``out_taps`` (Scan's mit-mot).

    Outputs (``outputs`` and ``results``, no params):

    ``PER_STEP_OUTPUT``
        Written each step, never read; the result holds every step's value and the
        one argument is the number of rows of that result (Scan's nit-sot).
    ``OUTPUT``
        A body output returned as a result (a call's; a conditional's, one output per branch).
    ``CONDITION``
        A loop's condition (an output of some body, no result). Always live.
    """

    INVARIANT = "invariant"
    SEQUENCE = "sequence"
    CARRY = "carry"
    TRACE = "trace"
    BUFFER = "buffer"
    PER_STEP_OUTPUT = "per-step output"
    OUTPUT = "output"
    CONDITION = "condition"


#: The meanings whose slots only bind params (outer argument -> param).
INPUT_MEANINGS = frozenset({Meaning.INVARIANT, Meaning.SEQUENCE})
#: The meanings whose slots carry a value from step to step.
STATE_MEANINGS = frozenset({Meaning.CARRY, Meaning.TRACE, Meaning.BUFFER})


@dataclass(frozen=True)
class SlotKind:
    """A consumer's kind of slot: its name, its `Meaning`, the bodies its slots bind params in.

    Parameters
    ----------
    name
        The consumer's own name for the kind (unique within a form).
    meaning
        What its slots are; a `Meaning` or its value (``"carry"``).
    bodies
        The body indices a slot of this kind binds one param in each of (and, for
        carried state, returns its next value from: the last of them).
    """

    name: str
    meaning: Meaning
    bodies: tuple[int, ...] = (0,)


@dataclass(frozen=True)
class Capabilities:
    """What a consumer is, for the rewrites that move work.

    Parameters
    ----------
    loop
        Its bodies run once per step (invariant work may move out of them).
    lazy
        A body may not run at all, depending on a run-time value (a conditional's
        branches): no work moves out of its bodies.
    counted
        Its first header input is the number of steps, known before the loop runs
        (per-step work may move out of it, a trace read only at its end is untraced).
    """

    loop: bool = False
    lazy: bool = False
    counted: bool = False


@dataclass(frozen=True)
class Slot:
    """One binding of a consumer (see the module docstring).

    ``params`` and ``outputs`` hold ``(body index, variable)``; ``output_types``
    the declared type of each output, one per entry of ``outputs`` (an `OUTPUT` slot
    of a conditional holds one output and one type per branch). ``in_taps``/``out_taps``
    are a traced state's.
    """

    kind: str
    args: tuple[Variable, ...] = ()
    params: tuple[tuple[int, Variable], ...] = ()
    outputs: tuple[tuple[int, Variable], ...] = ()
    output_types: tuple[Type, ...] = ()
    results: tuple[Variable, ...] = ()
    in_taps: tuple[int, ...] = ()
    out_taps: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if len(self.output_types) != len(self.outputs):
            raise ValueError(
                f"slot of kind {self.kind!r}: {len(self.outputs)} outputs but {len(self.output_types)} output_types "
                "(one type per entry of outputs)"
            )

    def with_(self, **changes: Any) -> Slot:
        """A copy with ``changes``."""
        return replace(self, **changes)

    def param(self, body: int) -> Variable | None:
        """The param this slot binds in ``body`` (the first, for several taps), or None."""
        return next((p for b, p in self.params if b == body), None)

    @property
    def bodies(self) -> tuple[int, ...]:
        """The bodies this slot binds params in, in order."""
        return tuple(dict.fromkeys(b for b, _ in self.params))


Split = Callable[[Apply], "tuple[tuple[Variable, ...], list[Slot]] | None"]
Make = Callable[[Any, tuple[Variable, ...], list[Variable], dict[str, list[Slot]], list[Variable]], Apply]


@dataclass(frozen=True)
class Form:
    """How a consumer class maps to slots (see the module docstring).

    Parameters
    ----------
    n_bodies
        How many function inputs the consumer reads.
    param_order, output_order, arg_order, result_order
        Kind names, in the order the consumer lays out each body's params, each
        body's outputs, the outer inputs after the header, and the results.
    split
        ``split(node)``: ``(header inputs, slots)``, or None when the node's signature
        is fixed (no rewrite may change it).
    make
        ``make(template_op, header, functions, slots_by_kind, args)``: the node with
        those slots (``args`` are the slots' outer inputs in ``arg_order``).
    functions
        ``functions(node)``: its function inputs, in body-index order.
    kinds
        The `SlotKind` of every kind name used.
    capabilities
        What the consumer is.
    loop_key
        ``loop_key(signature)``: loops with equal keys run the same steps and may
        merge into one (None: this one never merges). Only for loops.
    required
        Kind names whose slots are live with no result (besides conditions).
    semantics
        How it runs its bodies (`innergraph.protocol.semantics.Iterate`, `Branch` or `Once`,
        or a function of the Op giving them), from which innergraph generates its Numba and JAX code;
        None: it runs under those backends only with code of its own (Numba: object
        mode otherwise).
    """

    n_bodies: int
    param_order: tuple[str, ...]
    output_order: tuple[str, ...]
    arg_order: tuple[str, ...]
    result_order: tuple[str, ...]
    split: Split
    make: Make
    functions: Callable[[Apply], list[Variable]]
    required: tuple[str, ...] = ()
    kinds: tuple[SlotKind, ...] = ()
    capabilities: Capabilities = field(default_factory=Capabilities)
    loop_key: Callable[[Any], Hashable | None] | None = None
    semantics: Semantics | None = None

    def kind(self, name: str) -> SlotKind:
        """The declaration of kind ``name``."""
        for k in self.kinds:
            if k.name == name:
                return k
        raise KeyError(f"slot kind {name!r} is not declared by this form (kinds: {[k.name for k in self.kinds]})")

    def meaning(self, slot: Slot) -> Meaning:
        """What ``slot`` is."""
        return self.kind(slot.kind).meaning

    def kind_for(self, meaning: Meaning, bodies: Sequence[int]) -> str | None:
        """The name of the kind of ``meaning`` whose slots bind exactly ``bodies``, if declared."""
        return next((k.name for k in self.kinds if k.meaning is meaning and k.bodies == tuple(bodies)), None)

    def is_required(self, slot: Slot) -> bool:
        """Whether ``slot`` is live with no result (a condition, or a kind declared required)."""
        return slot.kind in self.required or self.meaning(slot) is Meaning.CONDITION


#: Consumer class -> its `Form`. Filled by `register_consumer`.
FORMS: dict[type, Form] = {}

#: Called with ``(op_class, form)`` after each registration (a backend that generates
#: code from forms registers it for consumers registered after it loaded).
ON_REGISTER: list[Callable[[type, Form], None]] = []


def _validated(op_class: type, form: Form) -> Form:
    where = f"register_consumer({op_class.__name__})"
    names = [k.name for k in form.kinds]
    if len(set(names)) != len(names):
        raise ValueError(f"{where}: slot kinds declared twice: {names}")
    checked = []
    for k in form.kinds:
        try:
            meaning = Meaning(k.meaning)
        except ValueError:
            known = ", ".join(repr(m.value) for m in Meaning)
            raise ValueError(f"{where}: slot kind {k.name!r} has unknown meaning {k.meaning!r}; known meanings: {known}") from None
        if not k.bodies or any(not 0 <= b < form.n_bodies for b in k.bodies):
            raise ValueError(f"{where}: slot kind {k.name!r} binds bodies {k.bodies}, the consumer has {form.n_bodies}")
        checked.append(replace(k, meaning=meaning))
    for order in ("param_order", "output_order", "arg_order", "result_order", "required"):
        unknown = [n for n in getattr(form, order) if n not in names]
        if unknown:
            raise ValueError(f"{where}: {order} names undeclared slot kinds {unknown}; declare them in kinds")
    if form.loop_key is not None and not form.capabilities.loop:
        raise ValueError(f"{where}: a loop_key is given but the capabilities do not say it is a loop")
    validate(form, where)
    return replace(form, kinds=tuple(checked))


def register_consumer(op_class: type, form: Form) -> Form:
    """Declare ``op_class`` a consumer with ``form``; every generic rewrite then applies to it.

    Parameters
    ----------
    op_class
        The consumer's Op class (exact class: subclasses register their own form).
    form
        Its declaration.

    Returns
    -------
    Form
        The form as registered (meanings given as strings become `Meaning`).

    Raises
    ------
    ValueError
        When a kind has an unknown meaning, binds a body the consumer does not have,
        or an order names an undeclared kind.
    """
    validated = _validated(op_class, form)
    FORMS[op_class] = validated
    for hook in ON_REGISTER:
        hook(op_class, validated)
    return validated


def form_of(op: Any) -> Form | None:
    """The registered form of ``op``'s class, or None."""
    return FORMS.get(type(op))
