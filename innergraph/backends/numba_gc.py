"""Python's full collections deferred while Numba compiles.

Terms
-----
compile window
    From the start of an outermost ``numba:compile`` event (Numba's dispatcher compiling one
    function for one signature; the functions it compiles on the way nest inside) to its
    end: a window of `innergraph.core.collector`, in which CPython's collector makes a full
    collection ten times less often. Numba emits the events under its compiler lock, so the
    compilations of two threads never interleave.

A cold start of a PyMC model spends a tenth of its time in the collector, most of it in full
collections during Numba's compilations, each walking a heap that Numba's own compilations keep
growing (``design/numba-linking.md``, "The collector deferred while Numba compiles"). The
listener is registered with Numba's events when the Numba backend loads and opens a window
only while innergraph is installed.
"""

from __future__ import annotations

from typing import Any

from numba.core import event

from innergraph.core.collector import enter, leave
from innergraph.core.hooks import installed

__all__ = ["CompileWindow", "LISTENER"]


class CompileWindow(event.Listener):
    """Opens a collector window at the start of an outermost Numba compilation and closes it at its end."""

    def __init__(self) -> None:
        self.depth = 0
        self.opened = False  # whether the outermost compilation under way opened a window

    def on_start(self, ev: Any) -> None:
        self.depth += 1
        if self.depth == 1 and installed():
            enter()
            self.opened = True

    def on_end(self, ev: Any) -> None:
        self.depth -= 1
        if self.depth == 0 and self.opened:
            self.opened = False
            leave()


#: The one listener, registered for ``numba:compile`` when this module is imported.
LISTENER = CompileWindow()
event.register("numba:compile", LISTENER)
