"""Step semantics: how a consumer runs its bodies, declared once, read by every code generator.

A consumer's `Form` says what its slots are (`Meaning`) and what it is
(`Capabilities`). That is enough for the rewrites, not for running it: which body
decides whether the first step runs, which one computes the next state. A form's
``semantics`` says it, and then innergraph generates the consumer's compiled code
for each backend (Numba: `innergraph.backends.numba_generated`; JAX:
`innergraph.backends.jax_generated`) with no backend code from the contributor.

Terms
-----
step semantics
    The declaration (`Iterate`, `Branch` or `Once`): for a loop, which body is the *update* (it returns
    each carried value's next value and, optionally, the *post-condition*: whether
    another step runs), which body is the *pre-condition* (evaluated once, before
    the first step: whether the first step runs) and which header input, if any,
    *bounds* the number of steps. A counted loop (``Capabilities(counted=True)``)
    runs at most its first header input's number of steps, step ``t`` reading row
    ``t`` of each `SEQUENCE`. Conditions are `CONDITION` slots: the one output by
    the pre-condition body is the pre-condition, the one output by the update body
    the post-condition; both mean "go on" (true: the next step runs). A
    conditional (`Branch`) runs one of two bodies; a call (`Once`) runs its one
    body once on its arguments.
runtime slots
    The slots a generator reads: the form's ``split``, or, for a `Once` whose
    form freezes some nodes' signatures (``split`` gives None: a call carrying
    gradient-override functions), ``Once.slots``. Function inputs that are not
    bodies of the form (those override functions) are data the code never runs.

The semantics applied to one node are its *plan* (`innergraph.protocol.plans`), which
is what the generators read.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pytensor.graph.basic import Apply, Variable

__all__ = ["Branch", "Iterate", "Once", "Semantics", "semantics_of", "validate"]


@dataclass(frozen=True)
class Iterate:
    """A loop's step semantics (module docstring, *step semantics*).

    Parameters
    ----------
    update
        The body that computes each carried value's next value (its `CARRY`
        slots' outputs) and, if it outputs a `CONDITION`, whether another step runs.
    pre_condition
        The body whose `CONDITION` output, evaluated once before the first step,
        says whether that step runs; None: the first step always runs (a counted
        loop with zero steps still runs none).
    bound
        The header input (its position in the header `split` returns) that bounds
        the number of steps, or None. Not for counted loops (their first header
        input is the number of steps).

    Examples
    --------
    ``Iterate()``: a counted loop of one body (``fori_loop``, the worked example);
    ``Iterate(update=1, pre_condition=0)``: a while loop whose body 0 is the
    condition and body 1 the step returning its post-condition last.
    """

    update: int = 0
    pre_condition: int | None = None
    bound: int | None = None


@dataclass(frozen=True)
class Branch:
    """A conditional's step semantics: body 0 runs when the condition holds, body 1 otherwise.

    Exactly one body runs (lazy). Its params read their `INVARIANT` slots'
    arguments; each `OUTPUT` slot's result is the output of the body that ran.

    Parameters
    ----------
    condition
        The header input (its position in the header `split` returns) that is the condition.
    """

    condition: int = 0


#: How a generator reads a node's runtime slots: ``node -> (header inputs, slots)`` (a form's ``split``'s result).
RuntimeSlots = Callable[[Apply], "tuple[Sequence[Variable], Sequence[Any]] | None"]


@dataclass(frozen=True)
class Once:
    """A call's step semantics: its one body runs once on the node's arguments.

    Each param reads its `INVARIANT` slot's argument; each `OUTPUT` slot's result is
    the body's output. No other meaning runs.

    Parameters
    ----------
    slots
        ``slots(node)``: the node's runtime slots (module docstring), for forms whose
        ``split`` gives None for some nodes to keep their signature fixed; None: the
        form's ``split``. Innergraph's `Call` passes its slots here, so a call with
        gradient-override functions (inputs the call never runs) has code generated
        like any other.
    """

    slots: RuntimeSlots | None = None


#: A form's semantics, or a function of the Op giving them (when they depend on its props).
Semantics = Iterate | Branch | Once | Callable[[Any], "Iterate | Branch | Once"]


def semantics_of(form: Any, op: Any) -> Iterate | Branch | Once | None:
    """The step semantics ``form`` declares for ``op``, or None."""
    declared = getattr(form, "semantics", None)
    if declared is None or isinstance(declared, Iterate | Branch | Once):
        return declared
    found = declared(op)
    if not isinstance(found, Iterate | Branch | Once):
        raise TypeError(f"{op}: its form's semantics gave {found!r}, not an innergraph.consumer.Iterate, Branch or Once")
    return found


#: Where a param's value comes from: ``("input", position)`` a node input, ``("row", j)`` row
#: ``t`` of the ``j``-th sequence, ``("carry", k)`` the current value of carried value ``k``.

def validate(form: Any, where: str) -> None:
    """Check a form's semantics at registration, as far as they do not depend on a node (``ValueError``)."""
    declared = getattr(form, "semantics", None)
    if declared is None or callable(declared) and not isinstance(declared, Iterate | Branch | Once):
        return
    if isinstance(declared, Once):
        if form.n_bodies != 1 or form.capabilities.loop or form.capabilities.lazy:
            raise ValueError(f"{where}: Once semantics are for consumers of one body that are neither loops nor lazy")
        return
    if isinstance(declared, Branch):
        if form.n_bodies != 2 or not form.capabilities.lazy or form.capabilities.loop:
            raise ValueError(f"{where}: Branch semantics are for lazy consumers of two bodies that are not loops")
        return
    if not isinstance(declared, Iterate):
        raise ValueError(f"{where}: semantics must be an Iterate, a Branch, a Once or a function of the Op giving one, got {declared!r}")
    if not form.capabilities.loop:
        raise ValueError(f"{where}: Iterate semantics are for loops; the capabilities do not say it is one")
    bodies = [declared.update, *([] if declared.pre_condition is None else [declared.pre_condition])]
    if any(not 0 <= b < form.n_bodies for b in bodies) or len(set(bodies)) != len(bodies):
        raise ValueError(f"{where}: {declared} names bodies {bodies}; the consumer has {form.n_bodies}")
