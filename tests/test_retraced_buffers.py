"""A retraced untraced state (PyTensor's own Scan runtime) over a constant start is one ``Alloc``.

Lowering for the py/cvm/c runtimes traces untraced states again
(`innergraph.ops.scan.retraced_outputs`). A gradient's accumulator starts from a
constant zero; its buffer was ``set_subtensor(empty(n + 1)[:1], [0])`` (two
nodes), vanilla's is ``alloc(0, n + 1)`` (one): the GARCH gradient under cvm had
40 nodes against vanilla's 38.
"""

import numpy as np
import pytensor
import pytest
from pytensor.compile.mode import Mode
from pytensor.tensor.basic import AllocEmpty

from innergraph.cases import garch


@pytest.fixture(scope="module", params=["cvm", "py"])
def compiled(request):
    case = garch(200)
    mode = Mode(linker=request.param, optimizer="fast_run")
    fns = [pytensor.function(*case.build("innergraph"), mode=m) for m in (mode, mode.excluding("innergraph"))]
    return case, *fns


def test_garch_gradient_has_no_more_nodes_than_vanilla(compiled):
    _, ours, vanilla = compiled
    assert len(ours.maker.fgraph.apply_nodes) <= len(vanilla.maker.fgraph.apply_nodes)
    assert not [n for n in ours.maker.fgraph.apply_nodes if isinstance(n.op, AllocEmpty) and len(n.inputs) == 1 and _feeds_a_constant_row(ours, n)]


def _feeds_a_constant_row(fn, node):
    """Whether the ``AllocEmpty`` only receives a constant first row (the form this rule replaces)."""
    from pytensor.graph.basic import Constant

    clients = fn.maker.fgraph.clients[node.outputs[0]]
    return all(type(c.op).__name__ == "IncSubtensor" and isinstance(c.inputs[1], Constant) for c, _ in clients)


def test_garch_gradient_values_equal_vanilla(compiled):
    case, ours, vanilla = compiled
    for got, want in zip(ours(*case.values), vanilla(*case.values), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-12)
