"""The one place that registers innergraph's rewrites in PyTensor's ``optdb``.

====================================  ========  ==================================================
name                                  position  tags
====================================  ========  ==================================================
``innergraph_scan_split_solve``       0.039     fast_run, innergraph, scan, scan_pushout, scan_split_non_sequence_decomposition_and_solve
``innergraph_scan_split_solve_jax``   0.0391    jax, innergraph, scan, scan_split_non_sequence_decomposition_and_solve_jax
``innergraph_lift``                   0.04      fast_run, innergraph
``innergraph_lift_ofg``               0.041     fast_run, innergraph, innergraph_ofg
``innergraph_inline_args``            0.042     fast_run, innergraph, scan_inline_invariant_constants, scan_merge_duplicate_inputs
``innergraph_outline_loops``          0.043     fast_run, innergraph
``innergraph_branch``                 1.55      fast_run, innergraph
``innergraph_simplify``               1.56      fast_run, innergraph
``innergraph_until_to_while``         1.565     fast_run, innergraph, scan_until_to_while
``innergraph_lower``                  1.59      fast_run, innergraph
``innergraph_set_rows``               2.01      fast_run, innergraph
``innergraph_ofg_dead_outputs``       48.3      fast_run, innergraph, innergraph_ofg
``innergraph_fold``                   48.5      fast_run, fast_compile, minimum_compile
``innergraph_link_arguments``         48.95     fast_run, innergraph
``innergraph_fusion``                 49.1      fast_run, fusion
``innergraph_inline_outlined_loops``  49.15     fast_run, innergraph
``innergraph_fresh_carries``          49.3      fast_run, innergraph
====================================  ========  ==================================================

and three node rewriters of `innergraph.rewriting.outer` in ``canonicalize``
(``innergraph_sum_of_one_row``, ``innergraph_fill_read_by_consumers``) and ``specialize``
(``innergraph_merge_slices_of_known_length``), tagged fast_run, innergraph. The
third, `innergraph.rewriting.outer.local_set_row_of_expand_dims`, is
``innergraph_set_rows``: one walk over the graph right after ``specialize`` (in
it, the one change it makes to a small graph cost ``specialize`` a second round
over every node, 3 % of a trivial loop's compilation).

``innergraph_nested_zero_increments`` and ``innergraph_one_hot_increment``
(`innergraph.rewriting.zero_increments`, specialize, fast_run, innergraph) make an
increment of zeros that feeds another increment one increment of the outer buffer
(the nested cotangent buffers of #1669's backward loops). In specialize, after the
consumer rewrites, whose length proofs (`innergraph.rewriting.lengths`) walk exactly
those nested increments.

PyTensor's constant folding pass, ``topo_constant_folding`` (the final pass of
canonicalize, uncanonicalize, stabilize and specialize), is replaced under the same
name and tags by one that folds an ``OpFromGraph`` of constants in Python before
trying PyTensor's folding (`innergraph.rewriting.fold_inner_functions`): PyTensor's
would link its inner graph with C thunks, a C compilation per inner node kind on an
empty cache.

``innergraph_read_of_written_region`` (`innergraph.rewriting.read_back`, canonicalize,
fast_run, innergraph) reads back what a set/inc-subtensor wrote; it lets the
checkpointed gradients of `innergraph.ops.checkpoint` drop buffer-sized zeros.

``innergraph_lift`` converts PyTensor's own Scans (nested ones and those gradients
created included) into the in-graph form right before PyTensor's first Scan pass
(``scan_eqopt1``, 0.05: push-out, which then finds no native Scan; its work is done
on the in-graph form by ``innergraph_simplify``), so merge, ``useless``,
canonicalize and stabilize rewrite bodies together with the outer graph and merge
alpha-equivalent bodies. ``innergraph_lower`` converts them back just before
PyTensor's second Scan pass (``scan_eqopt2``, 1.6: save-memory, merging,
in-place), which — like PyTensor's own tests — expects native Scans. A merged
body becomes one native Op, compiled once. ``mode.excluding("innergraph")`` gives vanilla behaviour back.

``innergraph_scan_split_solve`` (and its ``jax`` twin, `innergraph.rewriting.scan_solve`)
runs PyTensor's ``scan_split_non_sequence_decomposition_and_solve`` on the native Scans
just before the lift, since its own pass in ``scan_eqopt1`` comes too late to see them:
a Solve of a loop-invariant matrix factorizes once, outside the loop.

``innergraph_lift_ofg`` (`innergraph.rewriting.lift_ofg`) lifts PyTensor's plain
``OpFromGraph`` nodes into calls right after, when that gains something (a dead
output, an unused input, a constant or repeated argument, a repeated inner graph);
``mode.excluding("innergraph_lift_ofg")`` keeps them native. See
``design/opfromgraph.md``.

``innergraph_ofg_dead_outputs`` (`innergraph.rewriting.ofg_outputs`) rebuilds a native
``OpFromGraph`` (one the lift left native) without its dead outputs.
``mode.excluding("innergraph_ofg")`` turns off both, leaving every ``OpFromGraph`` as
vanilla PyTensor leaves it.

``innergraph_inline_args`` (`innergraph.rewriting.inline_args`) inlines the
constant arguments of the freshly lifted consumers (and merges duplicate ones),
as PyTensor's first Scan pass does, so canonicalize and stabilize see the
constants' values inside bodies.

``innergraph_branch`` (`innergraph.rewriting.share_branch`) passes work a lazy
branch shares with the outer graph into the branch as an argument, after
canonicalize and stabilize made both sides canonical.

``innergraph_simplify`` (`ConsumerRewritesDB`, `innergraph.rewriting.simplify`) runs
the consumer rewrites — forwarding, duplicate and constant arguments, loop-invariant
code motion, push-outs, untracing, dead slots, loop merging — to a fixpoint after
canonicalize and stabilize, just before lowering. Each is registered in it with the
tags of the PyTensor Scan rewrites it stands in for, so a mode excluding
``scan_pushout`` (say) excludes innergraph's counterparts too. See
``design/rewrites.md``.

``innergraph_until_to_while`` (`innergraph.rewriting.until_while`) turns a Scan
with ``until`` read only at its final states into a `innergraph.ops.loop.WhileLoop`
where the linker runs one natively: Numba and JAX (``design/loops.md``). On by default
(``fast_run``) since the until-scan cases measured at most 1.01x the Scan's steady call
under Numba; ``mode.excluding("scan_until_to_while")`` keeps the Scan.

PyTensor's own ``IfElse`` is left to PyTensor: since 3.3.6 it extracts the branch work
of a conditional into a lazy ``LazyIfElse`` under Numba and JAX itself
(``introduce_lazy_ifelse``, 48.9), which innergraph's ``innergraph_lift_ifelse`` did on
PyTensor 3.0 (``design/upstream-3.3.md``).

PyTensor's ``scan_inner_graph`` (100) rewrites each native Scan's inner graph for
the backend once per group of equal Ops (their frozen inner graphs compared), so K
lowered loops over one body are one Op again after the passes that rebuild them:
innergraph needs no pass of its own for that (its ``innergraph_share`` did it on
PyTensor 3.0).

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

``innergraph_fresh_carries`` (`innergraph.rewriting.fresh_carry`) gives an untraced
sit-sot that starts from a constant, and whose result an in-place Op may overwrite
(a triangular solve's right-hand side), a fresh initial buffer: the Scan declares
the result a view of that value, and a view of a constant is never overwritten.

PyTensor's own ``scan_make_inplace`` (50.5) is, while innergraph is installed,
`innergraph.rewriting.scan_inplace.SharedScanInplace` under the same name, tags and
position: PyTensor's pass on graphs innergraph did not lift; on lifted ones it makes
the native Scans that share an Op in place with one validation, and tries no
candidate that starts from a protected input. ``register_all`` swaps it in and
``unregister_all`` puts PyTensor's object back.

PyTensor's own ``scan_merge`` (in ``scan_eqopt2``, 1.6) is, while innergraph is installed,
`innergraph.rewriting.scan_merge.ScopedScanMerge`, swapped in and out the same way: it
merges only Scans that sit in the same scopes. Between the lowering and the fold the
loops of call bodies are native Scans among the outer graph's nodes, and PyTensor's
pass merged the loops of two bodies that share a step count.

``innergraph_fold`` is tagged
``minimum_compile`` because graphs with in-graph consumers cannot link without
it; it does *not* carry the ``innergraph`` tag, which selects the optional lift
rewrites: ``mode.excluding("innergraph")`` must still compile graphs that users
built with in-graph consumers.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from pytensor.compile.mode import optdb
from pytensor.graph.fg import FunctionGraph
from pytensor.graph.rewriting.basic import GraphRewriter, dfs_rewriter
from pytensor.graph.rewriting.db import RewriteDatabase

from innergraph.rewriting.copies import add_to_copies, remove_from_copies
from innergraph.rewriting.fold_inner_functions import replace_folding_passes, restore_folding_passes
from innergraph.rewriting.fresh_carry import fresh_carries
from innergraph.rewriting.fusion import fuse_bodies
from innergraph.rewriting.inline_args import inline_lifted_arguments
from innergraph.rewriting.lift import fold_bodies, lift_native, lower_consumers
from innergraph.rewriting.lift_ofg import lift_op_from_graphs
from innergraph.rewriting.link_arguments import link_float_constants
from innergraph.rewriting.ofg_outputs import remove_dead_ofg_outputs
from innergraph.rewriting.read_back import local_read_of_written_region
from innergraph.rewriting.scan_inplace import replace_pytensor_pass, restore_pytensor_pass
from innergraph.rewriting import scan_merge
from innergraph.rewriting.scan_solve import split_scan_solves, split_scan_solves_jax
from innergraph.rewriting.outline_loops import inline_outlined_loops, outline_loops
from innergraph.rewriting.outer import (
    local_fill_read_by_consumers,
    local_merge_slices_of_known_length,
    local_set_row_of_expand_dims,
    local_sum_of_one_row,
)
from innergraph.rewriting.share_branch import share_branch_work
from innergraph.rewriting.simplify import CONSUMER_REWRITES, simplify_consumers
from innergraph.rewriting.until_while import until_scans_to_while_loops
from innergraph.rewriting.zero_increments import local_nested_zero_increments, local_one_hot_increment

__all__ = ["ConsumerRewritesDB", "FunctionRewriter", "register_all", "registered", "unregister", "unregister_all"]


class FunctionRewriter(GraphRewriter):
    """A graph rewriter that calls ``fn(fgraph)``; every innergraph pass is a plain function."""

    def __init__(self, fn: Callable[[FunctionGraph], int]):
        self.fn = fn

    def apply(self, fgraph: FunctionGraph) -> int:
        return self.fn(fgraph)

    def add_requirements(self, fgraph: FunctionGraph) -> None:
        pass


class ConsumerRewritesDB(RewriteDatabase):
    """``innergraph_simplify``: the consumer rewrites a mode selects, run together to a fixpoint.

    Each rewrite of `innergraph.rewriting.simplify.CONSUMER_REWRITES` is registered
    under its name, ``fast_run``, ``innergraph`` and the tags of the PyTensor Scan
    rewrites it stands in for; a query (a mode's ``including``/``excluding``)
    returns one graph rewriter that runs the selected ones by
    `innergraph.rewriting.simplify.simplify_consumers`.
    """

    def __init__(self) -> None:
        super().__init__()
        self._members = [FunctionRewriter(rewrite) for rewrite, _ in CONSUMER_REWRITES]
        for member, (rewrite, tags) in zip(self._members, CONSUMER_REWRITES, strict=True):
            self.register(rewrite.__name__, member, "fast_run", "innergraph", *tags)

    def query(self, *tags: Any, **kwtags: Any) -> FunctionRewriter:
        selected = super().query(*tags, **kwtags)
        chosen = [member.fn for member in self._members if member in selected]
        return FunctionRewriter(partial(simplify_consumers, rewrites=chosen))


_REWRITES: list[tuple[str, Any, float, tuple[str, ...]]] = [
    (
        "innergraph_scan_split_solve",
        FunctionRewriter(split_scan_solves),
        0.039,
        ("fast_run", "innergraph", "scan", "scan_pushout", "scan_split_non_sequence_decomposition_and_solve"),
    ),
    (
        "innergraph_scan_split_solve_jax",
        FunctionRewriter(split_scan_solves_jax),
        0.0391,
        ("jax", "innergraph", "scan", "scan_split_non_sequence_decomposition_and_solve_jax"),
    ),
    ("innergraph_lift", FunctionRewriter(lift_native), 0.04, ("fast_run", "innergraph")),
    ("innergraph_lift_ofg", FunctionRewriter(lift_op_from_graphs), 0.041, ("fast_run", "innergraph", "innergraph_ofg")),
    (
        "innergraph_inline_args",
        FunctionRewriter(inline_lifted_arguments),
        0.042,
        ("fast_run", "innergraph", "scan_inline_invariant_constants", "scan_merge_duplicate_inputs"),
    ),
    ("innergraph_outline_loops", FunctionRewriter(outline_loops), 0.043, ("fast_run", "innergraph")),
    ("innergraph_branch", FunctionRewriter(share_branch_work), 1.55, ("fast_run", "innergraph")),
    ("innergraph_simplify", ConsumerRewritesDB(), 1.56, ("fast_run", "innergraph")),
    ("innergraph_until_to_while", FunctionRewriter(until_scans_to_while_loops), 1.565, ("fast_run", "innergraph", "scan_until_to_while")),
    ("innergraph_lower", FunctionRewriter(lower_consumers), 1.59, ("fast_run", "innergraph")),
    ("innergraph_set_rows", dfs_rewriter(local_set_row_of_expand_dims, ignore_newtrees=True), 2.01, ("fast_run", "innergraph")),
    ("innergraph_ofg_dead_outputs", FunctionRewriter(remove_dead_ofg_outputs), 48.3, ("fast_run", "innergraph", "innergraph_ofg")),
    ("innergraph_fold", FunctionRewriter(fold_bodies), 48.5, ("fast_run", "fast_compile", "minimum_compile")),
    ("innergraph_link_arguments", FunctionRewriter(link_float_constants), 48.95, ("fast_run", "innergraph")),
    ("innergraph_fusion", FunctionRewriter(fuse_bodies), 49.1, ("fast_run", "fusion")),
    ("innergraph_inline_outlined_loops", FunctionRewriter(inline_outlined_loops), 49.15, ("fast_run", "innergraph")),
    ("innergraph_fresh_carries", FunctionRewriter(fresh_carries), 49.3, ("fast_run", "innergraph")),
]

#: Local rewrites registered in a sub-database of ``optdb``: (name, rewriter, database, tags).
_LOCAL_REWRITES: list[tuple[str, Any, str, tuple[str, ...]]] = [
    ("innergraph_sum_of_one_row", local_sum_of_one_row, "canonicalize", ("fast_run", "innergraph")),
    ("innergraph_read_of_written_region", local_read_of_written_region, "canonicalize", ("fast_run", "innergraph")),
    ("innergraph_fill_read_by_consumers", local_fill_read_by_consumers, "canonicalize", ("fast_run", "innergraph")),
    ("innergraph_merge_slices_of_known_length", local_merge_slices_of_known_length, "specialize", ("fast_run", "innergraph")),
    ("innergraph_nested_zero_increments", local_nested_zero_increments, "specialize", ("fast_run", "innergraph")),
    ("innergraph_one_hot_increment", local_one_hot_increment, "specialize", ("fast_run", "innergraph")),
]

_added_keys: dict[int, set[str]] = {}


def _entries() -> list[tuple[Any, str, Any, dict[str, Any], tuple[str, ...]]]:
    """Every registration as (database, name, rewriter, register kwargs, tags)."""
    entries = [(optdb, name, rw, {"position": pos}, tags) for name, rw, pos, tags in _REWRITES]
    entries += [(optdb[db], name, rw, {}, tags) for name, rw, db, tags in _LOCAL_REWRITES]
    return entries


def registered() -> list[str]:
    """Names of innergraph's rewrites currently registered (in ``optdb`` or a sub-database)."""
    return [name for db, name, *_ in _entries() if name in db._names]


def register_all() -> None:
    for db, name, rewriter, kwargs, tags in _entries():
        if name not in db._names:
            if name in db.__db__ and not db.__db__[name]:
                # An empty tag left by a query that excluded this name before install (a mode
                # unpickled from a lowered Scan, ``excluding("innergraph_lift")``): PyTensor
                # would refuse the name as "already present".
                del db.__db__[name]
            # tags a query left empty count as absent (a query of a tag creates its empty set)
            before = {tag for tag, members in db.__db__.items() if members}
            db.register(name, rewriter, *tags, **kwargs)
            _added_keys.setdefault(id(db), set()).update(set(db.__db__) - before)
    add_to_copies(_copied_rewriters())  # PyMC's copies of canonicalize (`innergraph.rewriting.copies`)
    replace_pytensor_pass()  # scan_make_inplace deciding once per shared Op (`innergraph.rewriting.scan_inplace`)
    scan_merge.replace_pytensor_pass()  # scan_merge within one scope (`innergraph.rewriting.scan_merge`)
    replace_folding_passes()  # an OpFromGraph of constants folded in Python (`innergraph.rewriting.fold_inner_functions`)


def _copied_rewriters() -> list[Any]:
    """The node rewriters that copies of ``canonicalize`` hold: those registered in it."""
    return [rewriter for _, rewriter, db, _ in _LOCAL_REWRITES if db == "canonicalize"]


def unregister(db: RewriteDatabase, name: str, rewriter: Any) -> None:
    """Remove ``rewriter``, registered as ``name``, from ``db``: under its name and every tag.

    PyTensor's rewrite databases have no removal; the keys of tags left empty stay.
    """
    for members in db.__db__.values():
        members.discard(rewriter)
    db._names.discard(name)
    getattr(db, "__position__", {}).pop(name, None)
    db.__db__.pop(name, None)


def unregister_all() -> None:
    """Remove innergraph's rewrites (and the tags only they used) from ``optdb``, its sub-databases and known copies."""
    remove_from_copies(_copied_rewriters())
    restore_pytensor_pass()
    scan_merge.restore_pytensor_pass()
    restore_folding_passes()
    dbs = {}
    for db, name, rewriter, _, _ in _entries():
        if name not in db._names:
            continue
        unregister(db, name, rewriter)
        dbs[id(db)] = db
    for key, db in dbs.items():
        for tag in _added_keys.pop(key, set()):
            if not db.__db__.get(tag):
                db.__db__.pop(tag, None)
