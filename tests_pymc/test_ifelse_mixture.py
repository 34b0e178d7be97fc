"""PyMC's logp of an ``ifelse`` mixture whose components have different lengths, under Numba.

PyMC derives the logp of ``ifelse(cond, Normal(size=2), HalfNormal(size=4))`` as an
``ifelse`` of the two components' logps, each with a ``SpecifyShape`` of the value.
PyTensor's Numba backend runs both branches of an IfElse, so vanilla's function raises
from the untaken branch's ``SpecifyShape`` (PyMC issue #8036, open; PyMC 6.0.1's
``tests/logprob/test_mixture.py::test_ifelse_mixture_*`` are marked xfail under Numba
for it). innergraph lifts the conditional into its lazy IfElse, so only the taken
branch runs and the logp is the one PyMC intends (scipy's densities). innergraph's lift
used to raise ``BodyTypeError`` on these branches, whose static shapes differ
(``(2,)`` and ``(4,)``): PyMC's tests set ``on_opt_error="raise"``, which made the
compilation fail (design/benchmarks.md, "PyMC 6.0.1's own tests with innergraph").
"""

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
import scipy.stats as st
from pytensor.compile.mode import Mode
from pytensor.ifelse import ifelse

from innergraph.ops.ifelse import IfElse

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
    return _logp_function(mode), _logp_function(mode.excluding("innergraph"))


def test_the_taken_branchs_logp_as_pymc_intends(functions):
    ours, _ = functions
    assert any(isinstance(n.op, IfElse) for n in ours.maker.fgraph.apply_nodes)
    short, long = np.array([1.0, 2.5]), np.array([1.0, 2.5, 3.5, 4.0])
    np.testing.assert_allclose(ours(1, SCALE, short), st.norm(0, SCALE).logpdf(short), rtol=1e-12)
    np.testing.assert_allclose(ours(0, SCALE, long), st.halfnorm(0, SCALE).logpdf(long), rtol=1e-12)


def test_vanilla_numba_runs_the_untaken_branchs_shape_check(functions):
    _, vanilla = functions
    with pytest.raises(AssertionError, match="SpecifyShape"):
        vanilla(1, SCALE, np.array([1.0, 2.5]))
