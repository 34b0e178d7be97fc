"""Per-step cost of a trivial scan, ``x_t = x_{t-1} + 1`` over 10,000 steps.

Variants, compiled in the same run:

* ``vanilla``: PyTensor alone (``mode.excluding("innergraph")``);
* ``pipeline``: the default mode with innergraph (lift, rewrite, lower);
* ``in_graph``: the in-graph Scan built by `innergraph.scan`, run by the consumer
  itself (lifting and lowering excluded), which delegates to PyTensor's runtime.

The whole trace is returned, so PyTensor's save-memory rewrite (which only the
native Scan gets, during the pipeline) does not change the work per step.
Target (issue 3): every ratio to vanilla within noise (<= 1.05).
"""

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.compile.mode import Mode

import innergraph

STEPS = 10_000
LINKERS = ["numba", "cvm", "py"]
VARIANTS = ["vanilla", "pipeline", "in_graph"]


def build(scan):
    x0 = pt.dscalar("x0")
    ys = scan(lambda y: y + 1, outputs_info=[x0], n_steps=STEPS, return_updates=False)
    return [x0], ys  # the whole trace: no save-memory rewrite changes the work per step


@pytest.fixture(scope="module")
def compiled():
    fns = {}
    for linker in LINKERS:
        mode = Mode(linker=linker, optimizer="fast_run")
        fns[(linker, "vanilla")] = pytensor.function(*build(pytensor.scan), mode=mode.excluding("innergraph"))
        fns[(linker, "pipeline")] = pytensor.function(*build(pytensor.scan), mode=mode)
        fns[(linker, "in_graph")] = pytensor.function(*build(innergraph.scan), mode=mode.excluding("innergraph"))
    return fns


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("linker", LINKERS)
def test_trivial_scan_per_step(benchmark, compiled, linker, variant):
    fn = compiled[(linker, variant)]
    benchmark.group = f"scan 10k steps, {linker}"
    benchmark.extra_info["variant"] = variant
    result = benchmark(fn, np.float64(0.5))
    assert result[-1] == 0.5 + STEPS and len(result) == STEPS
