"""Outer-graph rewrites for what gradients of loops leave around them, called directly (issue 47).

`innergraph.rewriting.outer` rewrites outer graphs: a wrong rewrite gives wrong numbers.
Its end-to-end tests (``tests/test_fill_read_by_consumers.py``, ``tests/test_until_while.py``)
compile loops and run whole rewrite databases; these call the module's functions on small
FunctionGraphs that are never rewritten further: each node rewriter's replacement
(compared with NumPy's indexing by the py linker, and structurally: the index, its dtype,
the op), each form it must refuse (None), and the helpers they share (`first_row`,
`rows_of`, the constant slices, lengths and shapes), so that a fault planted in the module
fails here in about a second.
"""

from typing import Any

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.compile.mode import Mode
from pytensor.graph.basic import Constant, Variable, equal_computations
from pytensor.graph.fg import FunctionGraph
from pytensor.tensor.elemwise import DimShuffle
from pytensor.tensor.rewriting.shape import ShapeFeature
from pytensor.tensor.subtensor import IncSubtensor, Subtensor

import innergraph
from consumer_nodes import call_node
from typed import param
from innergraph.rewriting.outer import (
    _constant_length,
    _constant_shape,
    _constant_slices,
    _proved_dim,
    _single_slice,
    _under_expand_dims,
    first_row,
    local_fill_read_by_consumers,
    local_merge_slices_of_known_length,
    local_set_row_of_expand_dims,
    local_sum_of_one_row,
    rows_of,
)

# PyTensor's constructors, typed Any: mypy reads them as returning ``Variable | None``
dmatrix: Any = pt.dmatrix
dvector: Any = pt.dvector
dscalar: Any = pt.dscalar
lscalar: Any = pt.lscalar
lvector: Any = pt.lvector
tensor: Any = pt.tensor

PY = Mode(linker="py", optimizer=None)  # type: ignore[arg-type]  # Mode takes None (no rewriting); its annotation leaves None out

X10 = np.arange(10.0) * 1.5 - 4.0
M53 = np.arange(15.0).reshape(5, 3) ** 1.5


def _graph(inputs: list[Any], outputs: list[Any], shapes: bool = True) -> FunctionGraph:
    """A FunctionGraph of the variables themselves (not clones), with a shape feature unless not ``shapes``."""
    return FunctionGraph(inputs, outputs, clone=False, features=[ShapeFeature()] if shapes else [])


def _values(inputs: list[Any], outputs: list[Any], values: list[Any]) -> list[np.ndarray]:
    fn = pytensor.function(inputs, outputs, mode=PY, on_unused_input="ignore")
    return [np.asarray(v) for v in fn(*values)]


def _rewrite(rewriter: Any, inputs: list[Any], out: Any, shapes: bool = True) -> Any:
    """What ``rewriter`` returns for ``out``'s node, in a graph of ``inputs`` and ``out``."""
    fgraph = _graph(inputs, [out], shapes)
    return rewriter.transform(fgraph, out.owner)


class _RootLengths:
    """A shape feature that proves the length of the given roots only (as when a slice's shape expression does not fold)."""

    def __init__(self, lengths: dict[Any, int]):
        self.lengths = lengths

    def get_shape(self, x: Any, i: int) -> Any:
        return pt.constant(self.lengths[x]) if x in self.lengths else lscalar()


# -- the helpers ------------------------------------------------------------------------


def test_constant_slices_reads_subtensors_and_inc_subtensors():
    """`_constant_slices`: the indices of a Subtensor and of an IncSubtensor (after its written value), folded constants too, None for a symbolic index."""
    x, v, n = dmatrix("x"), dvector("v"), lscalar("n")
    assert _constant_slices(x[1:4:2, 0].owner) == [slice(1, 4, 2), 0]
    assert _constant_slices(pt.set_subtensor(x[2:3], v[None]).owner) == [slice(2, 3, None)]
    assert _constant_slices(pt.inc_subtensor(x[1, 2:], v[1:]).owner) == [1, slice(2, None, None)]
    assert _constant_slices(x[pt.constant(1) + 1 :].owner) == [slice(2, None, None)]  # not a Constant, folded
    assert _constant_slices(x[n:].owner) is None
    assert _constant_slices(pt.set_subtensor(x[n], v).owner) is None


def test_single_slice_is_one_slice_and_nothing_else():
    x, v = dmatrix("x"), dvector("v")
    assert _single_slice(x[1:3].owner) == slice(1, 3, None)
    assert _single_slice(pt.set_subtensor(x[::-1], v[None]).owner) == slice(None, None, -1)
    assert _single_slice(x[1].owner) is None
    assert _single_slice(x[()].owner) is None  # no index at all
    assert _single_slice(x[1:3, 0:1].owner) is None
    assert _single_slice(x[lscalar("n") :].owner) is None


def test_under_expand_dims_is_v_of_v_none_only():
    v, s, m = dvector("v"), dscalar("s"), dmatrix("m")
    assert _under_expand_dims(v) is None
    assert _under_expand_dims(v + 1) is None
    assert _under_expand_dims(v[:, None]) is None
    assert _under_expand_dims(m.T) is None
    assert _under_expand_dims(m[None, None]) is None
    assert isinstance(v[None, None].owner.op, DimShuffle)
    assert _under_expand_dims(v[None, None]) is None
    assert _under_expand_dims(m[:, None]) is None
    for value in (v, s, m):
        assert _under_expand_dims(value[None]) is value


def test_rows_of_a_variable_is_its_subtensor():
    x = dmatrix("x")
    row, rows = rows_of(x, 2), rows_of(x, slice(None, None, -1))
    assert equal_computations([row, rows], [x[2], x[::-1]])
    got_row, got_rows = _values([x], [row, rows], [M53])
    np.testing.assert_array_equal(got_row, M53[2])
    np.testing.assert_array_equal(got_rows, M53[::-1])


@pytest.mark.parametrize("index", [0, 3, -1, slice(None, None, -2), slice(1, 3)])
def test_rows_of_a_constant_is_a_contiguous_constant(index):
    buffer = pt.constant(M53)
    result = rows_of(buffer, index)
    assert isinstance(result, Constant)
    assert result.type == buffer[index].type
    np.testing.assert_array_equal(result.data, M53[index])
    assert result.data.flags.c_contiguous


def test_first_row_reads_what_a_set_subtensor_wrote():
    """`first_row`: ``v`` for ``set(x[0], v)`` and ``set(x[:k], v[None])`` (k >= 1 or none), row 0 of a written constant; ``x[0]`` otherwise."""
    x, v, n = dmatrix("x"), dvector("v"), lscalar("n")
    for written in [
        pt.set_subtensor(x[0], v),
        pt.set_subtensor(x[:1], v[None]),
        pt.set_subtensor(x[0:3], v[None]),
        pt.set_subtensor(x[0::1], v[None]),
        pt.set_subtensor(x[:], v[None]),
    ]:
        assert first_row(written) is v, written
    others: list[Any] = [
        pt.set_subtensor(x[1], v),
        pt.set_subtensor(x[-1], v),
        pt.inc_subtensor(x[0], v),
        pt.inc_subtensor(x[:1], v[None]),
        pt.set_subtensor(x[1:2], v[None]),
        pt.set_subtensor(x[:0], v[None]),  # an empty slice: a shape error when it runs
        pt.set_subtensor(x[0:2:2], v[None]),
        pt.set_subtensor(x[n:], v[None]),
        pt.set_subtensor(x[:1, 0], v[:1]),
        pt.set_subtensor(x[:2], dmatrix("y")),
        pt.set_subtensor(x[()], dmatrix("y")),  # no index at all
        x + 1,
        x,
    ]
    for other in others:
        read = first_row(other)
        assert equal_computations([read], [other[0]]), other


def test_first_row_of_a_written_constant():
    x = dmatrix("x")
    rows = np.array([[1.0, 2.0], [3.0, 4.0]])
    read: Any = first_row(pt.set_subtensor(x[:2], rows))
    assert isinstance(read, Constant) and read.type.dtype == "float64"
    np.testing.assert_array_equal(read.data, rows[0])
    one: Any = first_row(pt.set_subtensor(x[:1], np.array([[5.0, 6.0]])))
    np.testing.assert_array_equal(one.data, [5.0, 6.0])
    y = dvector("y")
    scalar_row: Any = first_row(pt.set_subtensor(y[:2], np.array([7.0, 8.0])))  # a vector buffer: its rows are scalars
    assert isinstance(scalar_row, Constant) and scalar_row.type.ndim == 0 and scalar_row.data == 7.0
    broadcast: Any = pt.set_subtensor(y[:2], 3.0)  # a scalar written: no row 0 to take
    assert equal_computations([first_row(broadcast)], [broadcast[0]])
    assert first_row(pt.set_subtensor(x[1:3], rows)).owner is not None
    no_rows: Any = pt.set_subtensor(x[:2], np.zeros((0, 3)))  # no row 0 to take (a shape error when it runs)
    assert equal_computations([first_row(no_rows)], [no_rows[0]])
    empty_row: Any = first_row(pt.set_subtensor(x[:2], np.zeros((2, 0))))  # rows of no columns
    assert isinstance(empty_row, Constant) and empty_row.data.shape == (0,)


def test_first_row_keeps_the_buffer_when_the_write_casts():
    """A write casts ``v`` to the buffer's row type; ``v`` is returned only when it has that type or a more specific shape."""
    x = dmatrix("x")
    iv = lvector("iv")
    written: Any = pt.set_subtensor(x[0], iv)
    assert equal_computations([first_row(written)], [written[0]])
    fixed = tensor("fixed", shape=(None, 3), dtype="float64")
    loose, one, three = dvector("loose"), tensor("one", shape=(1,), dtype="float64"), tensor("three", shape=(3,), dtype="float64")
    for buffer, value in [
        (fixed, three),
        (fixed, loose),  # row type (3,), written (None,): the same class
        (x, one),  # row type (None,), written (1,): more specific
    ]:
        assert first_row(pt.set_subtensor(buffer[0], value)) is value
    assert first_row(pt.set_subtensor(x[0:1], one[None])) is one


# -- local_set_row_of_expand_dims ---------------------------------------------------------


@pytest.mark.parametrize("start", [0, 2, 4])
@pytest.mark.parametrize("write", ["set", "inc"])
def test_set_row_of_expand_dims_writes_the_row(write, start):
    x, v = dmatrix("x"), dvector("v")
    written = (pt.set_subtensor if write == "set" else pt.inc_subtensor)(x[start : start + 1], v[None])
    (out,) = _rewrite(local_set_row_of_expand_dims, [x, v], written)
    assert isinstance(out.owner.op, IncSubtensor) and out.owner.op.set_instead_of_inc == (write == "set")
    (index_type,) = out.owner.op.idx_list
    assert not isinstance(index_type, slice)
    xx, vv, index = out.owner.inputs
    assert xx is x and vv is v
    assert isinstance(index, Constant) and index.data == start and index.type.dtype == "uint8"
    vv_data = np.array([10.0, 20.0, 30.0])
    expected = M53.copy()
    if write == "set":
        expected[start] = vv_data
    else:
        expected[start] += vv_data
    np.testing.assert_array_equal(_values([x, v], [out], [M53, vv_data])[0], expected)


def test_set_row_of_expand_dims_from_none_and_step_one():
    x, v = dmatrix("x"), dvector("v")
    for written in [pt.set_subtensor(x[:1], v[None]), pt.set_subtensor(x[0:1:1], v[None])]:
        (out,) = _rewrite(local_set_row_of_expand_dims, [x, v], written)
        assert out.owner.inputs[2].data == 0 and out.owner.inputs[1] is v


def test_set_row_of_expand_dims_writes_the_row_in_the_smallest_unsigned_dtype():
    x, v = dmatrix("x"), dvector("v")
    for start, dtype in [(255, "uint8"), (256, "uint16"), (70000, "uint32")]:
        (out,) = _rewrite(local_set_row_of_expand_dims, [x, v], pt.set_subtensor(x[start : start + 1], v[None]))
        assert out.owner.inputs[2].type.dtype == dtype and out.owner.inputs[2].data == start


def test_set_row_of_expand_dims_of_a_scalar_row():
    y, s = dvector("y"), dscalar("s")
    (out,) = _rewrite(local_set_row_of_expand_dims, [y, s], pt.set_subtensor(y[3:4], s[None]))
    np.testing.assert_array_equal(_values([y, s], [out], [X10, 7.0])[0], np.where(np.arange(10) == 3, 7.0, X10))


def test_set_row_of_expand_dims_refuses_other_writes():
    x, v, m, n = dmatrix("x"), dvector("v"), dmatrix("m"), lscalar("n")
    for written in [
        pt.set_subtensor(x[0], v),  # a row already
        pt.set_subtensor(x[0:2], v[None]),  # two rows
        pt.set_subtensor(x[1:1], v[None]),  # none
        pt.set_subtensor(x[0:1:2], v[None]),
        pt.set_subtensor(x[1:0:-1], v[None]),
        pt.set_subtensor(x[-1:0], v[None]),  # empty, though the stop is the start plus one
        pt.set_subtensor(x[-2:-1], v[None]),
        pt.set_subtensor(x[n : n + 1], v[None]),
        pt.set_subtensor(x[0:1], m[:1]),  # not v[None]
        pt.set_subtensor(x[0:1], v[:, None].T),
        pt.set_subtensor(x[0:1, 0:1], v[None, :1]),
    ]:
        assert _rewrite(local_set_row_of_expand_dims, [x, v, m, n], written) is None, written


def test_set_row_of_expand_dims_leaves_an_inplace_write():
    x, v = dmatrix("x"), dvector("v")
    written = pt.set_subtensor(x[0:1], v[None])
    op = written.owner.op
    inplace = IncSubtensor(op.idx_list, inplace=True, set_instead_of_inc=True)(*written.owner.inputs)
    assert _rewrite(local_set_row_of_expand_dims, [x, v], inplace) is None


# -- local_sum_of_one_row -----------------------------------------------------------------


def test_sum_of_one_row_is_the_row():
    x = tensor("x", shape=(5, 3), dtype="float64")
    for sliced, row in [(x[2:3], 2), (x[-1:], 4), (x[:1], 0), (x[4:1:-3], 4), (x[-2:-5:-10], 3)]:
        out = _rewrite(local_sum_of_one_row, [x], sliced.sum(axis=0))
        assert equal_computations(out, [x[row]]), sliced
        np.testing.assert_array_equal(_values([x], out, [M53])[0], M53[row])
    reversed_rows = x[::-1]
    (out,) = _rewrite(local_sum_of_one_row, [x], reversed_rows[4:].sum(axis=0))  # row 4 of x[::-1]
    assert equal_computations([out], [reversed_rows[4]])
    np.testing.assert_array_equal(_values([x], [out], [M53])[0], M53[0])
    y = tensor("y", shape=(10,), dtype="float64")
    (out,) = _rewrite(local_sum_of_one_row, [y], y[7:8].sum())  # axis None over a vector
    assert equal_computations([out], [y[7]])


def test_sum_of_one_row_refuses_other_sums():
    x, y = tensor("x", shape=(5, 3), dtype="float64"), tensor("y", shape=(10,), dtype="float64")
    b, i32 = tensor("b", shape=(10,), dtype="int8"), tensor("i32", shape=(10,), dtype="int32")
    loose = dmatrix("loose")
    for total in [
        x[2:3].sum(),  # every entry
        x[2:3].sum(axis=1),
        x[2:4].sum(axis=0),
        x[5:].sum(axis=0),  # empty
        x[2].sum(axis=0),  # a row: not a slice
        x[2:3, 0:2].sum(axis=0),
        x.sum(axis=0),
        (x + 1).sum(axis=0),
        b[2:3].sum(),  # the sum upcasts ("int64" sorts before "int8")
        i32[2:3].sum(),  # and after "int32"
        loose[2:3].sum(axis=0),  # the length is unknown
        y[2:4].sum(),
    ]:
        assert _rewrite(local_sum_of_one_row, [x, y, b, i32, loose], total) is None, total
    assert _rewrite(local_sum_of_one_row, [y], y[2:3].sum(), shapes=False) is None


def test_sum_of_one_row_of_an_unknown_length_but_a_one_row_slice():
    loose = dmatrix("loose")
    assert _rewrite(local_sum_of_one_row, [loose], loose[2:3].sum(axis=0)) is None  # x[2:3] may be empty


# -- local_fill_read_by_consumers --------------------------------------------------------


def _call_of(argument: Any) -> Any:
    """A consumer reading ``argument``: the call of a body computing ``exp`` of its param."""
    return call_node([pt.exp(param(0, argument.type))], [argument]).outputs[0]


def _fill_read_by(consumers: str, value: Any = 1.0, x: Any = None) -> tuple[Any, Any, FunctionGraph]:
    """``second(x, value)`` read by a call (and an Elemwise with ``consumers == "both"``); its fgraph with a shape feature."""
    x = tensor("x", shape=(2, 3), dtype="float64") if x is None else x
    fill = pt.second(x, pt.constant(value))
    readers = [_call_of(fill)] if consumers in ("call", "both") else []
    if consumers in ("elemwise", "both"):
        readers.append(fill * 2.0)
    return x, fill, _graph([x], readers)


def test_fill_read_by_consumers_is_a_constant():
    x, fill, fgraph = _fill_read_by("call", np.array([[4.5]]))
    (out,) = local_fill_read_by_consumers.transform(fgraph, fill.owner)
    assert isinstance(out, Constant) and out.type == fill.type
    np.testing.assert_array_equal(out.data, np.full((2, 3), 4.5))
    x, fill, fgraph = _fill_read_by("call", np.array([[1, 2, 3]], dtype="int32"))  # a row broadcast down
    (out,) = local_fill_read_by_consumers.transform(fgraph, fill.owner)
    assert out.type == fill.type and out.data.dtype == np.int32
    np.testing.assert_array_equal(out.data, [[1, 2, 3], [1, 2, 3]])


def test_fill_read_by_consumers_refuses():
    _, fill, fgraph = _fill_read_by("both", np.array([[4.5]]))
    assert local_fill_read_by_consumers.transform(fgraph, fill.owner) is None  # an Elemwise reads it too
    _, fill, fgraph = _fill_read_by("elemwise", np.array([[4.5]]))
    assert local_fill_read_by_consumers.transform(fgraph, fill.owner) is None
    _, fill, fgraph = _fill_read_by("call", np.full((2, 3), 4.5))  # already of the fill's type: local_useless_fill's
    assert local_fill_read_by_consumers.transform(fgraph, fill.owner) is None
    _, fill, fgraph = _fill_read_by("call", np.array([[4.5]]), dmatrix("loose"))  # the shape is unknown
    assert local_fill_read_by_consumers.transform(fgraph, fill.owner) is None
    _, fill, fgraph = _fill_read_by("call", np.array([[4.5]]), tensor("partial", shape=(2, None), dtype="float64"))
    assert local_fill_read_by_consumers.transform(fgraph, fill.owner) is None
    x = tensor("x", shape=(2, 3), dtype="float64")
    c = dmatrix("c")
    fill = pt.second(x, c)  # not a constant
    fgraph = _graph([x, c], [_call_of(fill)])
    assert local_fill_read_by_consumers.transform(fgraph, fill.owner) is None
    x, fill, fgraph = _fill_read_by("call", np.array([[4.5]]))
    fgraph.add_output(fill)  # an output of the graph: not read by consumers only
    assert local_fill_read_by_consumers.transform(fgraph, fill.owner) is None


def test_constant_shape_and_proved_dim():
    x, half = tensor("x", shape=(2, 3), dtype="float64"), tensor("partial", shape=(None, 4), dtype="float64")
    fgraph = _graph([x, half], [x + 1, half + 1])
    assert _constant_shape(fgraph, x) == (2, 3)
    assert _constant_shape(fgraph, x[0]) == (3,)
    assert _constant_shape(fgraph, x.sum()) == ()
    assert _constant_shape(fgraph, half) is None
    assert _proved_dim(fgraph, half, 1) == 4 and _proved_dim(fgraph, half, 0) is None
    assert _proved_dim(_graph([x], [x + 1], shapes=False), x, 0) is None
    assert _constant_length(_graph([x], [x + 1], shapes=False), x) is None


# -- local_merge_slices_of_known_length ---------------------------------------------------


@pytest.mark.parametrize(
    "inner, outer",
    [
        (slice(None, None, -1), slice(None, 4)),
        (slice(3, -6, -1), slice(None, 4)),  # empty
        (slice(None, None, -1), slice(6, None)),  # down to row 0: no stop
        (slice(None, None, -1), slice(None, 9)),  # stop 0
        (slice(None, None, -1), slice(None, 10)),
        (slice(8, None, -1), slice(1, None)),
        (slice(9, 1, -2), slice(1, 3)),
        (slice(2, 8), slice(1, -1)),
        (slice(2, 8), slice(None, None, -1)),
        (slice(2, 8), slice(4, 0, -2)),
        (slice(-3, None), slice(-2, None)),
        (slice(1, None, 3), slice(None, None, -1)),
    ],
)
def test_merge_slices_of_known_length_is_numpys(inner, outer):
    y = tensor("y", shape=(10,), dtype="float64")
    sliced = y[inner][outer]
    out = _rewrite(local_merge_slices_of_known_length, [y], sliced)
    expected = X10[inner][outer]
    if not len(expected):
        assert out is None
        return
    (merged,) = out
    assert isinstance(merged.owner.op, Subtensor) and merged.owner.inputs[0] is y
    np.testing.assert_array_equal(_values([y], [merged], [X10])[0], expected)


def test_merge_slices_of_known_length_refuses():
    y, loose, x = tensor("y", shape=(10,), dtype="float64"), dvector("loose"), tensor("x", shape=(5, 3), dtype="float64")
    for sliced in [
        y[2:5],  # one slice
        (y + 1)[2:5],
        loose[::-1][:4],  # the length is unknown
        x[::-1][1],  # a row of a slice
        x[1][::-1],
        x[::-1][1:3, 0:2],
        x[::-1, 0:2][1:3],
    ]:
        assert _rewrite(local_merge_slices_of_known_length, [y, loose, x], sliced) is None, sliced
    assert _rewrite(local_merge_slices_of_known_length, [y], y[::-1][:4], shapes=False) is None


def test_merge_slices_of_a_matrix():
    x = tensor("x", shape=(5, 3), dtype="float64")
    (merged,) = _rewrite(local_merge_slices_of_known_length, [x], x[::-1][1:4])
    assert equal_computations([merged], [x[3:0:-1]])
    np.testing.assert_array_equal(_values([x], [merged], [M53])[0], M53[::-1][1:4])


def test_constant_length_through_slices_the_shape_feature_does_not_fold():
    """`_constant_length`: the shape feature's proof, else a constant first-axis slice of a proved length, recursively."""
    y, loose = tensor("y", shape=(10,), dtype="float64"), dvector("loose")
    x = dmatrix("x")
    fgraph = _graph([y, loose, x], [y + 1, loose + 1, x[0]], shapes=False)
    fgraph.shape_feature = _RootLengths({y: 10, x: 5})  # type: ignore[attr-defined]
    assert _constant_length(fgraph, y) == 10
    assert _constant_length(fgraph, y[2:5]) == 3
    assert _constant_length(fgraph, y[::-1][1:]) == 9
    assert _constant_length(fgraph, y[3:-6:-1]) == 0
    assert _constant_length(fgraph, y[1::3][::-1][:2]) == 2
    assert _constant_length(fgraph, x[1:, 0]) == 4
    assert _constant_length(fgraph, x[1]) is None  # a row: its length is another axis's
    assert _constant_length(fgraph, x[lscalar("n") :]) is None
    assert _constant_length(fgraph, loose[2:5]) is None
    assert _constant_length(fgraph, loose) is None
    assert _constant_length(fgraph, y + 1) is None


# -- uninstalled ------------------------------------------------------------------------


def test_uninstalled_the_canonicalize_and_specialize_rewrites_return_nothing():
    """Copies of canonicalize made while installed keep the rewrites: uninstalled, they change nothing."""
    x, y = tensor("x", shape=(5, 3), dtype="float64"), tensor("y", shape=(10,), dtype="float64")
    _, fill, fill_graph = _fill_read_by("call", np.array([[4.5]]))
    cases: list[tuple[Any, list[Variable], Any]] = [
        (local_sum_of_one_row, [x], x[2:3].sum(axis=0)),
        (local_merge_slices_of_known_length, [y], y[::-1][:4]),
    ]
    for rewriter, inputs, out in cases:
        assert _rewrite(rewriter, inputs, out) is not None
    assert local_fill_read_by_consumers.transform(fill_graph, fill.owner) is not None
    with innergraph.uninstalled():
        for rewriter, inputs, out in cases:
            assert _rewrite(rewriter, inputs, out) is None
        assert local_fill_read_by_consumers.transform(fill_graph, fill.owner) is None
