"""Full collections deferred while a graph is rewritten and while Numba compiles (`innergraph.core.collector`).

Checked here, in this process: within the rewriting of a function's graph, and within an
outermost Numba compilation and those nested in it, the collector's ``threshold2`` is
`DEFERRED_THRESHOLD2`, and CPython's thresholds are back afterwards, also after a
compilation that fails; windows nest, across threads too, and the last to close sets the
thresholds back; nothing changes while innergraph is uninstalled, while the collector is
disabled, when the user's own ``threshold2`` is already as high, or for thresholds someone
sets during a window; and the full collections of a compilation under low thresholds are
fewer.
"""

import gc
import threading
from collections.abc import Iterator
from typing import Any

import numba
import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from numba.core import event
from pytensor.compile.mode import Mode
from pytensor.graph.rewriting.basic import GraphRewriter, SequentialGraphRewriter

import innergraph
from innergraph.core import collector
from innergraph.core.collector import DEFERRED_THRESHOLD2

DEFAULT = (700, 10, 10)
DEFERRED = (700, 10, DEFERRED_THRESHOLD2)


class Seen(event.Listener):
    """Records the collector's thresholds at the start of each compilation (registered after innergraph's listener)."""

    def __init__(self) -> None:
        self.starts: list[tuple[int, int, int]] = []

    def on_start(self, ev: Any) -> None:
        self.starts.append(gc.get_threshold())

    def on_end(self, ev: Any) -> None:
        pass


@pytest.fixture
def seen() -> Iterator[Seen]:
    """A recorder of thresholds, with CPython's default thresholds set before and restored after."""
    import innergraph.backends.numba  # noqa: F401  (what a Numba link loads: registers the listener)

    before, enabled = gc.get_threshold(), gc.isenabled()
    gc.set_threshold(*DEFAULT)
    recorder = Seen()
    event.register("numba:compile", recorder)
    try:
        yield recorder
    finally:
        event.unregister("numba:compile", recorder)
        gc.set_threshold(*before)
        gc.enable() if enabled else gc.disable()
        assert collector.depth() == 0


def _fresh(scale: float) -> Any:
    """A new jitted function calling another new one (a compilation nested in the first)."""

    @numba.njit
    def inner(x: Any) -> Any:
        return x * scale

    @numba.njit
    def outer(x: Any) -> Any:
        return inner(x).sum() + 1.0

    return outer


def test_a_compilation_and_those_nested_in_it_defer_full_collections_and_the_thresholds_come_back(seen: Seen) -> None:
    assert innergraph.installed() and collector.depth() == 0
    assert _fresh(2.0)(np.arange(3.0)) == 7.0
    assert len(seen.starts) >= 2  # outer, and inner compiled while outer is typed
    assert set(seen.starts) == {DEFERRED}
    assert gc.get_threshold() == DEFAULT and collector.depth() == 0


def test_a_failing_compilation_gives_the_thresholds_back(seen: Seen) -> None:
    @numba.njit
    def broken(x: Any) -> Any:
        return x.no_such_attribute

    with pytest.raises(numba.core.errors.TypingError):
        broken(np.arange(3.0))
    assert seen.starts == [DEFERRED]
    assert gc.get_threshold() == DEFAULT and collector.depth() == 0


class _Recorder(GraphRewriter):
    """A graph rewriter that records the collector's thresholds when it runs."""

    def __init__(self) -> None:
        self.seen: list[tuple[int, int, int]] = []

    def apply(self, fgraph: Any) -> None:
        self.seen.append(gc.get_threshold())


def test_rewriting_a_functions_graph_defers_full_collections(seen: Seen) -> None:
    x = pt.dvector("x")
    recorder = _Recorder()
    f = pytensor.function([x], x * 2.0 + 1.0, mode=Mode(linker="py", optimizer=SequentialGraphRewriter(recorder)))
    assert recorder.seen == [DEFERRED] and gc.get_threshold() == DEFAULT
    np.testing.assert_array_equal(f(np.arange(3.0)), [1.0, 3.0, 5.0])
    with innergraph.uninstalled():
        pytensor.function([x], x * 3.0, mode=Mode(linker="py", optimizer=SequentialGraphRewriter(recorder)))
    assert recorder.seen == [DEFERRED, DEFAULT]


def test_uninstalled_a_disabled_collector_and_a_users_high_threshold_are_left_alone(seen: Seen) -> None:
    with innergraph.uninstalled():
        _fresh(3.0)(np.arange(3.0))
    assert seen.starts and set(seen.starts) == {DEFAULT}
    seen.starts.clear()
    gc.disable()
    _fresh(4.0)(np.arange(3.0))
    gc.enable()
    assert seen.starts and set(seen.starts) == {DEFAULT}
    seen.starts.clear()
    gc.set_threshold(700, 10, 500)
    _fresh(5.0)(np.arange(3.0))
    assert seen.starts and set(seen.starts) == {(700, 10, 500)} and gc.get_threshold() == (700, 10, 500)


def test_thresholds_set_during_a_window_are_kept(seen: Seen) -> None:
    with collector.full_collections_deferred():
        assert gc.get_threshold() == DEFERRED
        gc.set_threshold(1000, 20, 30)
    assert gc.get_threshold() == (1000, 20, 30)


def test_windows_nest_across_threads_and_the_last_to_close_sets_the_thresholds_back(seen: Seen) -> None:
    opened, release = threading.Event(), threading.Event()

    def other() -> None:
        with collector.full_collections_deferred():
            opened.set()
            release.wait(10)

    thread = threading.Thread(target=other)
    collector.enter()
    thread.start()
    assert opened.wait(10) and collector.depth() == 2
    collector.leave()
    assert gc.get_threshold() == DEFERRED  # the other thread's window is still open
    release.set()
    thread.join(10)
    assert collector.depth() == 0 and gc.get_threshold() == DEFAULT


def _full_collections_while_compiling(scale: float) -> int:
    """Full collections during the compilation of a new function, under thresholds low enough to make some.

    The heap is frozen first and a full collection made, so that CPython's quarter rule (a
    full collection only when the objects promoted since the last exceed a quarter of those
    it found) does not hold back the compilation's: it found none.
    """
    counted = [0]

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "start" and info["generation"] == 2:
            counted[0] += 1

    gc.freeze()
    gc.collect()
    gc.set_threshold(10, 2, 2)
    gc.callbacks.append(count)
    try:
        _fresh(scale)(np.arange(3.0))
    finally:
        gc.callbacks.remove(count)
        gc.set_threshold(*DEFAULT)
        gc.unfreeze()
    return counted[0]


def test_a_compilation_makes_fewer_full_collections(seen: Seen) -> None:
    with innergraph.uninstalled():
        vanilla = _full_collections_while_compiling(7.0)
    deferred = _full_collections_while_compiling(8.0)
    assert vanilla >= 5 and deferred < vanilla / 2, (vanilla, deferred)
