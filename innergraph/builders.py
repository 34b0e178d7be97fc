"""User-facing builders that mirror PyTensor's: `scan`, `op_from_graph`.

`scan` has exactly `pytensor.scan`'s signature and semantics. It reuses
`pytensor.scan`'s argument processing (taps, ``outputs_info`` forms, shared-variable
updates, random generators, ``return_updates`` — about a thousand lines that must
not be duplicated), then lifts the one Scan that call built into the in-graph
form: the returned outputs and update values read a `innergraph.ops.scan.Scan`
whose body is a graph input. Scans built earlier by the caller are left alone.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from typing import Any

import pytensor
import pytensor.tensor as pt
from pytensor.graph.basic import Apply, Variable
from pytensor.graph.traversal import ancestors
from pytensor.scan.basic import get_updates_and_outputs

from innergraph.core.errors import ArityError, BodyTypeError
from innergraph.lifting.rules import LIFTERS, lift_graph
from innergraph.ops import checkpoint as checkpointing

__all__ = ["InGraphOpFromGraph", "op_from_graph", "scan"]


def scan(*args: Any, checkpoint: Any = None, **kwargs: Any) -> Any:
    """`pytensor.scan`, building the in-graph form (see the module docstring).

    ``checkpoint`` (``None``, ``"sqrt"`` or a segment length ``k``) is this loop's
    checkpoint policy for its gradients (`innergraph.ops.checkpoint`): store every
    k-th carry and recompute the rest in the reverse pass. ``None`` leaves the
    current default policy (`innergraph.checkpointing`) in charge.

    Raises
    ------
    ArityError
        When the step function returns more or fewer outputs than ``outputs_info``
        has entries (one per output: an initial state, or None for a mapped output).
    BodyTypeError
        When the step function returns a Python string, or a carried output whose
        number of dimensions is not its initial state's.

    Nothing the caller passed is modified: ``sequences`` and ``outputs_info`` dicts
    are copied before `pytensor.scan` fills in their default taps.
    """
    policy = checkpointing.checked(checkpoint)
    before = _native_nodes(_variables_in((args, kwargs)))
    result = pytensor.scan(**_checked_arguments(_scan_signature.bind(*args, **kwargs).arguments))
    outputs, updates = result if isinstance(result, tuple) else (result, None)
    out_list = [outputs] if isinstance(outputs, Variable) else list(outputs)
    update_items = list(updates.items()) if updates else []
    targets = out_list + [value for _, value in update_items]
    new = _native_nodes(targets) - before
    lifted = lift_graph(targets, only=new)
    lifted_outputs = lifted[: len(out_list)]
    if policy is not None:
        checkpointing.mark(lifted_outputs, policy)
    new_outputs: Any = lifted_outputs[0] if isinstance(outputs, Variable) else type(outputs)(lifted_outputs)
    if not isinstance(result, tuple):
        return new_outputs
    new_updates = type(updates)()
    for (key, _), value in zip(update_items, lifted[len(out_list) :], strict=True):
        new_updates[key] = value
    return new_outputs, new_updates


_scan_signature = inspect.signature(pytensor.scan)
scan.__signature__ = _scan_signature.replace(  # type: ignore[attr-defined]
    parameters=[
        *_scan_signature.parameters.values(),
        inspect.Parameter("checkpoint", inspect.Parameter.KEYWORD_ONLY, default=None),
    ]
)


def _checked_arguments(arguments: dict[str, Any]) -> dict[str, Any]:
    """`pytensor.scan`'s bound arguments with the dicts copied and the step function checked."""
    checked = {name: _copied(value) for name, value in arguments.items()}
    checked["fn"] = _checked_step(arguments["fn"], _entries(arguments.get("outputs_info")))
    return checked


def _copied(value: Any) -> Any:
    """``value`` with its dicts (``{"input": x, "taps": ...}``...) copied: `pytensor.scan` writes default taps into them."""
    if isinstance(value, dict):
        return dict(value)
    if isinstance(value, list | tuple):
        return type(value)(_copied(v) for v in value)
    return value


def _entries(outputs_info: Any) -> list[Any]:
    """``outputs_info`` as the list of entries `pytensor.scan` reads (its ``wrap_into_list``)."""
    if outputs_info is None:
        return []
    return list(outputs_info) if isinstance(outputs_info, list | tuple) else [outputs_info]


def _checked_step(fn: Any, entries: list[Any]) -> Any:
    """``fn``, its result checked against ``outputs_info`` before `pytensor.scan` reads it, and returned unchanged."""

    def step(*args: Any) -> Any:
        result = fn(*args)
        _check_step_result(result, entries)
        return result

    return step


def _check_step_result(result: Any, entries: list[Any]) -> None:
    """An `ArityError` or `BodyTypeError` naming ``scan``, ``fn``'s output and ``outputs_info``."""
    _refuse_strings(result)
    try:
        _, outputs, _ = get_updates_and_outputs(result)
    except ValueError:
        return  # not outputs, updates and a condition: PyTensor's own message says what it accepts
    if entries and len(outputs) != len(entries):
        raise ArityError(
            f"scan: fn returns {_count(len(outputs), 'output')} but outputs_info has "
            f"{_count(len(entries), 'entry', 'entries')}; expected one output of fn per entry of outputs_info "
            "(an entry is the output's initial state, or None for an output that is not fed back)"
        )
    for i, (out, entry) in enumerate(zip(outputs, entries)):
        _check_carried(i, out, entry)


def _check_carried(i: int, out: Variable, entry: Any) -> None:
    """Output ``i`` of ``fn`` against its initial state: a state keeps its number of dimensions from step to step."""
    initial = entry.get("initial") if isinstance(entry, dict) else entry
    if initial is None or not hasattr(out.type, "ndim"):
        return
    taps = entry.get("taps") if isinstance(entry, dict) else None
    taps = [-1] if taps is None else list(taps) if isinstance(taps, list | tuple) else [taps]
    initial = initial if isinstance(initial, Variable) else pt.as_tensor_variable(initial)
    if not hasattr(initial.type, "ndim"):
        return
    where = f"outputs_info[{i}]" + ("['initial']" if isinstance(entry, dict) else "")
    if taps == [-1]:
        expected = initial.type.ndim
        state = f"{where} ({initial}) is {_tensor(expected)} ({initial.type})"
    else:  # the states of the taps, stacked along a leading axis
        expected = initial.type.ndim - 1
        state = f"{where} ({initial}, {initial.type}) stacks the states of taps {taps} along its first axis"
    if out.type.ndim == expected:
        return
    raise BodyTypeError(
        f"scan: output {i} of fn ({out}) is {_tensor(out.type.ndim)} ({out.type}), but {state}; "
        f"expected {_tensor(expected)}: a carried output has its initial state's number of dimensions at every step"
    )


def _refuse_strings(result: Any) -> None:
    expected = "expected a variable, or a list or tuple of variables (one per entry of outputs_info)"
    if isinstance(result, str | bytes):
        raise BodyTypeError(f"scan: fn returns the Python string {result!r}; {expected}")
    if isinstance(result, list | tuple):
        for k, item in enumerate(result):
            if isinstance(item, str | bytes):
                raise BodyTypeError(f"scan: fn returns the Python string {item!r} as output {k}; {expected}")


def _count(n: int, one: str, many: str | None = None) -> str:
    return f"{n} {one if n == 1 else many or one + 's'}"


def _tensor(ndim: int) -> str:
    names = {0: "a scalar", 1: "a vector", 2: "a matrix"}
    return names.get(ndim, f"a {ndim}-dimensional tensor")


def _variables_in(obj: Any) -> Iterable[Variable]:
    if isinstance(obj, Variable):
        yield obj
    elif isinstance(obj, dict):
        for value in obj.values():
            yield from _variables_in(value)
    elif isinstance(obj, list | tuple):
        for item in obj:
            yield from _variables_in(item)


def _native_nodes(variables: Iterable[Variable]) -> set[Apply]:
    return {
        v.owner
        for v in ancestors(list(variables))
        if v.owner is not None and type(v.owner.op) in LIFTERS
    }


class InGraphOpFromGraph:
    """What `op_from_graph` returns: call it like an `OpFromGraph` to get in-graph calls.

    Every application reads the same folded body, so all call sites share one body
    (compiled once). ``native`` is the `OpFromGraph` it mirrors.
    """

    def __init__(self, native: Any):
        self.native = native

    def __call__(self, *inputs: Any, return_list: bool = False) -> Any:
        outputs = self.native(*inputs, return_list=True)
        lifted = lift_graph(outputs, only={outputs[0].owner})
        return lifted if return_list or len(lifted) != 1 else lifted[0]

    def __repr__(self) -> str:
        return f"InGraphOpFromGraph({self.native})"


def op_from_graph(inputs: list[Variable], outputs: list[Variable], **kwargs: Any) -> InGraphOpFromGraph:
    """`OpFromGraph(inputs, outputs, **kwargs)`, applied as in-graph calls.

    The arguments are exactly `pytensor.compile.builders.OpFromGraph`'s (``inline``,
    ``pullback``/``lop_overrides``, ``pushforward``/``rop_overrides``,
    ``connection_pattern``, ``strict``, ``name``, shared variables...): PyTensor builds
    and validates the Op, and each application is lifted into an `innergraph.Call`
    carrying the same body and gradient overrides. An Op that cannot be lifted
    safely (an override reading variables it does not receive) applies natively.
    """
    from pytensor.compile.builders import OpFromGraph

    return InGraphOpFromGraph(OpFromGraph(inputs, outputs, **kwargs))
