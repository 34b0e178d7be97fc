"""The pipeline's lift of PyTensor's own `OpFromGraph` into an in-graph `Call`.

Terms
-----
plain OpFromGraph
    A node whose Op is exactly `OpFromGraph` (no subclass), not in-place, not
    ``inline=True`` and compiled with PyTensor's default settings (no ``mode`` or
    other `pytensor.function` keyword but ``on_unused_input``, which PyTensor 3.3
    no longer applies to an inner graph). Only those are lifted here: subclasses stand for Ops with a fixed signature that rewrites
    and dispatches match by class (PyTensor PR #2067); ``inline=True`` Ops are
    inlined by PyTensor itself (``inline_ofg_expansion``, -0.01, before this
    pass); a ``mode`` is the user's choice of how the body is compiled.
compile-time lift
    The lift done inside ``pytensor.function``'s rewriting. Every gradient was
    built before it, so the `Call` carries neither the gradient overrides nor
    the explicit connection pattern (which only gradients read): its signature is
    then free for the consumer rewrites (dead outputs, unused params, constant
    arguments, forwarding). `innergraph.lift` on request keeps both.

helpful lift
    A node is lifted only when the in-graph form can do something the native
    Op cannot (`gains`): an output nobody reads (dead; or read only as an
    unused input of another lifted OpFromGraph, as the Op PyTensor builds for
    a pullback reads the outputs it rarely needs), an inner input the body
    does not read (unused), an argument that is a small constant (inlined) or
    given twice, an output that returns an input, or another application of an
    OpFromGraph with the same inner graph (one body, compiled once). Otherwise the node
    stays native: it compiles exactly as in PyTensor, and the graph the user
    gets still holds the OpFromGraph.

`lift_op_from_graphs` is ``innergraph_lift_ofg`` (0.041, right after
``innergraph_lift``): lifting happens in the same fixpoint as the Scans, so the
plain OpFromGraphs in Scan bodies are lifted and the Scans in lifted bodies too.
Applications of equal OpFromGraphs (PyTensor compares their inner graphs) get
one function variable; alpha-equivalent ones built apart become one by merging.
See ``design/opfromgraph.md``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from contextvars import ContextVar
from typing import Any

from pytensor.compile.builders import OpFromGraph
from pytensor.graph.basic import Apply, Variable
from pytensor.graph.fg import FunctionGraph
from pytensor.graph.rewriting.basic import MergeOptimizer

from innergraph.core.compat import inner_graph_outputs
from innergraph.lifting.rules import PIPELINE_LIFTS, lift, lift_graph
from innergraph.core.fold import unfold_inner_graphs
from innergraph.core.graph import InnerGraph
from innergraph.core.instantiate import is_small_tensor_constant
from innergraph.ops.call import Call
from innergraph.rewriting.lift import mark_lifted, was_lifted
from innergraph.core.types import InnerGraphType, pickles

__all__ = ["gains", "helpful_lifts", "is_plain", "lift_op_from_graphs", "lift_plain_ofg"]

#: `pytensor.function` keywords an OpFromGraph may carry and still be lifted.
_NEUTRAL_KWARGS = frozenset({"on_unused_input"})

#: The ``(op, *inputs)`` of the nodes `lift_plain_ofg` lifts in this round of the pass.
_wanted: ContextVar[set[tuple[Any, ...]] | None] = ContextVar("innergraph_ofg_wanted", default=None)
#: Native OpFromGraph Op -> the function its body became, within one pass.
_functions: ContextVar[dict[OpFromGraph, Variable] | None] = ContextVar("innergraph_ofg_functions", default=None)


def is_plain(op: Any) -> bool:
    """Whether ``op`` is a plain `OpFromGraph` (see the module docstring), which the pipeline lifts."""
    return (
        type(op) is OpFromGraph
        and not op.destroy_map
        and not op.is_inline
        and _NEUTRAL_KWARGS.issuperset(op.kwargs)
        and not _holds_inner_graphs(op)
        and all(pickles(node.op) for node in op.fgraph.apply_nodes)  # else its body could not be cached
    )


def _holds_inner_graphs(op: OpFromGraph) -> bool:
    """Whether the Op's inner graph holds a Scan, an OpFromGraph or another Op with an inner graph.

    Such an Op stays native for now: dead-slot removal on the call lifted from an
    OpFromGraph around a Scan, with a repeated argument, broke a body's closure
    once its gradient was taken (found by the thorough differential run; kept as
    ``tests/test_lift_ofg.py::test_an_op_from_graph_holding_a_scan_stays_native``). That
    program lifts correctly since (design/opfromgraph.md); the guard stays until a
    thorough run judges such lifts.
    """
    from pytensor.graph.op import HasInnerGraph

    return any(isinstance(node.op, HasInnerGraph) for node in op.fgraph.apply_nodes)


def _unused_inputs(op: OpFromGraph) -> bool:
    clients = op.fgraph.clients
    return any(not clients.get(inp) for inp in op.inner_inputs)


def gains(fgraph: FunctionGraph, node: Apply, plain: set[Apply], repeated: Counter[Any]) -> bool:
    """Whether lifting ``node`` (a plain OpFromGraph of ``fgraph``) lets the pipeline improve it.

    ``plain`` holds the plain OpFromGraph nodes of ``fgraph``; ``repeated`` counts the
    applications of each inner graph (``op.fgraph``, frozen and compared by structure).
    """
    op: OpFromGraph = node.op
    return (
        repeated[op.fgraph] > 1
        or any(_dead(fgraph, out, plain) for out in node.outputs)
        or _unused_inputs(op)
        or any(is_small_tensor_constant(arg) for arg in node.inputs)
        or len(set(node.inputs)) < len(node.inputs)
        or any(out in op.inner_inputs for out in op.inner_outputs)
    )


def _dead(fgraph: FunctionGraph, var: Variable, plain: set[Apply]) -> bool:
    """Whether only unused inputs of plain OpFromGraphs read ``var`` (a pullback's ``outputs``, say)."""
    return all(
        client in plain and all(not client.op.fgraph.clients.get(inner) for inner in _inner_inputs_of(client, var))
        for client, _ in fgraph.clients.get(var, [])
    )


def _inner_inputs_of(node: Apply, var: Variable) -> list[Variable]:
    return [inner for inner, outer in zip(node.op.inner_inputs, node.inputs, strict=True) if outer is var]


def helpful_lifts(fgraph: FunctionGraph) -> set[tuple[Any, ...]]:
    """``(op, *inputs)`` of the plain OpFromGraph nodes of ``fgraph`` whose lift `gains`."""
    plain = {node for node in fgraph.apply_nodes if is_plain(node.op)}
    repeated = Counter(node.op.fgraph for node in plain)
    return {(node.op, *node.inputs) for node in plain if gains(fgraph, node, plain, repeated)}


def lift_plain_ofg(op: Any, inputs: Sequence[Variable]) -> list[Variable] | None:
    """The compile-time lift rule: a plain OpFromGraph as a `Call` without overrides; None otherwise.

    Within `lift_op_from_graphs`, only the nodes `helpful_lifts` chose are lifted.
    """
    wanted = _wanted.get()
    if not is_plain(op) or (wanted is not None and (op, *inputs) not in wanted):
        return None
    memo = _functions.get()
    function = memo.get(op) if memo is not None else None
    if function is None:
        body = lift_graph(inner_graph_outputs(op))
        function_type = InnerGraphType([v.type for v in op.inner_inputs], [o.type for o in body])
        function = InnerGraph(function_type).make_node(*body).outputs[0]
        if memo is not None:
            memo[op] = function
    return Call().make_node(function, *inputs).outputs


def lift_op_from_graphs(fgraph: FunctionGraph) -> int:
    """Lift the plain OpFromGraphs of ``fgraph`` whose lift `gains` (nested ones included), to a fixpoint.

    When ``innergraph_lift`` ran on the graph, the Scans that lifted bodies contain
    are lifted too, so both passes leave every body as nodes of the graph. A graph
    with nothing to gain is left as it is, after one walk over its nodes.
    """
    wanted = helpful_lifts(fgraph)
    if not wanted:
        return 0
    classes = {OpFromGraph} | (PIPELINE_LIFTS if was_lifted(fgraph) else set())
    mark_lifted(fgraph)
    total = 0
    token = _functions.set({})
    try:
        while wanted and (lifted := _lift_round(fgraph, classes, wanted)):
            total += lifted
            unfold_inner_graphs(fgraph, reason="innergraph_lift_ofg")  # the lifted bodies' nested calls and loops
            wanted = helpful_lifts(fgraph)
    finally:
        _functions.reset(token)
    if total > 1:
        MergeOptimizer().rewrite(fgraph)
    return total


def _lift_round(fgraph: FunctionGraph, classes: set[type], wanted: set[tuple[Any, ...]]) -> int:
    token = _wanted.set(wanted)
    try:
        return lift(fgraph, classes, {OpFromGraph: lift_plain_ofg})
    finally:
        _wanted.reset(token)
