"""Python's full collections deferred while Numba compiles.

Terms
-----
full collection
    A collection of CPython's oldest generation (generation 2): it walks every object the
    collector tracks. CPython runs one after ``threshold2`` collections of generation 1
    (10 by default), when the objects promoted since the last one exceed a quarter of those
    it found then.
compile window
    From the start of an outermost ``numba:compile`` event (Numba's dispatcher compiling one
    function for one signature; the functions it compiles on the way nest inside) to its
    end. Numba emits the events under its compiler lock, so the windows of two threads
    never interleave.
deferred
    Within a compile window the collector's ``threshold2`` is `DEFERRED_THRESHOLD2` (100)
    instead of CPython's 10: generations 0 and 1 are collected as before, and garbage
    without cycles is freed by reference counting as before, but a full collection waits
    ten times longer. The thresholds are set back at the window's end: the count already
    past them makes the next collection a full one (CPython's quarter rule permitting).

Why: a cold start of a PyMC model spends a tenth of its time in the collector, most of it
in full collections during Numba's compilations, each walking a heap that Numba's own
compilations keep growing (``design/benchmarks.md``, "The collector during Numba's
compilations"): grouped K = 8, 2.0-2.1 s of a 16 s cold start, 1.7 s of it in eight full
collections; SARIMAX 7.6 s of 85 s, 6.0 s in fourteen. Deferred, the grouped model's
collections take 1.1-1.2 s, for a peak memory 22 MB higher (398 against 376 MB; vanilla's
462 MB). Disabling the collector instead saves about as much and costs 52 MB there, 305 MB
on SARIMAX; freezing the heap (``gc.freeze``) saves nothing on SARIMAX, whose garbage is
the young objects of its own compilations.

The listener is registered with Numba's events when the Numba backend loads and acts only
while innergraph is installed; a process whose collector is disabled, or whose thresholds
the user has set to anything but what the window found, is left alone.
"""

from __future__ import annotations

import gc
from typing import Any

from numba.core import event

from innergraph.core.hooks import installed

__all__ = ["DEFERRED_THRESHOLD2", "CompileWindow", "LISTENER"]

#: ``threshold2`` within a compile window (CPython's default is 10); measured against 1,000,
#: which saved no more collector time (1.05-1.3 s against 1.09-1.17 s) for the same memory.
DEFERRED_THRESHOLD2 = 100


class CompileWindow(event.Listener):
    """Defers full collections from the start of an outermost Numba compilation to its end (module docstring)."""

    def __init__(self) -> None:
        self.depth = 0
        self.restore: tuple[int, int, int] | None = None  # the thresholds the window found, while it changed them

    def on_start(self, ev: Any) -> None:
        self.depth += 1
        if self.depth == 1 and installed() and gc.isenabled():
            found = gc.get_threshold()
            if found[2] < DEFERRED_THRESHOLD2:
                gc.set_threshold(found[0], found[1], DEFERRED_THRESHOLD2)
                self.restore = found

    def on_end(self, ev: Any) -> None:
        self.depth -= 1
        if self.depth == 0 and self.restore is not None:
            found, self.restore = self.restore, None
            if gc.get_threshold() == (found[0], found[1], DEFERRED_THRESHOLD2):  # not set by anyone else meanwhile
                gc.set_threshold(*found)


#: The one listener, registered for ``numba:compile`` when this module is imported.
LISTENER = CompileWindow()
event.register("numba:compile", LISTENER)
