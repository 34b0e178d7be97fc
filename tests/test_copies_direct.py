"""innergraph's node rewriters in copies of ``canonicalize`` that another library keeps (`innergraph.rewriting.copies`).

PyMC is not needed: the copies are made here as PyMC makes them on import (a query of
``optdb``, ``+canonicalize -local_eager_useless_unbatched_blockwise``, registered as
``pre-canonicalize`` and ``post-canonicalize`` in a ``SequenceDB`` named
``logprob_rewrites_db``), in a stand-in module ``pymc.logprob.rewriting`` put in
``sys.modules`` for the test. Each copy's tracker lists (by ``Op`` type, instance and
pattern, and untracked) are compared by their members' names with those of a query made
at a known moment:

* innergraph imported first: ``uninstall`` leaves a copy as a query made without innergraph,
  ``install`` puts each rewriter back where it was;
* PyMC imported first (a copy made while uninstalled): ``install`` puts innergraph's rewriters
  where a copy made while installed has them, also in a copy made otherwise (a list lacking
  the predecessor, or the whole list), and after a PyTensor predecessor only (a rewriter of
  another library registered in ``canonicalize`` stays after innergraph's);
* a copy's lookup of rewriters by ``Op`` (cached by PyTensor) sees each change, and
  `remove_from_copies`/`add_to_copies` count the places they changed;
* the pattern and untracked lists, in a copy and in the query a copy is made like;
* `swap_registered` on a database of sets.
"""

import sys
import types
from collections.abc import Iterator
from typing import Any

import pytensor.tensor as pt
import pytest
from pytensor.compile.mode import optdb
from pytensor.graph.rewriting.basic import MergeOptimizer, OpToRewriterTracker, node_rewriter
from pytensor.graph.rewriting.db import SequenceDB
from pytensor.tensor.math import Sum

import innergraph
from innergraph.rewriting import copies, db

QUERY = ("+canonicalize", "-local_eager_useless_unbatched_blockwise")
OURS = ["innergraph_sum_of_one_row", "innergraph_read_of_written_region", "innergraph_fill_read_by_consumers"]
SUM = pt.dvector().sum().owner.op
SECOND = pt.second(pt.dvector(), 1.0).owner.op


def _names(members: list[Any]) -> list[str]:
    return [getattr(r, "name", None) or type(r).__name__ for r in members]


def layout(tracker: OpToRewriterTracker) -> dict[Any, list[str]]:
    """Each non-empty tracker list of ``tracker`` under its key, as its members' names."""
    lists: dict[Any, list[str]] = {}
    lists.update({("instance", key): _names(m) for key, m in tracker.tracked_instances.items() if m})
    lists.update({("type", key): _names(m) for key, m in tracker.tracked_types.items() if m})
    lists.update({("pattern", t, p): _names(m) for t, by in tracker.tracked_pattern_types.items() for p, m in by.items() if m})
    lists["untracked"] = _names(tracker.untracked_rewrites)
    return lists


def query_layout(*query: str) -> dict[Any, list[str]]:
    """The layout of a copy made now by ``query`` (PyMC's by default)."""
    return layout(next(copies._trackers(optdb.query(*(query or QUERY)))))


def looked_up(tracker: OpToRewriterTracker, op: Any) -> list[str]:
    """The rewriters ``tracker`` tries on a node of ``op`` (PyTensor's cached lookup)."""
    return _names(tracker.get_trackers(op))


@pytest.fixture
def pymc(monkeypatch: Any) -> Iterator[Any]:
    """``make(query=QUERY)``: PyMC's two copies made now by ``query``, in a stand-in ``pymc.logprob.rewriting``; returns their trackers."""
    module = types.ModuleType("pymc.logprob.rewriting")
    monkeypatch.setitem(sys.modules, "pymc.logprob.rewriting", module)

    def make(*query: str) -> list[OpToRewriterTracker]:
        database = SequenceDB()
        database.name = "logprob_rewrites_db"
        database.register("pre-canonicalize", optdb.query(*(query or QUERY)), "basic", position=0)
        database.register("post-canonicalize", optdb.query(*(query or QUERY)), "basic", position=1)
        module.logprob_rewrites_db = database  # type: ignore[attr-defined]
        trackers = copies.copies()
        assert len(trackers) == 2 and trackers[0] is not trackers[1]
        return trackers

    try:
        yield make
    finally:
        innergraph.install()
        assert copies._removed == []


def test_no_copies_without_the_module_or_its_database(monkeypatch: Any) -> None:
    monkeypatch.delitem(sys.modules, "pymc.logprob.rewriting", raising=False)
    assert copies.copies() == []
    monkeypatch.setitem(sys.modules, "pymc.logprob.rewriting", types.ModuleType("pymc.logprob.rewriting"))
    assert copies.copies() == []
    assert copies.add_to_copies(db._copied_rewriters()) == 0 and copies.remove_from_copies(db._copied_rewriters()) == 0


def test_only_equilibrium_rewriters_in_sequences_hold_trackers(pymc: Any) -> None:
    (pre, post) = pymc()
    database = sys.modules["pymc.logprob.rewriting"].logprob_rewrites_db
    database.__db__["pre-canonicalize"] = {MergeOptimizer()}
    assert copies.copies() == [post]
    equilibrium = optdb.query(*QUERY).data[0]
    database.__db__["pre-canonicalize"] = {equilibrium}  # not in a sequence
    assert copies.copies() == [equilibrium.node_tracker, post]


def test_innergraph_first_uninstall_leaves_pymcs_own_copy_and_install_puts_them_back(pymc: Any) -> None:
    trackers = pymc()
    installed = [layout(t) for t in trackers]
    assert installed[0] == installed[1] == query_layout()
    assert all(name in sum(installed[0].values(), []) for name in OURS)
    assert "innergraph_sum_of_one_row" in looked_up(trackers[0], SUM)  # and the lookup is cached now
    innergraph.uninstall()
    assert [layout(t) for t in trackers] == [query_layout()] * 2  # as PyMC alone builds them
    assert not any(name in sum(query_layout().values(), []) for name in OURS)
    assert "innergraph_sum_of_one_row" not in looked_up(trackers[0], SUM)
    assert len(copies._removed) == 6  # three rewriters in each of two copies
    innergraph.install()
    assert copies._removed == []
    assert [layout(t) for t in trackers] == installed
    assert all("innergraph_sum_of_one_row" in looked_up(t, SUM) for t in trackers)  # the first's was cached while uninstalled


def test_uninstall_leaves_a_copy_without_them_as_it_is(pymc: Any) -> None:
    """A copy made by a query that excluded innergraph: uninstall changes nothing in it, its cached lookups included."""
    trackers = pymc(*QUERY, "-innergraph")
    assert all("innergraph_sum_of_one_row" not in looked_up(t, SUM) for t in trackers)  # cached now
    cached = [(t.get_trackers, t._cached_composed_mro) for t in trackers]
    before = [layout(t) for t in trackers]
    innergraph.uninstall()
    assert [layout(t) for t in trackers] == before
    assert all(t.get_trackers is lookup and t._cached_composed_mro is mro for t, (lookup, mro) in zip(trackers, cached, strict=True))


def test_remove_and_add_count_the_places(pymc: Any) -> None:
    trackers = pymc()
    installed = [layout(t) for t in trackers]
    ours = db._copied_rewriters()
    assert copies.remove_from_copies(ours) == 6 and len(copies._removed) == 6
    assert copies.remove_from_copies(ours) == 0
    assert copies.add_to_copies(ours) == 6 and copies._removed == []
    assert copies.add_to_copies(ours) == 0  # every copy holds them
    assert [layout(t) for t in trackers] == installed


def test_pymc_first_install_puts_them_where_innergraph_first_does(pymc: Any) -> None:
    innergraph.uninstall()
    trackers = pymc()
    uninstalled = query_layout()
    assert "innergraph_sum_of_one_row" not in looked_up(trackers[1], SUM)
    assert [layout(t) for t in trackers] == [uninstalled] * 2
    assert "innergraph_fill_read_by_consumers" not in looked_up(trackers[0], SECOND)  # cached now
    innergraph.install()
    assert [layout(t) for t in trackers] == [query_layout()] * 2
    assert "innergraph_fill_read_by_consumers" in looked_up(trackers[0], SECOND)  # cached before: forgotten
    assert "innergraph_sum_of_one_row" in looked_up(trackers[1], SUM)
    assert copies.add_to_copies(db._copied_rewriters()) == 0  # again: the copies hold them already
    assert [layout(t) for t in trackers] == [query_layout()] * 2
    innergraph.uninstall()
    assert [layout(t) for t in trackers] == [uninstalled] * 2
    innergraph.install()
    assert [layout(t) for t in trackers] == [query_layout()] * 2


def test_a_copy_lacking_the_predecessor_takes_them_at_their_index_or_its_end(pymc: Any) -> None:
    """Made without PyTensor's rewriter that precedes innergraph's (``-local_useless_fill``, alone for ``second``; two of ``Sum``'s)."""
    installed = query_layout()
    sums = installed[("type", Sum)]
    assert sums[-1] == "innergraph_sum_of_one_row" and len(sums) == 4
    innergraph.uninstall()
    query = (*QUERY, "-local_useless_fill", "-local_sum_prod_all_to_none", "-local_sumsqr2dot")
    trackers = pymc(*query)
    assert "innergraph_fill_read_by_consumers" not in looked_up(trackers[0], SECOND)  # cached now
    assert ("instance", SECOND) not in layout(trackers[0])
    assert layout(trackers[0])[("type", Sum)] == sums[:1]
    innergraph.install()
    for tracker in trackers:
        assert layout(tracker)[("instance", SECOND)] == ["innergraph_fill_read_by_consumers"]
        assert layout(tracker)[("type", Sum)] == [sums[0], "innergraph_sum_of_one_row"]  # index 3 of 4 beyond its end
        assert layout(tracker) == query_layout(*query)
        assert "innergraph_fill_read_by_consumers" in looked_up(tracker, SECOND)


def test_another_librarys_rewriter_stays_after_innergraphs(pymc: Any) -> None:
    """PyMC's ``local_lift_DiracDelta`` kind: registered in ``canonicalize`` after innergraph when innergraph was imported first."""

    @node_rewriter([Sum])
    def local_of_another_library(fgraph: Any, node: Any) -> None:
        return None

    canonicalize = optdb["canonicalize"]
    innergraph.uninstall()
    canonicalize.register("local_of_another_library", local_of_another_library, "fast_run")
    try:
        trackers = pymc()
        sums = layout(trackers[0])[("type", Sum)]
        assert sums[-1] == "local_of_another_library"
        innergraph.install()
        for tracker in trackers:
            assert layout(tracker)[("type", Sum)] == [*sums[:-1], "innergraph_sum_of_one_row", "local_of_another_library"]
        # a query made now has it before innergraph's (registered first): the copies are not that
        assert query_layout()[("type", Sum)][-2:] == ["local_of_another_library", "innergraph_sum_of_one_row"]
    finally:
        db.unregister(canonicalize, "local_of_another_library", local_of_another_library)


def _pattern_list(tracker: OpToRewriterTracker) -> list[Any]:
    """The first list of ``tracker`` keyed by an ``Op`` pattern."""
    lists = [m for by in tracker.tracked_pattern_types.values() for m in by.values() if m]
    assert lists, "canonicalize tracks some Op patterns"
    return lists[0]


def test_the_pattern_and_untracked_lists_of_a_copy(pymc: Any) -> None:
    """Each kind of tracker list is reached: innergraph's rewriters planted in a copy's pattern list (two) and untracked list, taken out and put back."""
    trackers = pymc()
    tracker = trackers[0]
    ours = db._copied_rewriters()
    pattern = _pattern_list(tracker)
    pattern.insert(0, ours[0])
    pattern.append(ours[2])
    tracker.untracked_rewrites.append(ours[1])
    planted = layout(tracker)
    innergraph.uninstall()
    assert layout(tracker) == query_layout()
    innergraph.install()
    assert layout(tracker) == planted


def test_a_fresh_copys_pattern_and_untracked_lists_are_followed() -> None:
    """`add_to_copies` copies where a query made now holds them: here a fresh query with innergraph's rewriters planted in a
    pattern list (after its first, PyTensor's, member) and untracked, and a copy lacking that pattern's key altogether."""
    ours = db._copied_rewriters()
    with innergraph.uninstalled():  # both made without them, as a copy lacking them and a query that lacks them in those lists
        fresh = next(copies._trackers(optdb.query(*QUERY)))
        tracker = next(copies._trackers(optdb.query(*QUERY)))
    pattern = _pattern_list(fresh)
    pattern.insert(1, ours[0])
    fresh.untracked_rewrites.append(ours[1])
    ((op_type, key),) = [(t, p) for t, by in fresh.tracked_pattern_types.items() for p, m in by.items() if m is pattern]
    del tracker.tracked_pattern_types[op_type][key]
    assert copies._add_like(tracker, fresh, {id(r) for r in ours}) == 2
    expected = layout(fresh)
    expected[("pattern", op_type, key)] = [ours[0].name]  # its predecessor is not in the copy: at the start of a new list
    assert layout(tracker) == expected
    assert tracker.untracked_rewrites[-1] is ours[1]


def test_swap_registered_replaces_under_every_key_holding_the_old() -> None:
    old, new, other = MergeOptimizer(), MergeOptimizer(), MergeOptimizer()
    database = types.SimpleNamespace(__db__={"name": {old}, "tag": {old, other}, "elsewhere": {other}, "empty": set()})
    copies.swap_registered(database, old, new)
    assert database.__db__ == {"name": {new}, "tag": {new, other}, "elsewhere": {other}, "empty": set()}
