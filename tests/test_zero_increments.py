"""`innergraph.rewriting.zero_increments`: increments of zeros that feed another increment.

Structural: the compiled graph holds one increment of the outer buffer at the composed
index, and nothing where the rewrite must not apply (an inner buffer read twice, one
that is not zeros, one whose shape is the region's only by broadcasting, a length not
proved constant, a ``set_subtensor`` into a non-zero buffer). Values: equal to vanilla
PyTensor's (innergraph uninstalled) under py, cvm, Numba and JAX, for every case.
"""

from typing import Any
import importlib.util

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.compile.mode import Mode, get_mode
from pytensor.graph.fg import FunctionGraph
from pytensor.graph.traversal import ancestors, explicit_graph_inputs
from pytensor.tensor.basic import Alloc
from pytensor.tensor.rewriting.shape import ShapeFeature
from pytensor.tensor.subtensor import IncSubtensor, inc_subtensor, set_subtensor
from pytensor.tensor.variable import TensorConstant

import innergraph
from innergraph.rewriting.zero_increments import compose_index, local_nested_zero_increments, local_one_hot_increment
from vanilla import vanilla_function

JAX = pytest.param("jax", marks=pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="jax is not installed"))
LINKERS = ["py", "cvm", "numba", JAX]


def _compiled(build: Any, mode: Any) -> Any:
    """``pytensor.function`` of ``build()``'s inputs and outputs, compiled with ``mode``."""
    inputs, outputs = build()
    return pytensor.function(inputs, outputs, mode=mode)


def _mode(linker):
    return get_mode(linker.upper()) if linker in ("numba", "jax") else Mode(linker=linker, optimizer="fast_run")


def _nested_vector():
    """#1669's buffer: a one-hot of length 4 at row -1 added into rows 1.. of zeros(5), times a value."""
    v = pt.dscalar("v")
    return [v], inc_subtensor(pt.zeros(5)[1:], inc_subtensor(pt.zeros(4)[-1], v))


def _nested_block():
    """A 2-row block of ``y`` into a (3, 4) zero region that is rows 1..3, column 2.. of ``x``."""
    x, y = pt.matrix("x", shape=(5, 6), dtype="float64"), pt.matrix("y", shape=(2, 4), dtype="float64")
    return [x, y], inc_subtensor(x[1:4, 2:], inc_subtensor(pt.zeros((3, 4))[1:], y))


def _nested_reversed_into_row():
    """An increment through a reversed slice and an integer axis: ``x[::-1, 1]`` gets a block of zeros(5)[1:3]."""
    x, y = pt.matrix("x", shape=(5, 3), dtype="float64"), pt.vector("y", shape=(2,), dtype="float64")
    return [x, y], inc_subtensor(x[::-1, 1], inc_subtensor(pt.zeros(5)[1:3], y))


def _set_into_zeros():
    v = pt.dscalar("v")
    return [v], set_subtensor(pt.zeros(6)[2:], inc_subtensor(pt.zeros(4)[-2], v))


def _one_hot_symbolic():
    """A one-hot at a symbolic row, added into rows 1.. of ``x``."""
    x, v, i = pt.vector("x", shape=(5,), dtype="float64"), pt.dscalar("v"), pt.lscalar("i")
    return [x, v, i], inc_subtensor(x[1:], inc_subtensor(pt.zeros(4)[i], v))


def _one_hot_reversed_matrix():
    """A one-hot at a symbolic (row, column) of a (4, 3) region: rows 4..1 (reversed) of ``x``."""
    x, v, i, j = pt.matrix("x", shape=(5, 3), dtype="float64"), pt.dscalar("v"), pt.lscalar("i"), pt.lscalar("j")
    return [x, v, i, j], inc_subtensor(x[:0:-1], set_subtensor(pt.zeros((4, 3))[i, j], v))


CASES: dict[str, tuple[Any, Any]] = {
    "nested_vector": (_nested_vector, [(2.5,)]),
    "nested_block": (_nested_block, [(np.arange(30.0).reshape(5, 6), np.arange(8.0).reshape(2, 4))]),
    "nested_reversed_into_row": (_nested_reversed_into_row, [(np.arange(15.0).reshape(5, 3), np.array([7.0, -1.0]))]),
    "set_into_zeros": (_set_into_zeros, [(1.5,)]),
    "one_hot_symbolic": (_one_hot_symbolic, [(np.arange(5.0), 2.0, i) for i in (-4, -1, 0, 2, 3)]),
    "one_hot_reversed_matrix": (_one_hot_reversed_matrix, [(np.arange(15.0).reshape(5, 3), 3.0, i, j) for i, j in ((0, 0), (3, 2), (-1, -3), (1, -1))]),
}


def _increments(fn):
    return [n for n in fn.maker.fgraph.apply_nodes if isinstance(n.op, IncSubtensor)]


def _allocs(fn):
    return len([n for n in fn.maker.fgraph.apply_nodes if isinstance(n.op, Alloc)])


def _nested(fn):
    return [n for n in _increments(fn) if n.inputs[1].owner is not None and isinstance(n.inputs[1].owner.op, IncSubtensor)]


@pytest.mark.parametrize("linker", LINKERS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_values_equal_vanilla(case, linker):
    build, values = CASES[case]
    ours = _compiled(build, mode=_mode(linker))
    vanilla = vanilla_function(build, _mode(linker))
    for args in values:
        np.testing.assert_array_equal(ours(*args), vanilla(*args))


@pytest.mark.parametrize("case", sorted(CASES))
def test_one_increment_of_the_outer_buffer(case):
    build, _ = CASES[case]
    fn = _compiled(build, mode=_mode("cvm"))
    vanilla = vanilla_function(build, _mode("cvm"))
    assert _nested(vanilla), "vanilla keeps the nested increments"
    assert not _nested(fn)
    assert len(_increments(fn)) == 1
    assert _allocs(fn) == _allocs(vanilla) - 1  # the inner buffer of zeros is not made
    if not case.startswith("one_hot"):  # a symbolic row is read from a constant vector of rows: a node or two
        assert len(fn.maker.fgraph.apply_nodes) < len(vanilla.maker.fgraph.apply_nodes)


def test_the_composed_index_of_1669s_buffer():
    """``inc(zeros(5)[1:], inc(zeros(4)[-1], v))`` is ``inc(zeros(5)[4], v)``."""
    fn = _compiled(_nested_vector, mode=_mode("py"))
    (node,) = _increments(fn)
    assert [int(i.data) for i in node.inputs[2:]] == [4] and node.op.idx_list == (node.op.idx_list[0],)
    np.testing.assert_array_equal(fn(2.5), [0, 0, 0, 0, 2.5])


def test_a_symbolic_one_hot_out_of_bounds_still_raises():
    fn = _compiled(_one_hot_symbolic, mode=_mode("py"))
    assert not _nested(fn)
    with pytest.raises(IndexError):
        fn(np.arange(5.0), 1.0, 4)
    with pytest.raises(IndexError):
        fn(np.arange(5.0), 1.0, -5)


def _inner_read_twice():
    v = pt.dscalar("v")
    one_hot = inc_subtensor(pt.zeros(4)[-1], v)
    return [v], [inc_subtensor(pt.zeros(5)[1:], one_hot), one_hot * 2]


def _inner_not_zeros():
    v, b = pt.dscalar("v"), pt.vector("b", shape=(4,), dtype="float64")
    return [v, b], inc_subtensor(pt.zeros(5)[1:], inc_subtensor(b[-1], v))


def _inner_broadcast():
    """A length-1 inner buffer broadcast over the region: adding it adds ``v`` to every row."""
    v = pt.dscalar("v")
    return [v], inc_subtensor(pt.zeros(5)[1:], inc_subtensor(pt.zeros(1)[0], v))


def _length_unknown():
    v, x = pt.dscalar("v"), pt.dvector("x")
    return [v, x], inc_subtensor(x[1:], inc_subtensor(pt.zeros(4)[-1], v))


def _set_into_non_zeros():
    v, x = pt.dscalar("v"), pt.vector("x", shape=(5,), dtype="float64")
    return [v, x], set_subtensor(x[1:], inc_subtensor(pt.zeros(4)[-1], v))


REFUSED = {
    "inner_read_twice": (_inner_read_twice, (1.5,)),
    "inner_not_zeros": (_inner_not_zeros, (1.5, np.arange(4.0))),
    "inner_broadcast": (_inner_broadcast, (1.5,)),
    "length_unknown": (_length_unknown, (1.5, np.arange(5.0))),
    "set_into_non_zeros": (_set_into_non_zeros, (1.5, np.arange(5.0))),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_refused_where_the_composition_would_change_the_value(case):
    build, args = REFUSED[case]
    fn = _compiled(build, mode=_mode("cvm"))
    vanilla = vanilla_function(build, _mode("cvm"))
    assert len(_nested(fn)) == len(_nested(vanilla)) == 1
    for ours, theirs in zip(fn(*args), vanilla(*args), strict=True):
        np.testing.assert_array_equal(ours, theirs)


def test_excluded_by_name():
    fn = _compiled(_nested_vector, mode=_mode("cvm").excluding("innergraph_nested_zero_increments"))
    assert len(_nested(fn)) == 1


# Direct calls of the two rewrites on a graph no other rewrite has touched (planted faults,
# issue 47: each test below fails on a mutant of the module that the compiled cases miss).


def _direct(out, rewrite, shapes=True):
    """``rewrite``'s answer on ``out``'s node, in a FunctionGraph of ``out`` (with the shape feature unless ``shapes`` is false)."""
    fgraph = FunctionGraph(list(explicit_graph_inputs([out])), [out], clone=False, features=[ShapeFeature()] if shapes else [])
    return rewrite.transform(fgraph, fgraph.outputs[0].owner)


def _one_increment(replacement, expected, values, inputs):
    """``replacement`` is one increment (no nested one) that computes ``expected`` on ``values``."""
    assert replacement is not None
    (new,) = replacement
    assert isinstance(new.owner.op, IncSubtensor) and not isinstance(new.owner.inputs[1].owner and new.owner.inputs[1].owner.op, IncSubtensor)
    fn = pytensor.function(inputs, new, mode=_mode("py"))
    np.testing.assert_array_equal(fn(*values), expected)


def test_an_index_that_folds_to_a_constant_is_composed():
    """``x[as_tensor(1):]``: the slice's start is ``ScalarFromTensor`` of a constant, not a constant, before canonicalize."""
    v, x = pt.dscalar("v"), pt.vector("x", shape=(5,), dtype="float64")
    out = inc_subtensor(x[pt.as_tensor(np.int64(1)) :], inc_subtensor(pt.zeros(4)[-1], v))
    _one_increment(_direct(out, local_nested_zero_increments), [0, 1, 2, 3, 6.5], (np.arange(5.0), 2.5), [x, v])


def test_a_length_the_shape_feature_proves_is_used_and_unknown_without_it():
    """``arange(5 + 0)``'s length is not in its type, but the shape feature proves it; without the feature it is unknown."""
    v = pt.dscalar("v")
    x = pt.arange(pt.as_tensor(np.int64(5)) + 0).astype("float64")
    assert x.type.shape == (None,)
    out = inc_subtensor(x[1:], inc_subtensor(pt.zeros(4)[-1], v))
    _one_increment(_direct(out, local_nested_zero_increments), [0, 1, 2, 3, 6.5], (2.5,), [v])
    assert _direct(out, local_nested_zero_increments, shapes=False) is None


def test_an_integer_axis_before_a_sliced_one():
    """``x[1, 1:]``: the composed index keeps the row and composes the columns (``x[1, 4]``), not the row alone."""
    v, x = pt.dscalar("v"), pt.matrix("x", shape=(3, 5), dtype="float64")
    out = inc_subtensor(x[1, 1:], inc_subtensor(pt.zeros(4)[-1], v))
    expected = np.zeros((3, 5))
    expected[1, 4] = 2.5
    _one_increment(_direct(out, local_nested_zero_increments), expected, (np.zeros((3, 5)), 2.5), [x, v])


def test_a_three_dimensional_buffer_indexed_on_its_first_axis():
    """An index of one entry on a 3-d buffer: the axes after it are whole."""
    x, y = pt.tensor("x", shape=(3, 2, 2), dtype="float64"), pt.matrix("y", shape=(2, 2), dtype="float64")
    out = inc_subtensor(x[1:], inc_subtensor(pt.zeros((2, 2, 2))[1], y))
    expected = np.zeros((3, 2, 2))
    expected[2] = [[1.0, 2.0], [3.0, 4.0]]
    _one_increment(_direct(out, local_nested_zero_increments), expected, (np.zeros((3, 2, 2)), [[1.0, 2.0], [3.0, 4.0]]), [x, y])


def test_a_reversed_region_down_to_the_first_row():
    """``x[::-1]``'s rows 1.. are rows 3, 2, 1, 0 of ``x``: the composed slice runs to the start (its stop is None, not -1)."""
    x, y = pt.vector("x", shape=(5,), dtype="float64"), pt.vector("y", shape=(4,), dtype="float64")
    out = inc_subtensor(x[::-1], inc_subtensor(pt.zeros(5)[1:], y))
    _one_increment(_direct(out, local_nested_zero_increments), [4, 3, 2, 1, 0], (np.zeros(5), [1.0, 2.0, 3.0, 4.0]), [x, y])
    out = inc_subtensor(x[4:0:-1], inc_subtensor(pt.zeros(4)[:], y))  # rows 4..1: a stop of 0 is kept
    _one_increment(_direct(out, local_nested_zero_increments), [0, 4, 3, 2, 1], (np.zeros(5), [1.0, 2.0, 3.0, 4.0]), [x, y])


def test_the_inner_index_at_the_bounds_of_the_region():
    """Row ``-4`` of a 4-row region is its first row (composed); rows ``-5`` and ``4`` are outside it (left: the original raises)."""
    v, x = pt.dscalar("v"), pt.vector("x", shape=(5,), dtype="float64")
    first = inc_subtensor(x[1:], inc_subtensor(pt.zeros(4)[-4], v))
    _one_increment(_direct(first, local_nested_zero_increments), [0, 3.5, 2, 3, 4], (np.arange(5.0), 2.5), [x, v])
    assert compose_index([slice(1, None)], [5], [-5]) is None
    assert compose_index([slice(1, None)], [5], [4]) is None and compose_index([slice(1, None)], [5], [5]) is None


@pytest.mark.parametrize("rewrite", [local_nested_zero_increments, local_one_hot_increment], ids=["nested", "one_hot"])
def test_refused_when_the_value_is_not_an_increment_of_zeros_or_one_index_is_symbolic(rewrite):
    v, x, i = pt.dscalar("v"), pt.vector("x", shape=(5,), dtype="float64"), pt.lscalar("i")
    assert _direct(inc_subtensor(x[1:], pt.exp(pt.zeros(4) + v)), rewrite) is None  # an Elemwise, not an increment
    in_place = IncSubtensor(inc_subtensor(pt.zeros(4)[-1], v).owner.op.idx_list, inplace=True)(pt.zeros(4), v, -1)
    assert _direct(inc_subtensor(x[1:], in_place), rewrite) is None  # an increment in place: its buffer may be shared
    assert _direct(inc_subtensor(x[i:], inc_subtensor(pt.zeros(4)[-1], v)), rewrite) is None  # the outer index is symbolic
    assert _direct(inc_subtensor(x[1:], pt.dvector("y")), rewrite) is None  # a value no node computes
    outer = inc_subtensor(x[1:], inc_subtensor(pt.zeros(4)[-1], v))
    outer_in_place = IncSubtensor(outer.owner.op.idx_list, inplace=True)(*outer.owner.inputs)
    assert _direct(outer_in_place, rewrite) is None  # the outer increment in place: left to the in-place pass
    with innergraph.uninstalled():
        assert _direct(outer, rewrite) is None  # uninstalled: vanilla's graph
    n = pt.lscalar("n")
    assert _direct(inc_subtensor(pt.dvector("w")[1:], inc_subtensor(pt.zeros(4)[-1], v)), rewrite) is None  # a length nothing proves
    assert _direct(inc_subtensor(x[1:], inc_subtensor(pt.zeros(n)[-1], v)), rewrite) is None  # zeros of a length nothing proves


def test_indices_compose_only_within_the_region():
    """An inner index longer than the region, or a region of unknown length, does not compose."""
    assert compose_index([1], [3, 5], [0, 0]) is None  # x[1] is one axis: two inner entries do not fit
    assert compose_index([slice(1, None)], [None], [0]) is None
    assert compose_index([1, slice(1, None)], [3, 5], [2]) == [1, 3]


def test_a_one_hot_over_a_whole_axis_keeps_its_symbolic_index():
    """Over a whole axis the composed index is the one-hot's own (no constant vector of rows to read it from)."""
    x, v, i = pt.vector("x", shape=(5,), dtype="float64"), pt.dscalar("v"), pt.lscalar("i")
    out = inc_subtensor(x[:], inc_subtensor(pt.zeros(5)[i], v))
    (new,) = _direct(out, local_one_hot_increment)
    assert not [c for c in ancestors([new]) if isinstance(c, TensorConstant) and c.ndim == 1]
    fn = pytensor.function([x, v, i], new, mode=_mode("py"))
    np.testing.assert_array_equal(fn(np.zeros(5), 2.0, -2), [0, 0, 0, 2.0, 0])


def test_a_one_hot_entry_that_folds_to_a_constant_composes_as_a_constant():
    """``zeros[i, as_tensor(1)]``: the column, a constant behind ``ScalarFromTensor``, is row 2 of ``x[:, 1:]``, not a read of a vector of rows."""
    x, v, i = pt.matrix("x", shape=(5, 4), dtype="float64"), pt.dscalar("v"), pt.lscalar("i")
    out = inc_subtensor(x[:, 1:], set_subtensor(pt.zeros((5, 3))[i, pt.as_tensor(np.int64(1))], v))
    (new,) = _direct(out, local_one_hot_increment)
    assert not [c for c in ancestors([new]) if isinstance(c, TensorConstant) and c.ndim == 1]
    expected = np.zeros((5, 4))
    expected[3, 2] = 2.0
    fn = pytensor.function([x, v, i], new, mode=_mode("py"))
    np.testing.assert_array_equal(fn(np.zeros((5, 4)), 2.0, 3), expected)


def test_a_one_hot_needs_an_integer_on_every_axis():
    """A row at a symbolic index (one entry on a matrix) or a slice among the entries is not a one-hot: left."""
    x, v, i = pt.matrix("x", shape=(5, 3), dtype="float64"), pt.dscalar("v"), pt.lscalar("i")
    row = pt.vector("row", shape=(3,), dtype="float64")
    assert _direct(inc_subtensor(x[1:], inc_subtensor(pt.zeros((4, 3))[i], row)), local_one_hot_increment) is None
    assert _direct(inc_subtensor(x[1:], set_subtensor(pt.zeros((4, 3))[i, 1:], v)), local_one_hot_increment) is None
    assert _direct(inc_subtensor(x[1:], inc_subtensor(pt.zeros((4, 3))[1:3], pt.zeros((2, 3)) + v)), local_one_hot_increment) is None


@pytest.mark.parametrize("fill", [1.0, 2.0, -1.0, None], ids=["ones", "twos", "minus_ones", "symbolic"])
def test_refused_when_the_inner_buffer_is_not_zeros(fill):
    """An increment of a buffer of ones (twos, minus ones, unknown values) adds those outside the incremented row: not one increment."""
    v, x = pt.dscalar("v"), pt.vector("x", shape=(5,), dtype="float64")
    inner = pt.vector("b", shape=(4,), dtype="float64") if fill is None else pt.full((4,), np.float64(fill))
    assert inner.dtype == "float64"  # (a Python float would make a float32 buffer, refused for its dtype)
    out = inc_subtensor(x[1:], inc_subtensor(inner[-1], v))
    assert _direct(out, local_nested_zero_increments) is None
    set_into = set_subtensor(pt.full((5,), np.float64(3.0))[1:], inc_subtensor(pt.zeros(4)[-1], v))
    assert _direct(set_into, local_nested_zero_increments) is None  # writing into a buffer that is not zeros


def test_refused_when_the_buffer_of_zeros_has_another_dtype():
    """The inner buffer's dtype is the outer's, or nothing moves: an int64 value rounded into float32 zeros is not the int64 added to a float64 buffer."""
    x = pt.vector("x", shape=(5,), dtype="float64")
    big = pt.scalar("big", dtype="int64")
    rounded = inc_subtensor(x[1:], inc_subtensor(pt.zeros(4, dtype="float32")[-1], big))
    assert _direct(rounded, local_nested_zero_increments) is None
    fn = pytensor.function([x, big], rounded, mode=_mode("py"))
    assert fn(np.zeros(5), 2**40 + 1)[-1] == float(np.float32(2**40 + 1)) != 2**40 + 1  # the rounding the rule keeps
    y = pt.vector("y", shape=(5,), dtype="float32")
    wider = inc_subtensor(y[1:], inc_subtensor(pt.zeros(4, dtype="float64")[-1], pt.dscalar("v")))
    assert _direct(wider, local_nested_zero_increments) is None
