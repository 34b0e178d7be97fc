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
from pytensor.graph.basic import Apply, Variable
from pytensor.graph.traversal import ancestors

from innergraph.lifting.rules import LIFTERS, lift_graph
from innergraph.ops import checkpoint as checkpointing

__all__ = ["InGraphOpFromGraph", "op_from_graph", "scan"]


def scan(*args: Any, checkpoint: Any = None, **kwargs: Any) -> Any:
    """`pytensor.scan`, building the in-graph form (see the module docstring).

    ``checkpoint`` (``None``, ``"sqrt"`` or a segment length ``k``) is this loop's
    checkpoint policy for its gradients (`innergraph.ops.checkpoint`): store every
    k-th carry and recompute the rest in the reverse pass. ``None`` leaves the
    current default policy (`innergraph.checkpointing`) in charge.
    """
    policy = checkpointing.checked(checkpoint)
    before = _native_nodes(_variables_in((args, kwargs)))
    result = pytensor.scan(*args, **kwargs)
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
