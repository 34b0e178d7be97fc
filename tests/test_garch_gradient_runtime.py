"""The GARCH gradient on PyTensor's own Scan runtime (py, cvm): no more nodes than vanilla, vanilla's values.

A gradient's accumulator starts from a constant zero. On PyTensor 3.0, where
innergraph traced untraced states again for this runtime, its buffer once was
``set_subtensor(empty(n + 1)[:1], [0])`` (two nodes) where vanilla's is
``alloc(0, n + 1)`` (one): the GARCH gradient under cvm had 40 nodes against
vanilla's 38. Vanilla here is PyTensor with innergraph uninstalled.
"""

import numpy as np
import pytensor
import pytest
from pytensor.compile.mode import Mode
from pytensor.tensor.basic import AllocEmpty

import innergraph
from innergraph_bench.cases import garch


@pytest.fixture(scope="module", params=["cvm", "py"])
def compiled(request):
    case = garch(200)
    mode = Mode(linker=request.param, optimizer="fast_run")
    ours = pytensor.function(*case.build("innergraph"), mode=mode)
    with innergraph.uninstalled():
        vanilla = pytensor.function(*case.build("vanilla"), mode=mode)
    return case, ours, vanilla


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
