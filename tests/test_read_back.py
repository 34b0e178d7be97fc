"""Reading back a written region (`innergraph.rewriting.read_back`), called directly on one node.

PyTensor 3.3's own ``local_read_of_write_same_indices`` (canonicalize too) rewrites the
same reads in a compiled function before innergraph's rewrite reaches them, so a compiled
function cannot tell whether innergraph's rewrite is right (its mutants all survived
``tests/test_checkpoint.py``'s compiled test): these tests call it on a FunctionGraph of
the read and compare the replacement with the graph it should be, then its values with
NumPy's.
"""

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.graph.basic import equal_computations
from pytensor.graph.fg import FunctionGraph
from pytensor.graph.rewriting.basic import MergeOptimizer
from pytensor.graph.traversal import explicit_graph_inputs
from pytensor.tensor.rewriting.shape import ShapeFeature

import innergraph
from innergraph.rewriting.read_back import local_read_of_written_region

a, b = pt.vector("a"), pt.vector("b")
i = pt.lscalar("i")


def _rewrite(read, shapes=False):
    """The rewrite's answer on ``read``'s node, in a merged FunctionGraph of ``read`` (as in a
    compilation: the write's and the read's ``ScalarFromTensor(i)`` are one node)."""
    fgraph = FunctionGraph(list(explicit_graph_inputs([read])), [read], clone=False, features=[ShapeFeature()] if shapes else [])
    MergeOptimizer().rewrite(fgraph)
    return local_read_of_written_region.transform(fgraph, fgraph.outputs[0].owner)


def _value(var, inputs, values):
    return pytensor.function(inputs, var, mode="FAST_COMPILE")(*values)


def test_a_set_region_read_back_is_the_value_broadcast_to_the_region():
    read = pt.set_subtensor(a[:i], b)[:i]
    (out,) = _rewrite(read)
    assert equal_computations([out], [pt.broadcast_to(b, read.shape)])
    np.testing.assert_array_equal(_value(out, [a, b, i], [np.arange(4.0), [5.0, 7.0], 2]), [5.0, 7.0])


def test_a_region_of_the_value_s_own_shape_reads_back_the_value_itself():
    """With the shape feature proving the shapes equal (static shapes here), no broadcast."""
    full, region = pt.tensor("full", shape=(5,)), pt.tensor("region", shape=(2,))
    read = pt.set_subtensor(full[1:3], region)[1:3]
    assert _rewrite(read, shapes=True) == [region]
    (out,) = _rewrite(read)  # no shape feature: the broadcast stays
    assert equal_computations([out], [pt.broadcast_to(region, read.shape)])


def test_a_value_of_another_dtype_is_cast_to_the_buffer_s():
    for value in (pt.ivector("ints"), pt.fvector("floats")):
        read = pt.set_subtensor(a[:i], value)[:i]
        (out,) = _rewrite(read)
        assert out.type.dtype == "float64"
        assert equal_computations([out], [pt.broadcast_to(pt.cast(value, "float64"), read.shape)])
        got = _value(out, [a, value, i], [np.arange(4.0), np.array([5, 7], dtype=value.type.dtype), 2])
        assert got.dtype == np.float64
        np.testing.assert_array_equal(got, [5.0, 7.0])


@pytest.mark.parametrize("fill", [0.0, 1.0, -1.0])
def test_only_an_increment_of_zeros_is_read_back(fill):
    buffer = pt.full((a.shape[0] + 5,), fill, dtype="float64")
    read = pt.inc_subtensor(buffer[1:i], b)[1:i]
    got = _rewrite(read)
    if fill:
        assert got is None
        return
    (out,) = got
    assert equal_computations([out], [pt.broadcast_to(b, read.shape)])
    np.testing.assert_array_equal(_value(out, [a, b, i], [np.arange(2.0), [5.0, 7.0], 3]), [5.0, 7.0])


def test_reads_it_leaves():
    """An increment of a non-constant, a read of another region (other slices, another index),
    a read of no write, and everything while innergraph is uninstalled."""
    j = pt.lscalar("j")
    assert _rewrite(pt.inc_subtensor(a[:i], b)[:i]) is None
    assert _rewrite(pt.set_subtensor(a[:i], b)[1:i]) is None
    assert _rewrite(pt.set_subtensor(a[:i], b)[:j]) is None
    assert _rewrite(pt.set_subtensor(a[i:], b)[:i]) is None
    assert _rewrite(a[:i]) is None
    assert _rewrite((a * 2.0)[:i]) is None
    read = pt.set_subtensor(a[:i], b)[:i]
    assert _rewrite(read) is not None
    with innergraph.uninstalled():
        assert _rewrite(read) is None
