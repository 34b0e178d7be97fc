"""A time bound for a test whose code under test may loop forever (a planted fault's ``while``).

`within` raises `TimeoutError` in the test after ``seconds``, so a mutation run's endless mutant
fails the test at once instead of at the run's timeout, and a walk whose stack a fault makes
grow without end fails before it fills the memory. SIGALRM: the main thread, POSIX only.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["within"]


@contextmanager
def within(seconds: int, what: str) -> Iterator[None]:
    """Run the block with an alarm of ``seconds``: past it, `TimeoutError` naming ``what``."""

    def ring(signum: int, frame: Any) -> None:
        raise TimeoutError(f"{what} did not finish in {seconds} s")

    previous = signal.signal(signal.SIGALRM, ring)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
