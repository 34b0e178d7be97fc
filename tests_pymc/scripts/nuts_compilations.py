"""Compile and call one PyMC model's NUTS function with innergraph; print the number of Numba compilations.

Usage: ``nuts_compilations.py MODEL`` (a case id of `innergraph_bench.pymc_models.MODELS`).
A Numba compilation is a ``numba:compile`` event, emitted only when Numba compiles
(never when it loads from its disk cache).
"""

import sys

from numba.core import event

from innergraph_bench.bench import compile_graph
from innergraph_bench.pymc_models import nuts_case

case = nuts_case(sys.argv[1])
graph = case.build("innergraph")
with event.install_recorder("numba:compile") as recorder:
    compile_graph(case, "innergraph", graph)(*case.values)
print(sum(1 for _, e in recorder.buffer if e.is_start))
