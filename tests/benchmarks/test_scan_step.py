"""Case 7: per-step cost of a trivial scan, ``x_t = x_{t-1} + 1`` over 10,000 steps.

Variants, compiled in the same run, for each linker (numba, cvm, py):

* ``vanilla``: PyTensor alone (built, compiled and first called with innergraph
  uninstalled, `innergraph_bench.bench.as_variant`);
* ``pipeline``: the default mode with innergraph (lift, rewrite, lower) — the
  ``innergraph`` variant of `innergraph_bench.cases.trivial_scan`;
* ``in_graph``: the in-graph Scan built by `innergraph.scan`, run by the consumer
  itself (innergraph installed, its rewrites excluded: no lifting, no lowering), which
  delegates to PyTensor's runtime.

The whole trace is returned, so PyTensor's save-memory rewrite (which only the
native Scan gets, during the pipeline) does not change the work per step.
Target (issue 3): every ratio to vanilla within noise (<= 1.05).
"""

import numpy as np
import pytensor
import pytest

import innergraph
from innergraph_bench.bench import as_variant, compile_case, mode_for
from innergraph_bench.cases import trivial_scan

pytestmark = pytest.mark.repository_tools  # run once, on the newest PyTensor (pyproject.toml's markers)

STEPS = 10_000
LINKERS = ["numba", "cvm", "py"]
VARIANTS = ["vanilla", "pipeline", "in_graph"]


@pytest.fixture(scope="module")
def compiled():
    fns = {}
    for linker in LINKERS:
        case, in_graph = trivial_scan(linker, STEPS), trivial_scan(linker, STEPS, scan=innergraph.scan)
        with as_variant("vanilla"):
            fns[(linker, "vanilla")] = compile_case(case, "vanilla")
            fns[(linker, "vanilla")](np.float64(0.5))  # Numba compiles at the first call
        fns[(linker, "pipeline")] = pytensor.function(*case.build("innergraph"), mode=mode_for(case, "innergraph"))
        rewrites_excluded = mode_for(case, "innergraph").excluding("innergraph")
        fns[(linker, "in_graph")] = pytensor.function(*in_graph.build("innergraph"), mode=rewrites_excluded)
    return fns


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("linker", LINKERS)
def test_trivial_scan_per_step(benchmark, compiled, linker, variant):
    fn = compiled[(linker, variant)]
    benchmark.group = f"scan 10k steps, {linker}"
    benchmark.extra_info["variant"] = variant
    (result,) = benchmark(fn, np.float64(0.5))
    assert result[-1] == 0.5 + STEPS and len(result) == STEPS
