"""CPython's full collections deferred while a graph is compiled.

Terms
-----
full collection
    A collection of CPython's oldest generation (generation 2): it walks every object the
    collector tracks. CPython runs one after ``threshold2`` collections of generation 1 (10
    by default), when the objects promoted since the last one exceed a quarter of those it
    found then.
window
    A block during which full collections are deferred: from the first `enter` to the
    `leave` that balances it (windows nest, in one thread or several). Within a window the
    collector's ``threshold2`` is `DEFERRED_THRESHOLD2` instead of what the window found:
    generations 0 and 1 are collected as before, and garbage without cycles is freed by
    reference counting as before, but a full collection comes ten times less often. At the
    window's end the thresholds it found are set back, and the count already past them
    makes the next collection a full one (CPython's quarter rule permitting).
left alone
    A disabled collector, a ``threshold2`` already as high, and thresholds someone else sets
    during a window (they are kept at its end).

Why: rewriting a graph and compiling it with Numba make garbage with cycles that lives long
enough to be promoted, and grow the heap each full collection walks; a cold start of a PyMC
model spent a tenth of its time in the collector, an edited model's rerun a quarter
(``design/benchmarks.md``, "The collector during compilation"). Who opens windows:
`innergraph.patching.rewritten` around the rewriting of a function's graph, and
`innergraph.backends.numba_gc` around Numba's compilations, both only while innergraph is
installed.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["DEFERRED_THRESHOLD2", "depth", "enter", "full_collections_deferred", "leave"]

#: ``threshold2`` within a window (CPython's default is 10); measured against 1,000, which saved
#: no more collector time on a cold start (1.05-1.30 s against 1.09-1.17 s) for the same memory.
DEFERRED_THRESHOLD2 = 100


class _Window:
    """The one window of the process: its depth, and the thresholds it found while it changed them."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.depth = 0
        self.restore: tuple[int, int, int] | None = None


_WINDOW = _Window()


def enter() -> None:
    """Open a window (or nest in the open one): full collections deferred until the balancing `leave`."""
    with _WINDOW.lock:
        _WINDOW.depth += 1
        if _WINDOW.depth == 1 and gc.isenabled():
            found = gc.get_threshold()
            if found[2] < DEFERRED_THRESHOLD2:
                gc.set_threshold(found[0], found[1], DEFERRED_THRESHOLD2)
                _WINDOW.restore = found


def leave() -> None:
    """Close what the matching `enter` opened; the outermost sets back the thresholds it found."""
    with _WINDOW.lock:
        _WINDOW.depth -= 1
        if _WINDOW.depth == 0 and _WINDOW.restore is not None:
            found, _WINDOW.restore = _WINDOW.restore, None
            if gc.get_threshold() == (found[0], found[1], DEFERRED_THRESHOLD2):  # not set by anyone else meanwhile
                gc.set_threshold(*found)


@contextmanager
def full_collections_deferred() -> Iterator[None]:
    """A window for the block (module docstring)."""
    enter()
    try:
        yield
    finally:
        leave()


def depth() -> int:
    """How many windows are open (0: none), for tests."""
    return _WINDOW.depth
