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
from pytensor.tensor.basic import Alloc
from pytensor.tensor.subtensor import IncSubtensor, inc_subtensor, set_subtensor

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
