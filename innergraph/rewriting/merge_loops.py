"""Merge independent loops that run the same steps into one loop.

Two loops of the outer function merge when their consumer's form gives them
equal keys (`innergraph.protocol.slots.Form.loop_key`: for a Scan, the same ``n_steps``
variable, equal flags and no ``until`` condition) and neither reads the other's
results. (Loops inside bodies are not merged: equal constants are one object in
every scope, so equal ``n_steps`` does not mean the same scope.) Equality is identity
of the outer variables — after MergeOptimizer, equal computations are one
variable — never a structural comparison of graphs (PyTensor's ``ScanMerge``
needs ``equal_computations`` because it cannot see bodies). The merged body is
both bodies side by side; sequences and non-sequences they share then become one
param (`innergraph.rewriting.args`) and MergeOptimizer shares their work.

Equal loops are one loop before different loops are merged: when two loops could
merge and have equal Ops (only those can be one node), ordinary merging runs first (`merge_equal_consumers`), so loops whose
bodies became equal in this round's rewrites (or in canonicalize) are one node
and not two halves of a merged body that computes the same state twice.
"""

from __future__ import annotations

from collections.abc import Hashable

from pytensor.graph.basic import Apply, Variable
from pytensor.graph.fg import FunctionGraph
from pytensor.graph.rewriting.basic import MergeFeature, MergeOptimizer
from pytensor.graph.traversal import apply_ancestors

from innergraph.core.fold import visible_nodes
from innergraph.core.graph import params
from innergraph.core.instantiate import instantiate
from innergraph.protocol.signature import Signature, Slot, consumers, replace_consumer

__all__ = ["loop_merge_key", "merge_equal_consumers", "merge_loops", "reads_result_of"]


def merge_equal_consumers(fgraph: FunctionGraph) -> int:
    """Ordinary merging of ``fgraph`` from scratch: equal consumers (and their bodies) become one.

    The graph's own `MergeFeature` is replaced by a fresh one, which sees every
    node and constant anew. PyTensor 3.0.7's feature can forget a constant that is
    still read: ``on_prune`` drops its signature when fewer than two clients are
    left, but ``FunctionGraph.remove_node`` removes the pruned node's arrow before
    calling it, so a constant read by two nodes is forgotten when one goes. An
    equal constant made later (canonicalize rewriting one of two equal loop bodies)
    is then never merged with it, and the two bodies, equal, stay apart.
    Returns the number of nodes merged away.
    """
    stale = getattr(fgraph, "merge_feature", None)
    if stale is not None:
        fgraph.remove_feature(stale)
        del fgraph.merge_feature
    fgraph.attach_feature(MergeFeature())
    before = len(fgraph.apply_nodes)
    MergeOptimizer().apply(fgraph)
    return before - len(fgraph.apply_nodes)


def _fresh_slots(sig: Signature) -> list[Slot]:
    """``sig``'s slots over a private instance of each body (params become fresh variables)."""
    by_param: list[dict[Variable, Variable]] = []
    outputs: list[dict[Variable, Variable]] = []
    for body in sig.bodies:
        fresh = [t() for t in body.param_types]
        by_param.append(dict(zip(params(body.param_types), fresh)))
        outputs.append(dict(zip(body.outputs, instantiate(body, fresh))))
    return [
        s.with_(
            params=tuple((b, by_param[b][p]) for b, p in s.params),
            outputs=tuple((b, outputs[b][v]) for b, v in s.outputs),
        )
        for s in sig.slots
    ]


def reads_result_of(node: Apply, on: Apply) -> bool:
    """Whether ``node`` reads a result of ``on``, directly or through the outer graph."""
    return on in apply_ancestors(node.inputs)


def loop_merge_key(sig: Signature) -> Hashable | None:
    """Loops with equal keys run the same steps the same way: the form's `loop_key`, with the class."""
    loop_key = sig.form.loop_key
    if loop_key is None or not sig.capabilities.loop:
        return None
    key = loop_key(sig)
    return None if key is None else (type(sig.node.op), key)


def _could_be_one(sigs: list[Signature]) -> bool:
    """Whether merging could make two of ``sigs`` one node: two have equal Ops and input types.

    `MergeOptimizer` merges only nodes with equal Ops, so loops of different layouts
    (a forward loop and its gradient) never become one, and the whole-graph merge of
    `merge_equal_consumers` would be spent for nothing.
    """
    return any(
        a.node.op == b.node.op and [v.type for v in a.node.inputs] == [v.type for v in b.node.inputs]
        for i, a in enumerate(sigs)
        for b in sigs[i + 1 :]
    )


def merge_loops(fgraph: FunctionGraph) -> int:
    """Merge independent loops of ``fgraph`` pairwise, to a fixpoint; return how many merged."""
    merged = 0
    fresh = False
    while True:
        groups: dict[Hashable, list[Signature]] = {}
        visible = visible_nodes(fgraph)
        for sig in consumers(fgraph):
            key = loop_merge_key(sig) if sig.node in visible else None  # loops of one scope only: the outer one
            if key is not None:
                groups.setdefault(key, []).append(sig)
        if not fresh and any(_could_be_one(sigs) for sigs in groups.values()):
            fresh = True
            if merge_equal_consumers(fgraph):
                merged += 1
                continue  # equal loops are one now: group again
        pair = next(
            ((a, b) for sigs in groups.values() for i, a in enumerate(sigs) for b in sigs[i + 1 :]
             if not reads_result_of(b.node, a.node) and not reads_result_of(a.node, b.node)),
            None,
        )
        if pair is None:
            return merged
        a, b = pair
        replace_consumer(fgraph, a, [*_fresh_slots(a), *_fresh_slots(b)], reason="merge_loops")
        merged += 1
