"""Buffer lengths and final-row reads proved from the graph, called directly (issue 47).

`innergraph.rewriting.lengths` proves that a loop buffer holds ``n_steps + k`` rows
(`length_offset`) and which of a buffer's last rows each read selects
(`final_row_reads`); `innergraph.rewriting.carry` rewrites a gradient's traced mit-mot
into carried states on these proofs. Its end-to-end tests (``tests/test_reverse.py``,
``tests/test_checkpoint_carry.py``) compile with Numba; these call the module's functions
on small graphs that are never compiled (a fault planted in the module fails here in
under a second): each form the proof walks (allocations, reversals and full slices,
increments, ``second``, a loop's state result, shapes, bound params), each form it must
refuse (a slice that changes the length, a row of a matrix, an Elemwise other than
``second``, a broadcast), and the rows of each read, compared with NumPy's indexing and
with the lengths PyTensor computes.
"""

from typing import Any

import numpy as np
import pytensor
import pytensor.tensor as pt
from pytensor.compile.mode import Mode
from pytensor.graph.basic import NominalVariable
from pytensor.graph.fg import FunctionGraph
from pytensor.tensor.shape import Shape_i, shape
from pytensor.tensor.subtensor import Subtensor
from pytensor.tensor.variable import TensorVariable

import innergraph
from innergraph.protocol.signature import signature
from innergraph.rewriting.lengths import (
    _constant,
    _full_reversal,
    _length_term,
    _linear,
    _minimum_of,
    _rows_from_end,
    _shape_of_first_axis,
    _state_buffer,
    final_row_reads,
    length_offset,
)
from typed import one_tensor

PY = Mode(linker="py", optimizer=None)  # type: ignore[arg-type]  # Mode takes None (no rewriting); its annotation leaves None out


def _vars() -> tuple[TensorVariable, TensorVariable, TensorVariable, TensorVariable]:
    return pt.lscalar("n"), pt.lscalar("m"), pt.dvector("v"), pt.dmatrix("x")


def _alloc(*shape: Any) -> TensorVariable:
    """``pt.alloc(0.0, *shape)``: a buffer of zeros of that shape."""
    return one_tensor(pt.alloc(0.0, *shape))


def test_constant_reads_integer_constants_and_nothing_else():
    """`_constant`: an int for integer constants (also folded ones), None for a variable, None itself, NaN or a complex number."""
    n, _, _, _ = _vars()
    assert _constant(pt.constant(3)) == 3
    assert _constant(pt.constant(np.int64(-2))) == -2
    assert _constant(pt.constant(2) + 3) == 5
    assert _constant(n) is None
    assert _constant(n + 1) is None
    assert _constant(None) is None
    assert _constant(pt.constant(np.nan)) is None  # int() raises ValueError
    assert _constant(pt.constant(1 + 2j)) is None  # int() raises TypeError


def test_linear_writes_a_value_as_one_term_plus_a_constant():
    """`_linear`: roots, constants, sums in any order, casts to and from scalars, shapes, allocations, bound params; None for two terms."""
    n, m, v, _ = _vars()
    assert _linear(n) == (n, 0)
    assert _linear(pt.constant(4)) == (None, 4)
    assert _linear(n + 1) == (n, 1)
    assert _linear(pt.add(1, n, 2)) == (n, 3)
    assert _linear(pt.add(n, 1, 2)) == (n, 3)
    assert _linear(n + m) is None
    assert _linear(pt.add(n + m, 1)) is None
    assert _linear(pt.add(1, n + m)) is None
    product = n * 2
    assert _linear(product) == (product, 0)  # anything else is its own term
    assert _linear(one_tensor(pt.tensor_from_scalar(pt.scalar_from_tensor(n))) + 1) == (n, 1)
    assert _linear(v.shape[0] + 2) == (("len", v), 2)
    assert _linear(one_tensor(Shape_i(0)(v))) == (("len", v), 0)
    assert _linear(_alloc(n + 3).shape[0]) == (n, 3)
    assert _linear(pt.minimum(2, pt.tensor("i", shape=(3,)).shape[0]) + n) == (n, 2)
    param: Any = NominalVariable(801, pt.lscalar().type)
    assert _linear(param) == (param, 0)
    assert _linear(param, {param: n + 1}) == (n, 1)
    assert _linear(param + 1, {param: n}) == (n, 1)
    assert _length_term(v) == (("len", v), 0)


def test_minimum_of_two_constants_only():
    """`_minimum_of`: the smaller of two constants (a static shape counts), None for a variable, another Op or a root."""
    n, _, _, _ = _vars()
    assert _minimum_of(pt.minimum(2, pt.tensor("i", shape=(3,)).shape[0])) == 2
    assert _minimum_of(pt.minimum(pt.constant(7), pt.constant(5))) == 5
    assert _minimum_of(pt.minimum(2, n)) is None
    assert _minimum_of(pt.maximum(2, 3)) is None
    assert _minimum_of(one_tensor(Shape_i(0)(pt.dvector()))) is None
    assert _minimum_of(n) is None


def test_shape_of_first_axis_only():
    """`_shape_of_first_axis`: ``Shape_i{0}``, ``Shape(v)[0]`` and a 0-d DimShuffle of a vector's ``Shape``, nothing else."""
    n, _, v, x = _vars()
    assert _shape_of_first_axis(one_tensor(Shape_i(0)(v)).owner) is v
    assert _shape_of_first_axis(one_tensor(Shape_i(0)(x)).owner) is x
    assert _shape_of_first_axis(one_tensor(Shape_i(1)(x)).owner) is None
    assert _shape_of_first_axis(one_tensor(Shape_i(-1)(x)).owner) is None  # the last axis
    assert _shape_of_first_axis(v.shape[0].owner) is v
    assert _shape_of_first_axis(x.shape[0].owner) is x
    assert _shape_of_first_axis(x.shape[1].owner) is None
    assert _shape_of_first_axis(x.shape[-1].owner) is None
    assert _shape_of_first_axis(pt.squeeze(shape(v)).owner) is v
    assert _shape_of_first_axis(shape(v).dimshuffle("x", 0).owner) is None
    assert _shape_of_first_axis(pt.argmax(shape(v)).owner) is None  # 0, not len(v)
    assert _shape_of_first_axis(v[1:][0].owner) is None
    assert _shape_of_first_axis((v * 2)[0].owner) is None
    assert _shape_of_first_axis((n * 2).owner) is None
    # a Subtensor without an index (PyTensor's own code builds none)
    assert _shape_of_first_axis(one_tensor(Subtensor(())(shape(v))).owner) is None


def test_length_offset_of_allocations_and_what_keeps_a_length():
    """`length_offset` through allocations (1-d, 2-d, empty), reversals, ``[::1]``, increments and ``second``, against the lengths PyTensor computes."""
    n, _, v, _ = _vars()
    init, y = pt.dvector("init"), pt.dmatrix("y")
    alloc = _alloc(n + 2)
    proved = {
        alloc: 2,
        pt.empty((n + 1,)): 1,
        _alloc(n + 2, 3): 2,
        alloc[::-1]: 2,
        alloc[::1]: 2,
        pt.set_subtensor(_alloc(n + 3)[:2], init)[::-1]: 3,
        pt.inc_subtensor(_alloc(n + 3)[-1], 1.0): 3,
        pt.second(_alloc(n + 1), 0.0): 1,
        # y broadcasts the allocation along its second axis only
        pt.second(_alloc(n + 1, 1), y): 1,
    }
    for buffer, offset in proved.items():
        assert length_offset(buffer, n) == offset
    assert length_offset(_alloc(n + 5), n + 2) == 3
    assert length_offset(_alloc(7), pt.constant(4)) == 3
    assert length_offset(v[::-1], v.shape[0]) == 0
    assert length_offset(v, v.shape[0] + 2) == -2
    lengths = pytensor.function([n, init, y], [b.shape[0] for b in proved], mode=PY)
    for steps in (0, 4):
        got = lengths(steps, np.zeros(2), np.zeros((steps + 1, 2)))
        assert [int(g) - steps for g in got] == list(proved.values())


def test_length_offset_refuses_what_it_cannot_prove():
    """None for lengths or step counts that are not one term plus a constant, other terms, slices that cut, rows, other Ops, broadcasts."""
    n, m, v, _ = _vars()
    alloc = _alloc(n + 2)
    assert length_offset(_alloc(n + m), n) is None
    assert length_offset(alloc, n + m) is None
    assert length_offset(alloc, m) is None
    assert length_offset(_alloc(n * 2), n) is None
    for buffer in (
        alloc[1:],
        alloc[:3],
        alloc[::2],
        alloc[::-2],
        _alloc(n + 1, 3)[0],
        _alloc(n + 1, 3)[::-1, 0],
    ):
        assert length_offset(buffer, n) is None
    for buffer in (
        pt.exp(alloc),
        pt.sqrt(alloc),
        alloc.dimshuffle(0, "x"),
        pt.set_subtensor(v[:2], alloc[:2]),
    ):
        assert length_offset(buffer, n) is None
    zero = pt.constant(0, dtype="int64")
    # second(x, y) is as long as y when y broadcasts x (x of one row)
    assert length_offset(pt.second(_alloc(1), pt.dvector("y")), zero) is None
    assert (
        length_offset(
            pt.second(_alloc(1, 3), pt.tensor("w", shape=(None, 1))), zero
        )
        is None
    )
    assert (
        length_offset(pt.second(_alloc(1), pt.tensor("z", shape=(1,))), zero)
        == 1
    )


def test_the_walk_gives_up_after_32_ops():
    """A length kept through 31 reversals is proved; through 32 the walk stops at its bound and proves nothing."""
    n = pt.lscalar("n")
    buffer: Any = _alloc(n + 1)
    for _ in range(31):
        buffer = buffer[::-1]
    assert length_offset(buffer, n) == 1
    assert length_offset(buffer[::-1], n) is None


def test_bound_params_are_followed_and_every_binding_must_agree():
    """A body's params bound to each enclosing consumer's arguments: proved when every binding gives one offset."""
    n, m, _, _ = _vars()
    buffer_param: Any = NominalVariable(811, pt.dvector().type)
    steps_param: Any = NominalVariable(812, pt.lscalar().type)
    buffer = pt.inc_subtensor(buffer_param[-1], 1.0)[::-1]
    one = {buffer_param: pt.zeros(n + 1), steps_param: n}
    two = {buffer_param: _alloc(m + 2), steps_param: m}
    assert length_offset(buffer, steps_param) is None
    assert length_offset(buffer, steps_param, [one]) == 1
    assert length_offset(buffer, steps_param, [two]) == 2
    assert length_offset(buffer, steps_param, [one, dict(one)]) == 1
    assert length_offset(buffer, steps_param, [one, two]) is None
    assert (
        length_offset(
            buffer, steps_param, [{buffer_param: pt.zeros(n + 1), steps_param: m}]
        )
        is None
    )
    nested: Any = NominalVariable(813, pt.dvector().type)
    assert (
        length_offset(
            buffer,
            steps_param,
            [{buffer_param: nested, nested: pt.zeros(n + 3), steps_param: n}],
        )
        == 3
    )


def test_a_loop_state_is_as_long_as_its_buffer():
    """A Scan's traces (a mit-sot of 2 initial rows, a sit-sot) have their buffers' lengths; a per-step output's is not proved."""
    x, a0 = pt.dvector("x"), pt.dscalar("a0")
    initial = pt.tensor("initial", shape=(2,), dtype="float64")
    outs = innergraph.scan(
        lambda s, a, b2, b1: [a * 0.5 + s, b1 * 0.3 + b2 + s, s * 2],
        sequences=[x],
        outputs_info=[a0, {"initial": initial, "taps": [-2, -1]}, None],
        return_updates=False,
    )
    node = outs[0].owner.inputs[0].owner
    sig = signature(node)
    assert sig is not None
    steps = sig.header[0]
    mit_sot, sit_sot, nit_sot = node.outputs
    assert [s.kind for s in sig.slots] == ["seq", "mit_sot", "sit_sot", "nit_sot"]
    assert _state_buffer(mit_sot) is sig.slots[1].args[0]
    assert _state_buffer(sit_sot) is sig.slots[2].args[0]
    assert _state_buffer(nit_sot) is None
    assert _state_buffer(x[1:]) is None
    assert [length_offset(o, steps) for o in (mit_sot, sit_sot, nit_sot)] == [
        2,
        1,
        None,
    ]
    assert length_offset(sit_sot[::-1], steps) == 1
    lengths = pytensor.function(
        [x, a0, initial], [mit_sot.shape[0] - steps, sit_sot.shape[0] - steps], mode=PY
    )
    assert [int(g) for g in lengths(np.ones(3), 0.5, np.ones(2))] == [2, 1]


def _numpy_rows(
    index: slice | int, length: int, reversed_: bool
) -> tuple[int, ...] | int:
    """The rows NumPy's indexing selects, counted from the end of a buffer of ``length`` rows."""
    rows = np.arange(length)[::-1] if reversed_ else np.arange(length)
    picked = rows[index]
    return (
        int(length - 1 - picked)
        if np.ndim(picked) == 0
        else tuple(int(length - 1 - r) for r in picked)
    )


Index = int | tuple[int | None, int | None, int | None]  # a constant index, or a slice's start, stop and step


def test_rows_from_end_against_numpy():
    """`_rows_from_end` on constant indices and slices: NumPy's rows for every length from ``minimum`` on, or None where they change or reach too far."""
    i = pt.lscalar("i")

    def c(value: int | None) -> Any:
        return None if value is None else pt.constant(value, dtype="int64")

    cases: list[tuple[Index, int, bool, int, tuple[int, ...] | int]] = [  # (index, minimum, reversed_, rows, expected)
        (-1, 1, False, 2, 0),
        (-2, 2, False, 2, 1),
        (-3, 3, False, 3, 2),
        (0, 1, True, 2, 0),
        (1, 2, True, 2, 1),
        ((-1, None, None), 1, False, 2, (0,)),
        ((-2, None, None), 2, False, 2, (1, 0)),
        ((None, -3, -1), 2, False, 2, (0, 1)),
        ((-2, None, 1), 2, False, 2, (1, 0)),
        ((None, 1, None), 1, True, 2, (0,)),
        ((2, 0, -1), 3, True, 3, (2, 1)),
        ((1, None, -1), 2, True, 2, (1, 0)),
        ((-3, -1, None), 3, False, 3, (2, 1)),
        ((-4, None, 2), 4, False, 4, (3, 1)),
    ]
    for index, minimum, reversed_, rows, expected in cases:
        idx = (
            pt.constant(index, dtype="int64")
            if isinstance(index, int)
            else slice(*(c(p) for p in index))
        )
        assert _rows_from_end(idx, minimum, reversed_, rows) == expected
        plain = index if isinstance(index, int) else slice(*index)
        for length in range(max(minimum, 1), max(minimum, 1) + 8):
            assert _numpy_rows(plain, length, reversed_) == expected
    refused: list[tuple[Index, int, bool, int]] = [  # (index, minimum, reversed_, rows)
        (0, 1, False, 2),
        (-3, 1, False, 2),
        (-5, 1, False, 2),
        (2, 1, True, 2),
        (-1, 1, True, 2),
        ((-2, None, None), 1, False, 2),
        ((1, None, None), 2, False, 2),
        ((-3, None, None), 3, False, 2),
        ((None, None, None), 1, False, 2),
        ((None, -1, None), 1, False, 2),
        ((None, 2, None), 2, False, 2),
        ((0, 0, None), 1, False, 2),
        ((-2, -2, None), 2, False, 2),
        ((None, None, -1), 1, False, 2),
        ((None, 2, None), 1, True, 1),
        ((-3, None, None), 1, True, 3),
        ((1, None, -1), 1, True, 2),
        ((-3, None, None), 3, False, 1),
        ((None, None, -3), 1, False, 4),
        ((None, None, None), 2, False, 2),
        ((None, None, -7), 1, False, 8),
    ]
    for index, minimum, reversed_, rows in refused:
        idx = (
            pt.constant(index, dtype="int64")
            if isinstance(index, int)
            else slice(*(c(p) for p in index))
        )
        assert _rows_from_end(idx, minimum, reversed_, rows) is None
    assert _rows_from_end(i, 1, False, 2) is None
    assert _rows_from_end(slice(c(-1), i), 1, False, 2) is None
    assert _rows_from_end(slice(None, None, c(0)), 1, False, 2) is None


def test_full_reversal_is_a_step_of_minus_one_only():
    """`_full_reversal`: ``[::-1]`` only; not ``[::2]``, ``[::-2]``, ``[1::-1]``, ``[:-2:-1]``, a two-index read, or another Op."""
    v, x = pt.dvector("v"), pt.dmatrix("x")
    assert _full_reversal(v[::-1].owner)
    for other in (
        v[::2],
        v[::-2],
        v[1::-1],
        v[:-2:-1],
        v[-2:],
        x[::-1, 0],
        v.dimshuffle(0, "x"),
        one_tensor(Subtensor(())(v)),
    ):
        assert not _full_reversal(other.owner)


def test_final_row_reads_through_slices_and_reversals():
    """`final_row_reads`: every read's rows (through reversals, in any order), with the default ``minimum`` of 1."""
    n = pt.lscalar("n")
    buffer: Any = _alloc(n + 2)[::-1]
    reads = [
        buffer[::-1][0],
        buffer[-1],
        buffer[-2:],
        buffer[:-3:-1],
        buffer[::-1][:1],
        buffer[::-1][1],
    ]
    fg = FunctionGraph([n], reads, clone=False)
    assert final_row_reads(fg, buffer, rows=2, minimum=2) == dict(
        zip(reads, [0, 0, (1, 0), (0, 1), (0,), 1], strict=True)
    )
    # by default the buffer may have one row, of which buffer[-2:] is that one row
    assert final_row_reads(fg, buffer, rows=2) is None
    last = [buffer[-1], buffer[::-1][0]]
    assert final_row_reads(
        FunctionGraph([n], last, clone=False), buffer, rows=1
    ) == dict(zip(last, [0, 0], strict=True))


def test_final_row_reads_refuses_other_reads():
    """None when something reads the buffer other than a one-index Subtensor, a read reaches too far, or nothing reads it."""
    n, i = pt.lscalar("n"), pt.lscalar("i")
    buffer: Any = _alloc(n + 2)[::-1]
    matrix: Any = _alloc(n + 2, 3)
    cases = [
        (buffer, [buffer[-1], buffer[0]]),
        (buffer, [buffer[::-1][0], buffer[0]]),
        (buffer, [buffer[-1], pt.exp(buffer)]),
        (buffer, [buffer[::-1][3]]),
        (buffer, [buffer[::-1]]),
        (buffer, [buffer[::2][0]]),
        (buffer, [buffer[::-2][0]]),
        (buffer, [buffer[i]]),
        (buffer, [buffer[-1], buffer]),
        (buffer, [one_tensor(Subtensor(())(buffer))]),
        (matrix, [matrix[-1, 0]]),
        (matrix, [matrix[-1], matrix[-1, 0]]),
        (buffer, [pt.exp(n)]),
    ]
    for target, outputs in cases:
        assert (
            final_row_reads(
                FunctionGraph([n, i], outputs, clone=False), target, rows=2, minimum=2
            )
            is None
        )
    # the buffer read as an index, not as the Subtensor's first input
    row: Any = pt.lscalar("row")
    assert (
        final_row_reads(
            FunctionGraph([n, row], [buffer[row]], clone=False), row, rows=2
        )
        is None
    )


def test_a_minimum_of_zero_rows_counts_as_one():
    """``minimum`` 0 is read as 1 (``max(minimum, 1)``): a read of an empty buffer selects no row, so the rows
    given are those of every buffer of one row or more (NumPy's, for 1 to 7 rows)."""
    last, one, two = (pt.constant(v, dtype="int64") for v in (-1, 1, -2))
    assert _rows_from_end(slice(last, None), 0, False, 2) == (0,)
    assert _rows_from_end(slice(None, one), 0, True, 2) == (0,)
    assert _rows_from_end(slice(two, None), 0, False, 2) is None
    for length in range(1, 8):
        assert _numpy_rows(slice(-1, None), length, False) == (0,)
        assert _numpy_rows(slice(None, 1), length, True) == (0,)
    assert np.arange(0)[-1:].size == 0
