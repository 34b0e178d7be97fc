"""PyTensor's ``scan_merge``, merging only native Scans that sit in the same scopes.

Terms
-----
scope
    The outer graph, or the body of one inner-graph node not folded yet: the nodes a
    walk from its outputs reaches without entering a nested body
    (`innergraph.core.graph.scope_toposort`). A node shared by two bodies after merging
    (it computes from their params alike) is in both.
home
    The set of scopes a Scan node is in.

PyTensor's ``ScanMerge`` (``scan_merge``, in ``scan_eqopt2`` at 1.6) groups every Scan
of the graph that runs the same number of steps and replaces each group by one Scan.
In vanilla PyTensor every Scan it sees is in the outer graph: an ``OpFromGraph``'s
loops live in its own inner graph. With innergraph, ``scan_eqopt2`` runs after
``innergraph_lower`` and before ``innergraph_fold`` (48.5), so the loops of call bodies
(``innergraph.call``, lifted ``OpFromGraph`` nodes, outlined loop groups) are native Scans among the outer
graph's nodes, and two bodies whose loops run over their first param of one type have
the very same step count (``Shape_i{0}`` of one ``NominalVariable``, merged); loops of a
constant length are as long wherever they are. Merged across scopes, one Scan reads the
params of both: a body's param in the outer graph, or a param of one body's type in the
other's body, breaks a closure (the fold refuses it), and with equal param types each body
would run the other's loop on its own arguments.

`ScopedScanMerge` takes PyTensor's place while innergraph is installed and adds one
condition to ``belongs_to_set``: Scans are merged only when their homes are equal, so
every scope that runs the merged Scan ran each of its parts before. Graphs without
an unfolded body (every graph compiled without innergraph's lift, and every graph
after the fold) have one scope, and the pass is PyTensor's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pytensor.graph.basic import Apply
from pytensor.graph.fg import FunctionGraph
from pytensor.scan.op import Scan as NativeScan
from pytensor.scan.rewriting.merge import ScanMerge

from innergraph.core.fold import has_inner_graphs
from innergraph.core.graph import InnerGraph, scope_toposort
from innergraph.rewriting.stand_in import StandIn

__all__ = ["ScopedScanMerge", "homes", "replace_pytensor_pass", "restore_pytensor_pass"]


def homes(fgraph: FunctionGraph) -> dict[Apply, frozenset[Apply | None]]:
    """The home of every native Scan of ``fgraph``: the scopes it is in, each named by its inner-graph node (None: the outer graph)."""
    found: dict[Apply, set[Apply | None]] = {}
    scopes: list[tuple[Apply | None, Sequence[Any]]] = [(None, fgraph.outputs)]
    scopes += [(node, node.inputs) for node in fgraph.apply_nodes if isinstance(node.op, InnerGraph)]
    for owner, outputs in scopes:
        for node in scope_toposort(outputs):
            if isinstance(node.op, NativeScan):
                found.setdefault(node, set()).add(owner)
    return {node: frozenset(where) for node, where in found.items()}


class ScopedScanMerge(ScanMerge):
    """``scan_merge`` that merges only Scans with equal homes (module docstring).

    The homes are found once per run of the pass, at its first question: a graph with
    fewer than two Scans costs nothing more than PyTensor's pass.
    """

    def __init__(self) -> None:
        super().__init__()
        self._fgraph: FunctionGraph | None = None
        self._homes: dict[Apply, frozenset[Apply | None]] | None = None

    def apply(self, fgraph: FunctionGraph) -> None:
        outer = self._fgraph, self._homes
        self._fgraph, self._homes = fgraph, None
        try:
            super().apply(fgraph)
        finally:
            self._fgraph, self._homes = outer

    def belongs_to_set(self, node: Apply, set_nodes: Sequence[Apply]) -> bool:
        if self._fgraph is not None:
            if self._homes is None:
                self._homes = _homes_if_scoped(self._fgraph)
            if self._homes.get(node) != self._homes.get(set_nodes[0]):
                return False
        return bool(super().belongs_to_set(node, set_nodes))


def _homes_if_scoped(fgraph: FunctionGraph) -> dict[Apply, frozenset[Apply | None]]:
    """`homes`, or none for a graph without an unfolded body: one scope, every Scan at home in it."""
    if not has_inner_graphs(fgraph):
        return {}
    return homes(fgraph)


#: PyTensor's name of the pass replaced, and of the database that holds it.
PASS_NAME = "scan_merge"
DATABASE = "scan_eqopt2"

#: PyTensor's ``scan_merge`` in ``scan_eqopt2``, and its stand-in.
STAND_IN = StandIn(PASS_NAME, ScanMerge, ScopedScanMerge, DATABASE)


def replace_pytensor_pass() -> None:
    """Put a `ScopedScanMerge` in ``scan_eqopt2`` in place of PyTensor's ``scan_merge`` (same name and tags)."""
    STAND_IN.replace()


def restore_pytensor_pass() -> None:
    """Undo `replace_pytensor_pass`: PyTensor's own rewriter object back in every tag."""
    STAND_IN.restore()
