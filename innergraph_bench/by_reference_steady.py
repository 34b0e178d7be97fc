"""What calling the final function's nodes by reference costs a steady call, measured in one process.

Steady calls of the same compiled code vary by more than 10% from one process (and one
compile directory) to the next on this project's machines, more than the effect of calling
a node through a pointer. So this compares within one process: the NUTS function of a PyMC
model (`innergraph_bench.pymc_models`) compiled twice under innergraph, with the final
function's nodes called by reference and with them linked
(`innergraph.backends.numba_reference.OUTER_NODES`), then called in alternating blocks.

Terms
-----
block
    ``n`` calls of one of the two functions, timed with the process's CPU time; ``n`` is
    what 0.1 s holds. Blocks alternate between the two functions, in both orders.
ratio
    The median block of the function with its nodes by reference over the median block of
    the one with them linked, per call.

One process per measurement; run several, the ratio moves by several percent between them::

    python -m innergraph_bench.by_reference_steady CASE [--blocks N]

Prints one JSON line: the case, both medians in microseconds per call, the ratio, and how
many distinct node functions the final function called by reference (equal nodes share one).
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["alternating_blocks", "main"]


def alternating_blocks(functions: Mapping[str, Callable[[], Any]], blocks: int, budget: float = 0.1) -> dict[str, float]:
    """Median CPU seconds per call of each of ``functions``, called in ``blocks`` alternating blocks each (module docstring)."""
    first = next(iter(functions.values()))
    start, n = time.process_time(), 0
    while time.process_time() - start < budget:
        first()
        n += 1
    names = list(functions)
    times: dict[str, list[float]] = {name: [] for name in names}
    for i in range(blocks):
        for name in names if i % 2 == 0 else reversed(names):
            fn = functions[name]
            begin = time.process_time()
            for _ in range(n):
                fn()
            times[name].append((time.process_time() - begin) / n)
    return {name: statistics.median(values) for name, values in times.items()}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m innergraph_bench.by_reference_steady", description=__doc__.splitlines()[0])
    parser.add_argument("case", help="a PyMC model of innergraph_bench.pymc_models (e.g. pymc-garch-customdist)")
    parser.add_argument("--blocks", type=int, default=60, help="timed blocks per function (default: 60)")
    args = parser.parse_args(argv)

    import innergraph  # noqa: F401  (installs itself)
    from innergraph.backends import numba_reference
    from innergraph.backends.numba_link import final_function
    from pymc.pytensorf import compile as pymc_compile

    from innergraph_bench.pymc_models import build, nuts_graph

    (inputs, outputs), point = nuts_graph(build(args.case))
    functions: dict[str, Callable[[], Any]] = {}
    referenced = 0
    for name, flag in (("by_reference", True), ("linked", False)):
        numba_reference.OUTER_NODES = flag
        try:
            fn = pymc_compile(inputs, outputs, mode="NUMBA")
            fn(point)
        finally:
            numba_reference.OUTER_NODES = True
        functions[name] = functools.partial(fn, point)
        if flag:
            final = final_function(fn.vm.jit_fn)
            referenced = len({id(v) for v in final.py_func.__globals__.values() if hasattr(v, "body")})
    values = {name: float(f()[0]) for name, f in functions.items()}
    if values["by_reference"] != values["linked"]:
        raise SystemExit(f"the two functions disagree: {values}")
    medians = alternating_blocks(functions, args.blocks)
    by_reference, linked = medians["by_reference"] * 1e6, medians["linked"] * 1e6
    print(json.dumps({
        "case": args.case, "by_reference_us": by_reference, "linked_us": linked, "ratio": by_reference / linked,
        "nodes_by_reference": referenced,
    }))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
