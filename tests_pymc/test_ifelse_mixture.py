"""PyMC's logp of an ``ifelse`` mixture whose components have different lengths, under Numba.

PyMC derives the logp of ``ifelse(cond, Normal(size=2), HalfNormal(size=4))`` as an
``ifelse`` of the two components' logps, each with a ``SpecifyShape`` of the value.
PyTensor 3.0's Numba backend ran both branches of an IfElse, so vanilla's function raised
from the untaken branch's ``SpecifyShape`` (PyMC issue #8036), and innergraph lifted the
conditional into its lazy IfElse. PyTensor 3.3.6 makes the conditional lazy under Numba
itself (``LazyIfElse``), and innergraph leaves it to PyTensor: with and without
innergraph, only the taken branch runs and the logp is the one PyMC intends (scipy's
densities), under PyMC's tests' ``on_opt_error="raise"``.
"""

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
import scipy.stats as st
from pytensor.compile.mode import Mode
from pytensor.conditional.op import LazyIfElse, ifelse

import innergraph

SCALE = 0.75


def _logp_function(mode):
    from pymc.logprob.basic import conditional_logp

    if_rv = pt.random.bernoulli(0.5, name="if")
    scale_rv = pt.random.halfnormal(name="scale")
    mix_rv = ifelse(if_rv, pt.random.normal(0, scale_rv, size=(2,)), pt.random.halfnormal(0, scale_rv, size=(4,)))
    values = [if_rv.clone(), scale_rv.clone(), mix_rv.clone()]
    logp = conditional_logp(dict(zip([if_rv, scale_rv, mix_rv], values, strict=True)))[values[2]]
    with pytensor.config.change_flags(on_opt_error="raise"):
        return pytensor.function(values, logp, mode=mode)


@pytest.fixture(scope="module")
def functions():
    mode = Mode(linker="numba", optimizer="fast_run")
    ours = _logp_function(mode)
    with innergraph.uninstalled():  # vanilla: built, compiled and first called (Numba compiles then) without innergraph
        vanilla = _logp_function(mode)
        vanilla(1, SCALE, np.array([1.0, 2.5]))
    return ours, vanilla


@pytest.mark.parametrize("variant", ["innergraph", "vanilla"])
def test_the_taken_branchs_logp_as_pymc_intends(functions, variant):
    fn = functions[0 if variant == "innergraph" else 1]
    assert any(isinstance(n.op, LazyIfElse) for n in fn.maker.fgraph.apply_nodes)  # PyTensor's own lazy conditional
    short, long = np.array([1.0, 2.5]), np.array([1.0, 2.5, 3.5, 4.0])
    np.testing.assert_allclose(fn(1, SCALE, short), st.norm(0, SCALE).logpdf(short), rtol=1e-12)
    np.testing.assert_allclose(fn(0, SCALE, long), st.halfnorm(0, SCALE).logpdf(long), rtol=1e-12)
