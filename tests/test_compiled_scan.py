"""A Scan PyTensor already compiled is left native.

``Scan.fn`` (what the VM linkers' thunks call) compiles a Scan's own inner
`FunctionGraph` and rewrites it in place, so a Scan that was part of an earlier
compilation can hold in-place Ops. PyMC reuses such a Scan (an AR's support point,
then ``model["x"].eval()``); lifting it made a body that the lowering could not
turn back into a Scan (``InconsistencyError: Inner-graphs must not contain in-place
operations``). Here the Scan's inner function is compiled (``Scan.fn``), and then
an in-place Op is put into its inner graph directly, as ``Scan.fn``'s rewrites do
to the inner graphs of PyMC's Scans.
"""

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.graph.traversal import ancestors
from pytensor.scan.op import Scan as NativeScan
from pytensor.tensor.elemwise import Elemwise

from innergraph.convert import _compiled_in_place


def _scan_rewritten_in_place():
    x0 = pt.dvector("x0")
    ys = pytensor.scan(lambda y: pt.sort(y) * 0.5 + 1.0, outputs_info=[x0], n_steps=3, return_updates=False)
    op = next(v.owner.op for v in ancestors([ys]) if v.owner and isinstance(v.owner.op, NativeScan))
    op.fn  # compiled and kept: a later compilation's VM thunk runs it, and does not rewrite the graph again
    mul = next(n for n in op.fgraph.apply_nodes if isinstance(n.op, Elemwise) and n.inputs[0].owner is not None)
    in_place = Elemwise(mul.op.scalar_op, {0: 0})(*mul.inputs)  # overwrites the sort's result
    op.fgraph.replace(mul.outputs[0], in_place, reason="what Scan.fn's in-place rewrite does")
    assert _compiled_in_place(op)
    return x0, ys


@pytest.mark.parametrize("linker", ["cvm", "numba", "py"])
def test_a_scan_whose_inner_graph_was_rewritten_in_place_compiles_and_gives_vanillas_numbers(linker):
    x0, ys = _scan_rewritten_in_place()
    mode = pytensor.compile.mode.Mode(linker=linker, optimizer="fast_run")
    value = np.array([0.3, -0.2, 0.1])
    expected = np.empty((3, 3))
    row = value
    for t in range(3):
        row = expected[t] = np.sort(row) * 0.5 + 1.0
    with pytensor.config.change_flags(on_opt_error="raise"):
        ours = pytensor.function([x0], ys, mode=mode)
        theirs = pytensor.function([x0], ys, mode=mode.excluding("innergraph"))
    np.testing.assert_allclose(ours(value), expected)
    np.testing.assert_array_equal(ours(value), theirs(value))
