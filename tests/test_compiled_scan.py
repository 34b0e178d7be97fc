"""A Scan whose inner graph holds in-place Ops is left native.

PyTensor 3.3 bakes a Scan's inner graph for the backend in a compiled graph
(``scan_inner_graph``, 100: the backend's in-place decisions taken inside it) into a new,
frozen Op. On PyTensor 3.0 ``Scan.fn`` rewrote the Op's own inner graph in place, and
PyMC reused such a Scan (an AR's support point, then ``model["x"].eval()``); lifting
it made a body that the lowering could not turn back into a Scan
(``InconsistencyError: Inner-graphs must not contain in-place operations``). On 3.3 a
baked Op reaches a new graph only when one is built from a compiled function's nodes,
as here; it is left native there too (`innergraph.lifting.rules._compiled_in_place`).
"""

from copy import copy

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.compile.mode import Mode
from pytensor.scan.op import Scan as NativeScan

import innergraph
from innergraph.lifting.rules import _compiled_in_place


def _baked_scan_applied_anew():
    """A loop whose compiled inner graph overwrites an intermediate, its baked Op applied to a new graph's inputs.

    Numba's bake takes the in-place decision (``sort(y) * 0.5`` in place of the sort's result).
    """
    x0 = pt.dvector("x0")
    ys = pytensor.scan(lambda y: pt.sort(y) * 0.5 + 1.0, outputs_info=[x0], n_steps=3, return_updates=False)
    with innergraph.uninstalled():
        compiled = pytensor.function([x0], ys, mode=Mode(linker="numba", optimizer="fast_run"))
    (node,) = [n for n in compiled.maker.fgraph.apply_nodes if isinstance(n.op, NativeScan)]
    op = copy(node.op)  # the baked inner graph, without the outer in-place permission
    op.destroy_map, op._fn = {}, None
    assert _compiled_in_place(op)
    buffer = pt.zeros((4, x0.shape[0]), dtype="float64")
    buffer = pt.set_subtensor(buffer[0], x0)
    return x0, op(pt.constant(3, dtype="int64"), buffer)[1:]


@pytest.mark.parametrize("linker", ["cvm", "numba", "py"])
def test_a_scan_whose_inner_graph_holds_in_place_ops_compiles_and_gives_vanillas_numbers(linker):
    x0, ys = _baked_scan_applied_anew()
    mode = Mode(linker=linker, optimizer="fast_run")
    value = np.array([0.3, -0.2, 0.1])
    expected = np.empty((3, 3))
    row = value
    for t in range(3):
        row = expected[t] = np.sort(row) * 0.5 + 1.0
    with pytensor.config.change_flags(on_opt_error="raise"):
        ours = pytensor.function([x0], ys, mode=mode)
        with innergraph.uninstalled():
            theirs = pytensor.function([x0], ys, mode=mode)
    np.testing.assert_allclose(ours(value), expected)
    np.testing.assert_array_equal(ours(value), theirs(value))
    assert [n for n in ours.maker.fgraph.apply_nodes if isinstance(n.op, NativeScan)]
