"""Edge cases of `call`: aliasing, no params, repeated outputs, integer arguments."""

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.compile.mode import Mode

from innergraph import inner_graph
from typed import call

LINKERS = ["py", "cvm", "numba"]


@pytest.fixture(scope="module", params=LINKERS)
def linker(request):
    return request.param


def test_identity_body_does_not_alias_its_argument(linker):
    x = pt.dvector("x")
    fn = pytensor.function([x], call(lambda u: u, x), mode=Mode(linker=linker, optimizer="fast_run"))
    xv = np.array([1.0, 2.0])
    out = fn(xv)
    out[0] = 99.0
    assert xv[0] == 1.0


def test_body_without_params(linker):
    f = inner_graph(lambda: pt.arange(3) * 2, [])
    fn = pytensor.function([], call(f), mode=Mode(linker=linker, optimizer="fast_run"))
    np.testing.assert_array_equal(fn(), [0, 2, 4])


def test_repeated_and_integer_outputs(linker):
    n = pt.lscalar("n")
    x = pt.dvector("x")
    a, b, c = call(lambda k, u: [u[:k], u[:k], k * 2], n, x)
    fn = pytensor.function([n, x], [a, b, c], mode=Mode(linker=linker, optimizer="fast_run"))
    ra, rb, rc = fn(2, np.arange(4.0))
    np.testing.assert_array_equal(ra, [0.0, 1.0])
    np.testing.assert_array_equal(rb, [0.0, 1.0])
    assert rc == 4
