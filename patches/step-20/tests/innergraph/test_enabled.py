"""With the last step, ``import pytensor`` enables innergraph: its rewrites run in every compilation.

Two OpFromGraphs built apart compile to calls of one body, where
``mode.excluding("innergraph")`` keeps PyTensor's two OpFromGraphs; the values agree.
"""

import numpy as np

import pytensor
import pytensor.tensor as pt
from pytensor.compile.builders import OpFromGraph
from pytensor.compile.mode import Mode
from pytensor.innergraph.core.hooks import installed
from pytensor.innergraph.ops.call import Call


PY = Mode(linker="py", optimizer="fast_run")


def student_t():
    v, nu = pt.dvector("v"), pt.dscalar("nu")
    return OpFromGraph([v, nu], [-(nu + 1) / 2 * pt.log1p(v**2 / nu), v**2])


def ops_of(fn):
    return [node.op for node in fn.maker.fgraph.toposort()]


def test_importing_pytensor_enables_innergraph():
    assert installed()


def test_opfromgraphs_built_apart_compile_to_one_body():
    x, y, nu = pt.dvector("x"), pt.dvector("y"), pt.dscalar("nu")
    outputs = [student_t()(x, nu)[0], student_t()(y, nu)[0]]
    fn = pytensor.function([x, y, nu], outputs, mode=PY)
    native = pytensor.function([x, y, nu], outputs, mode=PY.excluding("innergraph"))

    calls = [op for op in ops_of(fn) if isinstance(op, Call)]
    assert len(calls) == 2
    folded = {
        id(node.inputs[0].data)
        for node in fn.maker.fgraph.toposort()
        if isinstance(node.op, Call)
    }
    assert len(folded) == 1  # one body for both calls
    assert sum(isinstance(op, OpFromGraph) for op in ops_of(native)) == 2
    x_val, y_val = np.array([0.5, -1.0]), np.array([2.0, 0.0])
    for got, want in zip(fn(x_val, y_val, 3.0), native(x_val, y_val, 3.0), strict=True):
        np.testing.assert_allclose(got, want)
