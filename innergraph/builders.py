"""User-facing builders that mirror PyTensor's: `scan`.

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
from pytensor.graph.basic import Apply, Variable
from pytensor.graph.traversal import ancestors

from innergraph.convert import LIFTERS, lift_graph

__all__ = ["scan"]


def scan(*args: Any, **kwargs: Any) -> Any:
    """`pytensor.scan`, building the in-graph form (see the module docstring)."""
    before = _native_nodes(_variables_in((args, kwargs)))
    result = pytensor.scan(*args, **kwargs)
    outputs, updates = result if isinstance(result, tuple) else (result, None)
    out_list = [outputs] if isinstance(outputs, Variable) else list(outputs)
    update_items = list(updates.items()) if updates else []
    targets = out_list + [value for _, value in update_items]
    new = _native_nodes(targets) - before
    lifted = lift_graph(targets, only=new)
    lifted_outputs = lifted[: len(out_list)]
    new_outputs: Any = lifted_outputs[0] if isinstance(outputs, Variable) else type(outputs)(lifted_outputs)
    if not isinstance(result, tuple):
        return new_outputs
    new_updates = type(updates)()
    for (key, _), value in zip(update_items, lifted[len(out_list) :], strict=True):
        new_updates[key] = value
    return new_outputs, new_updates


scan.__signature__ = inspect.signature(pytensor.scan)  # type: ignore[attr-defined]


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
