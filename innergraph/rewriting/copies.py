"""innergraph's node rewriters in copies of PyTensor's rewrite databases that other libraries keep.

Terms
-----
copy
    A rewriter a library built by querying ``optdb`` and kept: PyMC queries
    ``canonicalize`` when ``pymc.logprob.rewriting`` is imported and registers
    the two results in its ``logprob_rewrites_db`` (``pre-canonicalize`` and
    ``post-canonicalize``), where its logprob derivation runs them. A copy holds
    whatever ``canonicalize`` held at that moment.
tracker list
    Where an ``EquilibriumGraphRewriter`` keeps its node rewriters: the lists of
    its ``OpToRewriterTracker``, one per ``Op`` type, instance or pattern (and one
    of untracked rewriters). The order in a list is the order they are tried.

What innergraph does with copies (issue 21, item 5): they hold innergraph's node
rewriters exactly when innergraph is installed, whichever was imported first.

* `remove_from_copies` (uninstall) takes innergraph's rewriters out of every
  tracker list of every known copy and remembers each list and position;
* `add_to_copies` (install) puts them back where they were, or, in a copy made
  while innergraph was not installed (PyMC imported first), where they are when
  innergraph is imported first: right after the PyTensor rewriter that precedes
  them in a query of ``canonicalize`` made now. Rewriters other libraries added
  to ``canonicalize`` (PyMC's ``local_lift_DiracDelta``) come after innergraph's
  when innergraph was imported first, and before them in a query made later.

So ``import innergraph; import pymc`` and ``import pymc; import innergraph`` give
PyMC the same logprob rewrites, and ``uninstall()`` leaves PyMC's databases as
PyMC alone builds them. The rewriters also still return nothing while innergraph
is uninstalled (`innergraph.rewriting.outer`), for copies this module does not know.

`swap_registered` is the other edit innergraph makes to a rewrite database: one of
PyTensor's passes replaced by innergraph's under the same name and tags, and back
(`innergraph.rewriting.stand_in`, for ``scan_make_inplace`` and ``scan_merge``;
`innergraph.rewriting.fold_inner_functions`).
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Iterator
from typing import Any

from pytensor.compile.mode import optdb
from pytensor.graph.rewriting.basic import EquilibriumGraphRewriter, OpToRewriterTracker, SequentialGraphRewriter

__all__ = ["add_to_copies", "copies", "remove_from_copies", "swap_registered"]

#: The copies PyMC keeps: (module, database attribute, entry names, query PyMC made).
_PYMC = ("pymc.logprob.rewriting", "logprob_rewrites_db", ("pre-canonicalize", "post-canonicalize"))
_PYMC_QUERY = ("+canonicalize", "-local_eager_useless_unbatched_blockwise")

#: Positions of the rewriters `remove_from_copies` took out: (tracker, list, index, rewriter).
_removed: list[tuple[OpToRewriterTracker, list[Any], int, Any]] = []


def _trackers(rewriter: Any) -> Iterator[OpToRewriterTracker]:
    if isinstance(rewriter, EquilibriumGraphRewriter):
        yield rewriter.node_tracker
    elif isinstance(rewriter, SequentialGraphRewriter):
        for member in rewriter.data:
            yield from _trackers(member)


def copies() -> list[OpToRewriterTracker]:
    """The trackers of every known copy of ``canonicalize`` (none unless PyMC is imported)."""
    module, attribute, names = _PYMC
    db = getattr(sys.modules.get(module), attribute, None)
    if db is None:
        return []
    return [tracker for name in names for member in db.__db__.get(name, ()) for tracker in _trackers(member)]


def _lists(tracker: OpToRewriterTracker) -> Iterator[list[Any]]:
    """Every tracker list, in a fixed order (insertion order of the tracker's dicts)."""
    yield from tracker.tracked_instances.values()
    yield from tracker.tracked_types.values()
    for by_pattern in tracker.tracked_pattern_types.values():
        yield from by_pattern.values()
    yield tracker.untracked_rewrites


def _forget_cache(tracker: OpToRewriterTracker) -> None:
    tracker.get_trackers = functools.cache(tracker._get_trackers)
    tracker._cached_composed_mro = None


def remove_from_copies(rewriters: list[Any]) -> int:
    """Take ``rewriters`` out of every known copy, remembering where they were; return how many places."""
    ours = {id(rw) for rw in rewriters}
    found = 0
    for tracker in copies():
        changed = False
        for members in _lists(tracker):
            for index in reversed(range(len(members))):
                if id(members[index]) in ours:
                    _removed.append((tracker, members, index, members.pop(index)))
                    changed = True
                    found += 1
        if changed:
            _forget_cache(tracker)
    return found


def add_to_copies(rewriters: list[Any]) -> int:
    """Put ``rewriters`` into every known copy that lacks them; return how many places."""
    added = 0
    touched = set()
    while _removed:  # back where uninstall found them, last taken out first
        tracker, members, index, rewriter = _removed.pop()
        members.insert(index, rewriter)
        touched.add(id(tracker))
        _forget_cache(tracker)
        added += 1
    ours = {id(rw) for rw in rewriters}
    lacking = [t for t in copies() if id(t) not in touched and not any(id(r) in ours for m in _lists(t) for r in m)]
    if lacking:
        fresh = optdb.query(*_PYMC_QUERY)
        for tracker in lacking:
            added += _add_like(tracker, next(_trackers(fresh)), ours)
    return added


def _add_like(tracker: OpToRewriterTracker, fresh: OpToRewriterTracker, ours: set[int]) -> int:
    """Insert into ``tracker`` the rewriters of ``ours`` that ``fresh`` holds, after the same predecessor."""
    added = 0
    for fresh_members, mine in _paired_lists(tracker, fresh):
        for index, rewriter in enumerate(fresh_members):
            if id(rewriter) not in ours:
                continue
            members = mine()
            before = next((r for r in reversed(fresh_members[:index]) if _from_pytensor(r)), None)
            at = next((i + 1 for i, r in enumerate(members) if r is before), min(index, len(members)))
            members.insert(at, rewriter)
            added += 1
    if added:
        _forget_cache(tracker)
    return added


def _from_pytensor(rewriter: Any) -> bool:
    """Whether PyTensor itself defines ``rewriter`` (others, like PyMC's, may be registered after innergraph's)."""
    module = getattr(getattr(rewriter, "fn", None), "__module__", None) or type(rewriter).__module__
    return module.startswith("pytensor.")


def _paired_lists(tracker: OpToRewriterTracker, fresh: OpToRewriterTracker) -> Iterator[tuple[list[Any], Any]]:
    """Each tracker list of ``fresh``, with a function giving ``tracker``'s list under the same key.

    The function creates the list when ``tracker`` has none (the dicts are ``defaultdict``s);
    only a list that receives a rewriter is created.
    """
    pairs: tuple[tuple[dict[Any, list[Any]], dict[Any, list[Any]]], ...] = (
        (tracker.tracked_instances, fresh.tracked_instances),
        (tracker.tracked_types, fresh.tracked_types),
    )
    for mine, theirs in pairs:
        for key, members in theirs.items():
            yield members, functools.partial(mine.__getitem__, key)
    for op_type, by_pattern in fresh.tracked_pattern_types.items():
        for pattern, members in by_pattern.items():
            yield members, functools.partial(lambda t, p: tracker.tracked_pattern_types[t][p], op_type, pattern)
    yield fresh.untracked_rewrites, lambda: tracker.untracked_rewrites


def swap_registered(db: Any, old: Any, new: Any) -> None:
    """Put ``new`` in ``db`` wherever ``old`` is registered (under its name and every tag), ``old`` out."""
    for members in db.__db__.values():
        if old in members:
            members.discard(old)
            members.add(new)
