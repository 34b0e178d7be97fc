"""One `Body` object per final body and process: an equal body reuses what was compiled from the first.

Terms
-----
final body
    A body the rewrite pipeline is done with: folded by ``innergraph_fold`` in a
    graph the pipeline lifted, marked rewritten (`innergraph.protocol.runtime.mark_rewritten`),
    or the fused copy ``innergraph_fusion`` makes of one. Nothing rewrites its nodes
    afterwards; consumers only compile it.
interned body
    The first final body of its class of alpha-equivalent bodies that the table
    kept. `Body` equality *is* alpha-equivalence (`innergraph.core.canonical`), so a
    later final body equal to it can stand for it: `intern_body` returns the
    interned object, and with it everything consumers cached on it (`Body.cache`:
    the prepared body and its converted nodes, generated Numba functions, compiled
    PyTensor functions, native Scans, the fused copy).
body table
    The process-wide table from a final body to its interned object: a
    least-recently-used table of at most `body_table_size` bodies.

Why this is sound (``design/shared-bodies.md``, section 5): every entry of a body's
cache is a function of the body's structure and of the entry's key, and the keys
name what else an entry depends on (the linker, the rewriter the body is compiled
with, the consumer's Op and wiring). The one entry that records provenance — the
rewritten flag — is the same for every body in the table: only rewritten bodies
are interned.

Memory: a body holds no large constant once ``outline_constants`` made them
arguments, but its cache holds jitted Numba functions and compiled PyTensor
functions (tens to hundreds of kilobytes each). `DEFAULT_SIZE` bodies bound what
the table alone keeps alive; `clear_body_cache` empties it (tests that count work
done within one compilation use it), and so does ``innergraph.uninstall()``.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager

from pytensor.graph.basic import Constant
from pytensor.graph.fg import FunctionGraph

from innergraph.core.types import Body, is_folded, is_rewritten

__all__ = ["DEFAULT_SIZE", "body_table_size", "clear_body_cache", "intern_body", "intern_folded", "interned_bodies", "table_kept"]

#: How many final bodies the table keeps at most (least recently used dropped first).
DEFAULT_SIZE = 128

_table: OrderedDict[Body, Body] = OrderedDict()
_size = [DEFAULT_SIZE]


def intern_body(body: Body) -> Body:
    """The interned body equal to ``body``: ``body`` itself if it is the first one (or not final).

    Only rewritten bodies (`innergraph.protocol.runtime.is_rewritten`) are interned: a
    body built by a user and compiled without the pipeline is compiled with the
    whole rewriter, a rewritten one without the passes it already went through, so
    the two must not share a cache.

    Parameters
    ----------
    body
        A final body (see the module docstring).

    Returns
    -------
    Body
        An object equal to ``body``; the same object for every equal final body
        while it stays in the table.
    """
    if not is_rewritten(body) or _size[0] <= 0:
        return body
    found = _table.get(body)
    if found is not None:
        _table.move_to_end(found)
        return found
    _table[body] = body
    while len(_table) > _size[0]:
        _table.popitem(last=False)
    return body


def intern_folded(fgraph: FunctionGraph) -> int:
    """Make each folded function ``fgraph``'s nodes read hold the interned body; return how many changed.

    Called by ``innergraph_fold`` on a graph the pipeline lifted, right after it
    folded: every folded function such a graph's nodes read was made by this
    compilation (the lift unfolded every folded function the graph came with), so
    the constant's value is swapped for the equal interned body in place. The graph
    is not changed — the constant keeps its type, and its signature (type, equal
    body) stays equal — so the rewrite history is the same whether the table had
    the body or not (DebugMode compares the histories of repeated rewrites).
    Bodies nested in an interned body come with it; those of a body interned for
    the first time stay as they are.
    """
    changed = 0
    for var in _folded_read(fgraph):
        interned = intern_body(var.data)
        if interned is not var.data:
            var.data = interned
            changed += 1
    return changed


def _folded_read(fgraph: FunctionGraph) -> list[Constant]:
    return [var for var, uses in fgraph.clients.items() if uses and is_folded(var)]


def clear_body_cache() -> None:
    """Forget every interned body: the next final body of each kind is prepared and compiled anew.

    Functions already compiled keep the bodies they hold (and what is cached on
    them); only the table lets go. ``innergraph.uninstall()`` calls this.
    """
    _table.clear()


@contextmanager
def table_kept() -> Iterator[None]:
    """The table as it is now, back after the block (whatever the block cleared).

    `innergraph.uninstalled` runs its block with innergraph uninstalled, which clears
    the table; the rewrites that made its bodies are registered again afterwards, so
    a reference compiled without innergraph (a test's, the benchmarks' vanilla round)
    need not cost innergraph its interned bodies.
    """
    saved = list(_table)
    try:
        yield
    finally:
        _table.clear()
        for body in saved[-_size[0] :] if _size[0] else []:
            _table[body] = body


def body_table_size(size: int | None = None) -> int:
    """The table's bound: returned, or set to ``size`` (0 turns interning off); returns the bound in force.

    Parameters
    ----------
    size
        The new bound (a non-negative int), or ``None`` to leave it.
    """
    if size is not None:
        if not isinstance(size, int) or size < 0:
            raise ValueError(f"body_table_size: the bound must be a non-negative int, got {size!r}")
        _size[0] = size
        while len(_table) > size:
            _table.popitem(last=False)
    return _size[0]


def interned_bodies() -> list[Body]:
    """The bodies in the table, least recently used first (for tests and diagnostics)."""
    return list(_table)
