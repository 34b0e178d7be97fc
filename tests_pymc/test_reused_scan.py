"""PyMC's ``TestAR::test_support_point``: a Scan compiled once is reused by ``eval``.

The AR's Scan is compiled for the initial point (``Scan.fn`` rewrites its own inner
graph in place), then ``model["x"].eval()`` compiles a graph holding the same Scan.
With innergraph the second compilation raised ``InconsistencyError: Inner-graphs
must not contain in-place operations`` until compiled Scans were left native
(`innergraph.lifting.rules`; plain-PyTensor test: ``tests/test_compiled_scan.py``).
"""

import numpy as np
import pymc as pm
import pytensor
from pymc.initial_point import make_initial_point_fn

import innergraph


def _draws():
    with pm.Model() as model:
        init_dist = pm.DiracDelta.dist([[1.0, 2.0], [3.0, 4.0]])
        pm.AR("x", rho=[0, 0], init_dist=init_dist, steps=5)
    with pytensor.config.change_flags(on_opt_error="raise"):
        point = make_initial_point_fn(model=model, return_transformed=False, default_strategy="support_point")(0)
        return point["x"], model["x"].eval()


def test_ar_support_point_then_eval_gives_vanillas_values():
    """The support point equals vanilla's; the draw (random) starts from the Dirac initial values."""
    point, draw = _draws()
    with innergraph.uninstalled():
        vanilla_point, vanilla_draw = _draws()
    np.testing.assert_array_equal(point, vanilla_point)
    assert draw.shape == vanilla_draw.shape == (2, 7)
    np.testing.assert_array_equal(draw[:, :2], [[1.0, 2.0], [3.0, 4.0]])
    assert np.isfinite(draw).all()
