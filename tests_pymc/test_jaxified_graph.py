"""PyMC's ``get_jaxified_graph`` (``jax_funcify`` without a JAX linker) on pymc-extras' square-root Kalman filter.

pymc-extras 0.12.1's ``tests/statespace/filters/test_kalman_filter.py::test_kalman_filter_jax[cholesky]``
failed with innergraph only (on PyTensor 3.0.7): ``get_jaxified_graph`` rewrites the graph with the JAX mode
and calls ``jax_funcify`` itself, so the patched linker schedule never loaded innergraph's
JAX implementations, and the filter's lifted ``ifelse`` (the degenerate-step branch)
had no conversion (``NotImplementedError: No JAX conversion for the given Op:
IfElse{in-graph, lazy}``). Fixed by `innergraph.patching.on_import`. Here: the filter
and smoother as that test builds them (p=1, m=5, r=1, n=10, its inputs), converted by
vanilla PyTensor (inside ``innergraph.uninstalled()``, which also imports the JAX
dispatch before innergraph is reinstalled) and with innergraph; the values must agree.
"""

import numpy as np
import pytensor.tensor as pt

import innergraph


def _graph(p, m, r, n):
    from pymc_extras.statespace.filters import RTSSmoother, SquareRootFilter

    names = ("data", "x0", "P0", "c", "d", "T", "Z", "R", "H", "Q")
    shapes = ((n, p), (m,), (m, m), (m,), (p,), (m, m), (p, m), (m, r), (p, p), (r, r))
    inputs = [pt.tensor(name, dtype="float64", shape=shape) for name, shape in zip(names, shapes, strict=True)]
    data, a0, P0, c, d, T, Z, R, H, Q = inputs
    filter_outputs = SquareRootFilter().build_graph(*inputs)
    filtered, predicted, _, filtered_covs, predicted_covs, _, ll_obs = filter_outputs
    smoothed, smoothed_covs = RTSSmoother().build_graph(data, inputs[1:], filter_outputs)  # pymc-extras 0.15's smoother
    outputs = [filtered, predicted, smoothed, filtered_covs, predicted_covs, smoothed_covs, ll_obs.sum(), ll_obs]
    return inputs, outputs


def _values(p, m, r, n):
    T = np.eye(m, k=-1)
    T[0, :] = 1 / m
    return [
        np.arange(n * p, dtype="float64").reshape(-1, p),
        np.zeros(m),
        np.eye(m),
        np.zeros(m),
        np.zeros(p),
        T,
        np.eye(m)[:p, :].copy(),
        np.eye(m)[:, :r].copy(),
        np.eye(p),
        np.eye(r),
    ]


def test_square_root_filter_jaxified_equals_vanilla():
    from pymc.sampling.jax import get_jaxified_graph

    sizes = (1, 5, 1, 10)
    values = _values(*sizes)
    with innergraph.uninstalled():
        expected = get_jaxified_graph(*_graph(*sizes))(*values)
    got = get_jaxified_graph(*_graph(*sizes))(*values)
    assert len(got) == len(expected) == 8
    for ours, theirs in zip(got, expected, strict=True):
        np.testing.assert_allclose(np.asarray(ours), np.asarray(theirs), rtol=1e-10, atol=1e-12)
    assert np.isfinite(np.asarray(got[6])) and float(got[6]) < 0  # a log-likelihood was computed
