"""Full collections deferred while Numba compiles (`innergraph.backends.numba_gc`).

Checked here, on Numba's own compilations in this process: within an outermost compilation
the collector's ``threshold2`` is `DEFERRED_THRESHOLD2`, in the compilations nested in it
too, and CPython's thresholds are back afterwards, also after a compilation that fails;
nothing changes while innergraph is uninstalled, while the collector is disabled, when the
user's own ``threshold2`` is already as high, or for thresholds the user sets during a
compilation; and the full collections of a compilation under low thresholds are fewer.
"""

import gc
from collections.abc import Iterator
from typing import Any

import numba
import numpy as np
import pytest
from numba.core import event

import innergraph
from innergraph.backends.numba_gc import DEFERRED_THRESHOLD2, LISTENER

DEFAULT = (700, 10, 10)


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
    assert innergraph.installed() and LISTENER.depth == 0
    assert _fresh(2.0)(np.arange(3.0)) == 7.0
    assert len(seen.starts) >= 2  # outer, and inner compiled while outer is typed
    assert set(seen.starts) == {(700, 10, DEFERRED_THRESHOLD2)}
    assert gc.get_threshold() == DEFAULT and LISTENER.depth == 0 and LISTENER.restore is None


def test_a_failing_compilation_gives_the_thresholds_back(seen: Seen) -> None:
    @numba.njit
    def broken(x: Any) -> Any:
        return x.no_such_attribute

    with pytest.raises(numba.core.errors.TypingError):
        broken(np.arange(3.0))
    assert seen.starts == [(700, 10, DEFERRED_THRESHOLD2)]
    assert gc.get_threshold() == DEFAULT and LISTENER.depth == 0


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


def test_thresholds_the_user_sets_during_a_compilation_are_kept(seen: Seen) -> None:
    class Setter(event.Listener):
        def on_start(self, ev: Any) -> None:
            gc.set_threshold(1000, 20, 30)

        def on_end(self, ev: Any) -> None:
            pass

    setter = Setter()
    event.register("numba:compile", setter)
    try:
        _fresh(6.0)(np.arange(3.0))
    finally:
        event.unregister("numba:compile", setter)
    assert gc.get_threshold() == (1000, 20, 30)


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
