"""Compile ``x * c[::-1]`` (``c`` a constant of ``SIZE`` values) with the Numba linker and call it.

Usage: ``numba_compilations.py SIZE [EXCLUDED_REWRITE ...]``. Prints
``<number of Numba compilations> <sum of the result>``. A Numba compilation is a
``numba:compile`` event: Numba emits it only when it compiles, never when it loads
a function from its disk cache. Run twice in fresh processes: the second run's
count is 0 exactly when the function was cached.
"""

import sys

import numpy as np
import pytensor
import pytensor.tensor as pt
from numba.core import event
from pytensor.compile.mode import Mode

import innergraph  # noqa: F401

size, excluded = int(sys.argv[1]), sys.argv[2:]
x = pt.dvector("x")
c = pt.constant(np.linspace(0.5, 2.0, size))
mode = Mode(linker="numba", optimizer="fast_run").excluding(*excluded)
with event.install_recorder("numba:compile") as recorder:
    result = pytensor.function([x], x * c[::-1], mode=mode)(np.arange(float(size)))
print(sum(1 for _, e in recorder.buffer if e.is_start), float(result.sum()))
