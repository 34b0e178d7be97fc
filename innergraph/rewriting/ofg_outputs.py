"""Dead outputs of the `OpFromGraph` nodes the pipeline keeps native: the Op is rebuilt without them.

Terms
-----
native OpFromGraph
    An `OpFromGraph` node the pipeline leaves as PyTensor's Op: one holding another
    inner-graph Op (a Scan, an OpFromGraph), one compiled with a ``mode``, one whose
    lift would gain nothing (`innergraph.rewriting.lift_ofg`). Its outputs are computed
    by its own compiled inner function, all of them, whoever reads them.
dead output
    An output of a node nothing reads (no client in the graph, not a graph output).

`remove_dead_ofg_outputs` (``innergraph_ofg_dead_outputs``, 48.3, after canonicalize,
stabilize and specialize have decided what is read, before the fold and the in-place
passes) replaces a native OpFromGraph node with a dead output by a node of a new
`OpFromGraph` over the same inner graph returning only the live outputs, and taking
only the inputs those read. The inner graph is the Op's own (its nominal inputs and
outputs; PyTensor clones it into the new Op), so nothing the user built changes.

What is carried over: ``inline``, ``name``, the `pytensor.function` keywords
(``mode``...), and the explicit connection pattern restricted to the kept inputs and
outputs. Gradient overrides (``pullback``/``pushforward``, formerly
``lop_overrides``/``rop_overrides``) are *not*: they take every output and its
cotangent, which the new Op no longer has. That is safe here because the rewrite runs
inside compilation, after every gradient was built (as the compile-time lift,
`innergraph.rewriting.lift_ofg`, drops them); the compiled graph is not differentiated.

Left alone:

- subclasses of `OpFromGraph` (PyTensor's ``Einsum``, ``Pad``, ``OpWithCoreShape``,
  ``IndexedElemwise``, the linear-control solvers, ``SymbolicOp``; PyMC's): their
  constructors take other arguments than an inner graph, and rewrites and backend
  dispatches match them by class and may read every output, so rebuilding them as a
  plain `OpFromGraph` would change what they are;
- in-place Ops (a ``destroy_map``: its output indices would need renumbering, and
  in-place Ops appear only after this pass);
- nodes whose every output is dead: a `FunctionGraph` holds none (it imports what its outputs
  reach, and drops a node once its last output loses its last client).
"""

from __future__ import annotations

from pytensor.compile.builders import OpFromGraph
from pytensor.graph.basic import Apply
from pytensor.graph.fg import FunctionGraph
from pytensor.graph.traversal import graph_inputs

__all__ = ["dead_outputs", "remove_dead_ofg_outputs", "without_dead_outputs"]


def dead_outputs(fgraph: FunctionGraph, node: Apply) -> list[int]:
    """The indices of ``node``'s outputs that nothing in ``fgraph`` reads."""
    return [i for i, out in enumerate(node.outputs) if not fgraph.clients.get(out)]


def _rebuildable(op: object) -> bool:
    return type(op) is OpFromGraph and not op.destroy_map


def without_dead_outputs(node: Apply, live: list[int]) -> tuple[Apply, list[int]]:
    """A node of a new `OpFromGraph` computing only outputs ``live`` of native ``node``, and the inputs it takes.

    Returns the new node and the indices (in ``node.inputs``) of the inputs it reads.
    """
    op: OpFromGraph = node.op
    inner = op.fgraph.unfreeze()  # PyTensor keeps the inner graph frozen: a private mutable copy
    inner_inputs = list(inner.inputs)
    outputs = [inner.outputs[i] for i in live]
    read = set(graph_inputs(outputs))
    kept = [j for j, inner in enumerate(inner_inputs) if inner in read]
    pattern = op._connection_pattern
    connection = [[bool(pattern[j][i]) for i in live] for j in kept] if pattern is not None else None
    new_op = OpFromGraph(
        [inner_inputs[j] for j in kept],
        outputs,
        inline=op.is_inline,
        name=op.name,
        connection_pattern=connection,
        **op.kwargs,
    )
    return new_op.make_node(*[node.inputs[j] for j in kept]), kept


def remove_dead_ofg_outputs(fgraph: FunctionGraph) -> int:
    """Rebuild each native `OpFromGraph` node of ``fgraph`` with a dead output without it; return how many changed."""
    changed = 0
    if not any(_rebuildable(node.op) for node in fgraph.apply_nodes):
        return 0  # a look at the node set, not a sort of it
    for node in list(fgraph.toposort()):
        if not _rebuildable(node.op) or node not in fgraph.apply_nodes:
            continue
        dead = dead_outputs(fgraph, node)
        if not dead:
            continue
        live = [i for i in range(len(node.outputs)) if i not in dead]
        new, _ = without_dead_outputs(node, live)
        fgraph.replace_all(
            [(node.outputs[i], out) for i, out in zip(live, new.outputs, strict=True)], reason="innergraph_ofg_dead_outputs"
        )
        changed += 1
    return changed
