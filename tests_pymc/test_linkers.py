"""innergraph with PyMC off the default path: the JAX linker, and PyMC's parameter checks inside a scan.

* The NUTS functions of the GARCH models of `innergraph_bench.pymc_models`, compiled for JAX
  (the linker PyMC's ``nuts_sampler="numpyro"``/``"blackjax"`` use), give vanilla's numbers.
* PyMC compiles logp graphs with ``local_check_parameter_to_ninf_switch``: a parameter
  check (``CheckParameterValue``) becomes ``switch(cond, logp, -inf)``. Vanilla applies it
  to the outer graph only, so a check inside a Scan body still raises
  ``ParameterValueError`` (PyMC issue #6697, open: "CheckParameterValues not replaced in
  inner graphs"). With innergraph the body is part of the graph and PyMC's rewrite reaches
  it: the logp is -inf, as PyMC gives outside a scan. The one documented place where
  innergraph's result differs from vanilla's (design/benchmarks.md, "PyMC's parameter
  checks inside a scan"); at valid points the values are equal.
"""

import warnings

import numpy as np
import pytest
from pytensor.compile.mode import Mode

import innergraph
from innergraph_bench.bench import as_variant
from innergraph_bench.pymc_models import MODELS, nuts_graph


def _compiled(graph, mode):
    from pymc.pytensorf import compile as pymc_compile

    (inputs, outputs) = graph
    return pymc_compile(inputs, outputs, mode=mode)


#: The two GARCH models (about 20 s each). The three Kalman-filter models agree too
#: (measured, design/benchmarks.md) but take 100-150 s each to trace under JAX: not in CI.
JAX_CASES = ["pymc-garch-potential", "pymc-garch-customdist"]


@pytest.mark.parametrize("case_id", JAX_CASES)
def test_nuts_function_under_jax_gives_vanillas_numbers(case_id):
    _, build = MODELS[case_id]
    mode = Mode(linker="jax", optimizer="fast_run")
    results = []
    for variant in ("vanilla", "innergraph"):  # vanilla: model built, compiled and run with innergraph uninstalled
        with as_variant(variant), warnings.catch_warnings():
            warnings.filterwarnings("ignore", "Skipping Check", UserWarning)  # JAX drops asserts, both variants
            graph, point = nuts_graph(build())
            fn = _compiled(graph, mode)
            results.append([[np.asarray(v) for v in fn(p)] for p in (point, 0.9 * point)])
    for vanilla, ours in zip(*results, strict=True):
        for a, b in zip(vanilla, ours, strict=True):
            np.testing.assert_allclose(b, a, rtol=1e-8, atol=1e-12)


def _scan_with_a_checked_sigma():
    """``y_t ~ Normal(0.5 y_{t-1}, s)`` by scan in a CustomDist; ``s`` has an unbounded prior."""
    import pymc as pm
    import pytensor
    import pytensor.tensor as pt
    from pymc.pytensorf import collect_default_updates

    def step(prev, s):
        x = pm.Normal.dist(mu=0.5 * prev, sigma=s)
        return x, collect_default_updates([x])

    def dist(s, size):
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "Scan return signature will change", DeprecationWarning)
            xs, _ = pytensor.scan(step, outputs_info=[pt.zeros(())], non_sequences=[s], n_steps=10, strict=True, return_updates=True)
        return xs

    with pm.Model() as model:
        s = pm.Normal("s", 1.0, 1.0)
        pm.CustomDist("y", s, dist=dist, observed=np.linspace(-1.0, 1.0, 10))
    return model


def test_a_parameter_check_inside_a_scan_gives_minus_inf_as_pymc_intends():
    """PyMC turns a parameter check into ``-inf`` (its rewrite in ``canonicalize``). On PyTensor 3.0 it did not
    reach a Scan's inner graph in vanilla (pymc-devs/pymc#6697: vanilla raised ``ParameterValueError``) but
    did with innergraph; PyTensor 3.3 rewrites a Scan's inner graph with the compiled mode, so both agree."""
    mode = Mode(linker="numba", optimizer="fast_run")
    vanilla_model, our_model = _scan_with_a_checked_sigma(), _scan_with_a_checked_sigma()
    with innergraph.uninstalled():
        vanilla = _compiled((vanilla_model.value_vars, [vanilla_model.logp()]), mode)
        at_invalid = vanilla(-1.0)[0]
    ours = _compiled((our_model.value_vars, [our_model.logp()]), mode)
    np.testing.assert_allclose(ours(1.3)[0], vanilla(1.3)[0], rtol=1e-12)
    assert ours(-1.0)[0] == at_invalid == -np.inf
