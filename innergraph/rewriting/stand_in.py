"""One of PyTensor's passes replaced by innergraph's stand-in while innergraph is installed.

Terms
-----
stand-in
    innergraph's rewriter that takes the place of one PyTensor rewriter object in a rewrite
    database: under the same name and every tag (`innergraph.rewriting.copies.swap_registered`),
    so a mode including or excluding the pass by any of its names gets the stand-in.
registration as released
    The database holds, under the pass's name, exactly one object of PyTensor's very class.
    Anything else (two of them, none, a subclass: another library's change) is left alone.

`StandIn` is the swap and its undo: ``replace`` when innergraph's rewrites are registered,
``restore`` when they are removed (`innergraph.rewriting.db`), each once. Its users are
`innergraph.rewriting.scan_inplace` (``scan_make_inplace`` in ``optdb``) and
`innergraph.rewriting.scan_merge` (``scan_merge`` in ``scan_eqopt2``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from innergraph.rewriting.copies import swap_registered

__all__ = ["StandIn"]


class StandIn:
    """PyTensor's rewriter ``name`` (of class ``theirs``) in ``optdb`` or its sub-database ``database``, swapped for ``ours()``.

    Parameters
    ----------
    name
        The pass's name in its database.
    theirs
        PyTensor's class of the pass: the object replaced is of this very class.
    ours
        Makes the stand-in (it gets the original's ``name`` attribute).
    database
        The name under which ``optdb`` holds the database of the pass; None: ``optdb`` itself.
    """

    def __init__(self, name: str, theirs: type, ours: Callable[[], Any], database: str | None = None):
        self.name = name
        self.theirs = theirs
        self.ours = ours
        self.database = database
        #: (PyTensor's rewriter, the stand-in, the database) while swapped.
        self.swapped: list[tuple[Any, Any, Any]] = []

    def _db(self) -> Any:
        from pytensor.compile.mode import optdb

        if self.database is None:
            return optdb
        return optdb[self.database] if self.database in optdb.__db__ else None

    def replace(self) -> None:
        """Put the stand-in in place of PyTensor's rewriter (once; left alone unless registered as released)."""
        db = self._db()
        if self.swapped or db is None:
            return
        originals: list[Any] = [r for r in db.__db__.get(self.name, ()) if type(r) is self.theirs]
        if len(originals) != 1:
            return  # not PyTensor's registration as released: leave it alone
        original, ours = originals[0], self.ours()
        ours.name = original.name
        swap_registered(db, original, ours)
        self.swapped.append((original, ours, db))

    def restore(self) -> None:
        """Undo `replace`: PyTensor's own rewriter object back in every tag."""
        while self.swapped:
            original, ours, db = self.swapped.pop()
            swap_registered(db, ours, original)
