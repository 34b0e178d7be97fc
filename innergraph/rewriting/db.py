"""The one place that registers innergraph's rewrites in PyTensor's ``optdb``.

=====================  ========  ==================================================
name                   position  tags
=====================  ========  ==================================================
``innergraph_lift``    0.06      fast_run, innergraph
``innergraph_branch``  1.55      fast_run, innergraph
``innergraph_prune``   1.56      fast_run, innergraph
``innergraph_lower``   1.59      fast_run, innergraph
``innergraph_fold``    48.5      fast_run, fast_compile, minimum_compile
``innergraph_fusion``  49.1      fast_run, fusion
``innergraph_share``   99        fast_run, innergraph
=====================  ========  ==================================================

``innergraph_lift`` converts PyTensor's own Scans (nested ones and those gradients
created included) into the in-graph form right after PyTensor's first Scan pass
(``scan_eqopt1``, 0.05: push-out), so merge, ``useless``, canonicalize and
stabilize rewrite bodies together with the outer graph and merge alpha-equivalent
bodies. ``innergraph_lower`` converts them back just before PyTensor's second Scan
pass (``scan_eqopt2``, 1.6: save-memory, merging, in-place), which — like
PyTensor's own tests — expects native Scans. A merged body becomes one native Op,
compiled once. ``mode.excluding("innergraph")`` gives vanilla behaviour back.

``innergraph_branch`` (`innergraph.rewriting.share_branch`) passes work a lazy
branch shares with the outer graph into the branch as an argument, after
canonicalize and stabilize made both sides canonical.

``innergraph_prune`` (`innergraph.rewriting.prune`) removes dead outputs and
unused params of calls whose owner allows it.

``innergraph_share`` (`innergraph.rewriting.share`) runs after every pass that
rebuilds native Scan Ops and makes nodes with equal Ops share one instance again,
so a merged body compiles once.

``innergraph_fold`` folds the function variables that visible consumers read
into constants. It runs after the rewrites that should reach bodies together with
the outer graph (merge, canonicalize, stabilize, specialize, ``add_mul_fusion`` at
48) and before two kinds that must not:

* ``elemwise_fusion`` (49) builds one multi-output ``Composite`` from *sibling*
  nodes. After merging, two bodies share nodes, so fusion would build a node that
  reads params of both bodies and break closure (``innergraph_fusion`` fuses each
  body on its own instead);
* the in-place rewrites after ``add_destroy_handler`` (49.5): no in-place rewrite
  of the outer pipeline ever sees a hidden node (design brief, invariant 4).

``innergraph_fusion`` then fuses each folded body on its own copy
(`innergraph.rewriting.fusion`); it carries PyTensor's fusion tags so it runs exactly
when fusion does.

``innergraph_fold`` is tagged
``minimum_compile`` because graphs with in-graph consumers cannot link without
it; it does *not* carry the ``innergraph`` tag, which selects the optional lift
rewrites: ``mode.excluding("innergraph")`` must still compile graphs that users
built with in-graph consumers.
"""

from __future__ import annotations

from collections.abc import Callable

from pytensor.compile.mode import optdb
from pytensor.graph.fg import FunctionGraph
from pytensor.graph.rewriting.basic import GraphRewriter

from innergraph.fold import fold_inner_graphs
from innergraph.rewriting.fusion import fuse_bodies
from innergraph.rewriting.lift import lift_native, lower_consumers
from innergraph.rewriting.prune import prune_calls
from innergraph.rewriting.share import share_native_ops
from innergraph.rewriting.share_branch import share_branch_work

__all__ = ["FunctionRewriter", "register_all", "registered", "unregister_all"]


class FunctionRewriter(GraphRewriter):
    """A graph rewriter that calls ``fn(fgraph)``; every innergraph pass is a plain function."""

    def __init__(self, fn: Callable[[FunctionGraph], int]):
        self.fn = fn

    def apply(self, fgraph: FunctionGraph) -> int:
        return self.fn(fgraph)

    def add_requirements(self, fgraph: FunctionGraph) -> None:
        pass


_REWRITES: list[tuple[str, FunctionRewriter, float, tuple[str, ...]]] = [
    ("innergraph_lift", FunctionRewriter(lift_native), 0.06, ("fast_run", "innergraph")),
    ("innergraph_branch", FunctionRewriter(share_branch_work), 1.55, ("fast_run", "innergraph")),
    ("innergraph_prune", FunctionRewriter(prune_calls), 1.56, ("fast_run", "innergraph")),
    ("innergraph_lower", FunctionRewriter(lower_consumers), 1.59, ("fast_run", "innergraph")),
    ("innergraph_fold", FunctionRewriter(fold_inner_graphs), 48.5, ("fast_run", "fast_compile", "minimum_compile")),
    ("innergraph_fusion", FunctionRewriter(fuse_bodies), 49.1, ("fast_run", "fusion")),
    ("innergraph_share", FunctionRewriter(share_native_ops), 99, ("fast_run", "innergraph")),
]

_added_keys: set[str] = set()


def registered() -> list[str]:
    """Names of innergraph's rewrites currently in ``optdb``."""
    return [name for name, *_ in _REWRITES if name in optdb._names]


def register_all() -> None:
    before = set(optdb.__db__)
    for name, rewriter, position, tags in _REWRITES:
        if name not in optdb._names:
            optdb.register(name, rewriter, *tags, position=position)
    _added_keys.update(set(optdb.__db__) - before)


def unregister_all() -> None:
    """Remove innergraph's rewrites (and the tags only they used) from ``optdb``."""
    for name, rewriter, _, _ in _REWRITES:
        if name not in optdb._names:
            continue
        for members in optdb.__db__.values():
            members.discard(rewriter)
        optdb._names.discard(name)
        optdb.__position__.pop(name, None)
    for key in _added_keys:
        if not optdb.__db__.get(key):
            optdb.__db__.pop(key, None)
    _added_keys.clear()
