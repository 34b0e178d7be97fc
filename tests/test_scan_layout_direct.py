"""`innergraph.ops.scan` called directly, fast (issue 47's mutation run).

`tests/test_scan.py` checks the in-graph Scan end to end, against vanilla PyTensor, on
loops `pytensor.scan` builds. These call the module's pieces on layouts and loops made
here: `ScanLayout`'s splits on a layout whose every group has its own size (literal
groups), its input checks (each group's offender named, each way a type can miss),
`outer_output_types` on inner outputs of distinct types, the consumer's view map,
flags, `make_node`'s refusals, its thunks under the py and the VM linkers (values
against NumPy), `perform`, `connection_pattern` and the gradients against the native
Scan's, `infer_shape` (evaluated, against the shapes of the outputs), `_step_arguments`,
`_carry_policy`, `_repoint_map`, and the caches of `native_scan` and
`backend_native_scan`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.compile.mode import Mode, get_default_mode
from pytensor.graph.basic import Apply, Variable
from pytensor.graph.fg import FunctionGraph
from pytensor.graph.traversal import applys_between
from pytensor.scan.op import Scan as NativeScan
from pytensor.scan.op import ScanInfo
from pytensor.scan.utils import expand_empty
from pytensor.tensor.rewriting.shape import ShapeFeature
from pytensor.tensor.type import TensorType

import innergraph
from innergraph.core.errors import ArityError, BodyTypeError
from innergraph.core.graph import body_of
from innergraph.ops import scan as scan_module
from innergraph.protocol.conversion import lift_graph
from innergraph.ops.scan import Scan, ScanLayout, _carry_policy, _repoint_map, backend_native_scan, build_native_scan, native_scan
from typed import grad, pushforward, recording

PY = Mode(linker="py", optimizer="None")
CVM = Mode(linker="cvm", optimizer="None")

#: every group of its own size: 1 sequence, 2 mit-mots (5 input taps, 3 output taps), 3 mit-sots (6 taps),
#: 4 sit-sots, 5 nit-sots, 6 untraced states, 7 non-sequences, and the `until` condition
RICH = ScanInfo(
    n_seqs=1,
    mit_mot_in_slices=((0, 1), (0, 1, 2)),
    mit_mot_out_slices=((1,), (2, 3)),
    mit_sot_in_slices=((-2, -1), (-3, -2, -1), (-1,)),
    sit_sot_in_slices=((-1,),) * 4,
    n_nit_sot=5,
    n_untraced_sit_sot=6,
    n_non_seqs=7,
    as_while=True,
)


def ranges(*sizes: int) -> list[list[int]]:
    out, start = [], 0
    for n in sizes:
        out.append(list(range(start, start + n)))
        start += n
    return out


# ---- ScanLayout


def test_split_inner_outputs_names_each_group():
    layout = ScanLayout(RICH)
    mit_mot, mit_sot, sit_sot, nit_sot, untraced, cond = ranges(3, 3, 4, 5, 6, 1)
    want = {"mit_mot": mit_mot, "mit_sot": mit_sot, "sit_sot": sit_sot, "nit_sot": nit_sot, "untraced": untraced, "until": cond}
    assert layout.split_inner_outputs(range(22)) == want
    counted = ScanLayout(ScanInfo(**{**RICH.__dict__, "as_while": False}))
    assert counted.split_inner_outputs(range(21)) == {**want, "until": []}


def test_split_inner_inputs_names_each_group():
    seqs, mit_mot, mit_sot, sit_sot, untraced, non_seqs = ranges(1, 5, 6, 4, 6, 7)
    want = {"seqs": seqs, "mit_mot": mit_mot, "mit_sot": mit_sot, "sit_sot": sit_sot, "untraced": untraced, "non_seqs": non_seqs}
    assert ScanLayout(RICH).split_inner_inputs(range(29)) == want


def test_split_outer_inputs_and_outputs_name_each_group():
    layout = ScanLayout(RICH)
    seqs, mit_mot, mit_sot, sit_sot, untraced, nit_sot, non_seqs = ranges(1, 2, 3, 4, 6, 5, 7)
    assert layout.split_outer_inputs(range(28)) == {
        "seqs": seqs, "mit_mot": mit_mot, "mit_sot": mit_sot, "sit_sot": sit_sot,
        "untraced": untraced, "nit_sot": nit_sot, "non_seqs": non_seqs,
    }  # fmt: skip
    mit_mot, mit_sot, sit_sot, nit_sot, untraced = ranges(2, 3, 4, 5, 6)
    want = {"mit_mot": mit_mot, "mit_sot": mit_sot, "sit_sot": sit_sot, "nit_sot": nit_sot, "untraced": untraced}
    assert layout.split_outer_outputs(range(20)) == want


def test_outer_output_types_trace_each_first_mit_mot_output_and_keep_untraced_types():
    """Each inner output its own type: the outer types pick the first output of each mit-mot and add a time dimension to traced ones."""
    shapes: list[tuple[int | None, ...]] = [(), (1,), (2,), (3, None), (4,), (5,), (6,), (7,), (8,), (9,), (10,), (11,), (12,), (13,)]
    shapes += [(14,), (15,), (16,), (17,), (18,), (19,), (20,), ()]
    inner = [TensorType("float64" if i % 2 else "float32", shape=shape) for i, shape in enumerate(shapes)]
    got = ScanLayout(RICH).outer_output_types(inner)
    traced = [inner[0], inner[1], *inner[3:15]]  # mit-mot outputs 0 and 1 (taps (1,), then (2, 3)), then 3 + 4 + 5
    want = [TensorType(t.dtype, shape=(None, *t.shape)) for t in traced] + inner[15:21]
    assert got == want


SMALL = ScanInfo(
    n_seqs=1,
    mit_mot_in_slices=((0, 1), (0, 1)),
    mit_mot_out_slices=((1,), (0,)),
    mit_sot_in_slices=((-2, -1), (-1,)),
    sit_sot_in_slices=((-1,), (-1,)),
    n_nit_sot=2,
    n_untraced_sit_sot=1,
    n_non_seqs=2,
    as_while=False,
)
#: SMALL's params: each state of its own type (a misaligned split takes another state's)
PARAMS = [
    TensorType("float64", shape=()),  # sequence
    TensorType("float64", shape=()), TensorType("float64", shape=()),  # mit-mot 0, two taps
    TensorType("float32", shape=(None,)), TensorType("float32", shape=(None,)),  # mit-mot 1
    TensorType("int64", shape=()), TensorType("int64", shape=()),  # mit-sot 0, two taps
    TensorType("float32", shape=(None, None)),  # mit-sot 1
    TensorType("int32", shape=()), TensorType("float64", shape=(None,)),  # sit-sots
    TensorType("float64", shape=(None,)),  # untraced
    TensorType("float64", shape=(3,)), TensorType("float64", shape=(None,)),  # non-sequences
]  # fmt: skip


def outer(**changed: Variable) -> list[Variable]:
    """SMALL's outer inputs after n_steps, fitting `PARAMS`, with some replaced by name."""
    fits = {
        "seq": pt.dvector(), "mm0": pt.dvector(), "mm1": pt.fmatrix(), "ms0": pt.lvector(), "ms1": pt.ftensor3(),
        "ss0": pt.ivector(), "ss1": pt.dmatrix(), "untraced": pt.dvector(), "len0": pt.lscalar(), "len1": pt.iscalar(),
        "ns0": pt.tensor(dtype="float64", shape=(3,)), "ns1": pt.tensor(dtype="float64", shape=(1,)),
    }  # fmt: skip
    fits.update(changed)
    return list(fits.values())


def test_check_outer_inputs_accepts_inputs_that_fit():
    ScanLayout(SMALL).check_outer_inputs(PARAMS, outer(), "here")
    # a non-sequence whose type is more specific than its param's, or in its class of broadcastable types
    ScanLayout(SMALL).check_outer_inputs(PARAMS, outer(ns0=pt.dvector(), ns1=pt.tensor(dtype="float64", shape=(4,))), "here")


@pytest.mark.parametrize(
    "name, wrong, message",
    [
        ("seq", pt.fvector(), "here: seqs input 0"),
        ("seq", pt.dscalar(), "here: seqs input 0"),
        ("seq", pt.dmatrix(), "here: seqs input 0"),
        ("mm0", pt.fvector(), "here: mit_mot input 0"),
        ("mm1", pt.dmatrix(), "here: mit_mot input 1"),
        ("mm1", pt.fvector(), "here: mit_mot input 1"),
        ("mm1", pt.ftensor3(), "here: mit_mot input 1"),
        ("ms0", pt.ivector(), "here: mit_sot input 0"),
        ("ms1", pt.fmatrix(), "here: mit_sot input 1"),
        ("ms1", pt.dtensor3(), "here: mit_sot input 1"),
        ("ss0", pt.lvector(), "here: sit_sot input 0"),
        ("ss1", pt.dvector(), "here: sit_sot input 1"),
        ("ss1", pt.fmatrix(), "here: sit_sot input 1"),
        ("untraced", pt.fvector(), "here: untraced input 0"),
        ("untraced", pt.dmatrix(), "here: untraced input 0"),
        ("ns0", pt.fvector(), "here: non_seqs input 0"),
        ("ns1", pt.dmatrix(), "here: non_seqs input 1"),
        ("len0", pt.dscalar(), "here: nit_sot length 0"),
        ("len1", pt.ivector(), "here: nit_sot length 1"),
        ("len1", pytensor.shared(np.random.default_rng(0)), "here: nit_sot length 1"),
    ],
)
def test_check_outer_inputs_names_the_input_that_does_not_fit(name: str, wrong: Variable, message: str):
    with pytest.raises(BodyTypeError, match=message):
        ScanLayout(SMALL).check_outer_inputs(PARAMS, outer(**{name: wrong}), "here")


# ---- the consumer


def test_untraced_outputs_are_views_of_their_initial_values():
    """Output 14 + j (after 2 + 3 + 4 + 5 traced ones) may alias input 2 + 1 + 2 + 3 + 4 + j (after the function and n_steps)."""
    assert Scan(ScanLayout(RICH)).view_map == {14 + j: [12 + j] for j in range(6)}
    assert Scan(ScanLayout(SMALL)).view_map == {8: [9]}  # 2 + 2 + 2 + 2 outputs before; 2 + 1 + 2 + 2 + 2 inputs
    assert not Scan(ScanLayout(dataclass_replace(SMALL, n_untraced_sit_sot=0))).view_map


def dataclass_replace(info: ScanInfo, **changes: Any) -> ScanInfo:
    return ScanInfo(**{**info.__dict__, **changes})


X: Any = pt.dscalar("x")
S: Any = pt.dvector("s")
K: Any = pt.lscalar("k")
XV, SV = 0.7, np.array([0.3, -0.2, 0.5, 0.1, 0.4, -0.6])


#: the rich loop's layout: two sequences (rows t and t + 2), a mit-sot (-2, -1), a vector sit-sot, two nit-sots, an untraced state, two non-sequences
LOOP = ScanInfo(
    n_seqs=2,
    mit_mot_in_slices=(),
    mit_mot_out_slices=(),
    mit_sot_in_slices=((-2, -1),),
    sit_sot_in_slices=((-1,),),
    n_nit_sot=2,
    n_untraced_sit_sot=1,
    n_non_seqs=2,
    as_while=False,
)


def rich_loop(mode: Any = None) -> tuple[Apply, list[Variable]]:
    """The consumer of a native Scan of layout `LOOP`, lifted: its node and its outer inputs after n_steps.

    The step: ``new = a / 2 + b / 4 + prev - nxt * w`` (the mit-sot), ``v * 0.9 + new`` (the sit-sot),
    a row of ``k`` ``new``s and ``sum(v) * nxt`` (the nit-sots), ``c + new`` (the untraced state).
    """
    prev, nxt, a, b, c, w = (pt.dscalar(name) for name in ("prev", "nxt", "a", "b", "c", "w"))
    v, k = pt.dvector("v", shape=(2,)), pt.lscalar("kk")
    new = a * 0.5 + b * 0.25 + prev - nxt * w
    inner_outputs = [new, v * 0.9 + new, pt.zeros(k) + new, pt.sum(v) * nxt, c + new]
    native = NativeScan([prev, nxt, a, b, v, c, w, k], inner_outputs, LOOP, mode=mode)
    n = S.shape[0] - 2
    outer = [S[:-2], S[2:], expand_empty(pt.stack([X, X + 1.0]), n), expand_empty(pt.shape_padleft(pt.zeros(2) + X), n), X * 0.0]
    outer += [n, n, X * 2.0, K]
    native_node = native.make_node(n, *outer)
    (consumer,) = {o.owner for o in lift_graph(native_node.outputs)}
    assert consumer is not None and isinstance(consumer.op, Scan)
    return consumer, outer


def rich_numpy(x: float, s: np.ndarray, k: int) -> list[Any]:
    a, b, v, c, w = x, x + 1.0, np.zeros(2) + x, 0.0, x * 2.0
    news, vs, rows, sums = [], [], [], []
    for t in range(1, len(s) - 1):
        new = a * 0.5 + b * 0.25 + s[t - 1] - s[t + 1] * w
        sums.append(v.sum() * s[t + 1])
        v = v * 0.9 + new
        news.append(new)
        vs.append(v)
        rows.append(np.zeros(k) + new)
        a, b, c = b, new, c + new
    return [news, vs, rows, sums, c]


@pytest.mark.parametrize("mode", [PY, CVM], ids=["py", "cvm"])
def test_the_consumer_runs_itself_and_gives_a_numpy_loops_values(mode: Mode):
    node, _ = rich_loop()
    mit_sot, sit_sot, rows, sums, counter = pytensor.function([X, S, K], node.outputs, mode=mode)(XV, SV, 3)
    news, vs, want_rows, want_sums, want_counter = rich_numpy(XV, SV, 3)
    np.testing.assert_allclose(mit_sot[2:], news)
    np.testing.assert_allclose(sit_sot[1:], vs)
    np.testing.assert_allclose(rows, want_rows)
    np.testing.assert_allclose(sums, want_sums)
    np.testing.assert_allclose(counter, want_counter)


@pytest.mark.parametrize("mode, linker", [(PY, "py"), (CVM, "cvm"), (Mode(linker="vm", optimizer="None"), "cvm")], ids=["py", "cvm", "vm"])
def test_the_thunk_runs_the_native_scan_made_for_the_linker(monkeypatch: pytest.MonkeyPatch, mode: Mode, linker: str):
    calls: list[Any] = []
    monkeypatch.setattr(scan_module, "backend_native_scan", recording(calls, backend_native_scan, whole=True))
    node, _ = rich_loop()
    fn = pytensor.function([X, S, K], node.outputs, mode=mode)
    assert [c[3] for c in calls] == [linker]
    (compiled,) = [n for n in fn.maker.fgraph.apply_nodes if isinstance(n.op, Scan)]
    body, op, inputs = calls[0][:3]
    assert body is body_of(compiled.inputs[0]) and op == node.op and list(inputs) == compiled.inputs[1:]


def test_perform_gives_the_native_scans_outputs():
    node, _ = rich_loop()
    values = pytensor.function([X, S, K], node.inputs[1:], mode=PY)(XV, SV, 2)
    storage: list[list[Any]] = [[None] for _ in node.outputs]
    node.op.perform(node, [body_of(node.inputs[0]), *values], storage)
    news, vs, rows, sums, counter = rich_numpy(XV, SV, 2)
    np.testing.assert_allclose(storage[0][0][2:], news)
    np.testing.assert_allclose(storage[1][0][1:], vs)
    np.testing.assert_allclose(storage[2][0], rows)
    np.testing.assert_allclose(storage[3][0], sums)
    np.testing.assert_allclose(storage[4][0], counter)


def test_the_defaults_are_pytensors():
    assert Scan(ScanLayout(SMALL)).flags() == {
        "truncate_gradient": -1, "name": None, "profile": False, "allow_gc": True, "mode": None, "strict": True,
    }  # fmt: skip


def test_flags_and_like_carry_the_native_scans_flags():
    node, _ = rich_loop()
    mode = Mode(linker="py", optimizer="None")
    op = Scan(node.op.layout, truncate_gradient=3, name="named", profile=False, allow_gc=False, mode=mode, strict=False)
    assert op.flags() == {"truncate_gradient": 3, "name": "named", "profile": False, "allow_gc": False, "mode": mode, "strict": False}
    native = build_native_scan(body_of(node.inputs[0]), op)
    like = Scan.like(native)
    assert like.flags() == op.flags() and like.layout == op.layout and like == op
    assert str(like) == "Scan{named, in-graph}"


def test_make_node_refuses_what_does_not_fit_the_layout():
    node, _ = rich_loop()
    function, n_steps, *rest = node.inputs
    with pytest.raises(BodyTypeError, match="input 0 .* must be a function variable"):
        node.op.make_node(S, n_steps, *rest)
    with pytest.raises(BodyTypeError, match="input 0 .* must be a function variable"):
        node.op.make_node(body_of(function), n_steps, *rest)
    one_more_seq = Scan(ScanLayout(dataclass_replace(node.op.layout.info, n_seqs=3)))
    with pytest.raises(ArityError, match="the layout has 9 inner inputs, the function .* takes 8 params"):
        one_more_seq.make_node(function, n_steps, S, *rest)
    one_more_nit_sot = Scan(ScanLayout(dataclass_replace(node.op.layout.info, n_nit_sot=3)))
    with pytest.raises(ArityError, match="the layout has 6 inner outputs, the function .* returns 5"):
        one_more_nit_sot.make_node(function, n_steps, *rest)
    one_less_non_seq = Scan(ScanLayout(dataclass_replace(node.op.layout.info, n_non_seqs=1)))
    with pytest.raises(ArityError, match="the layout has 7 inner inputs, the function .* takes 8 params"):
        one_less_non_seq.make_node(function, n_steps, *rest[:-1])
    one_less_nit_sot = Scan(ScanLayout(dataclass_replace(node.op.layout.info, n_nit_sot=1)))
    with pytest.raises(ArityError, match="the layout has 4 inner outputs, the function .* returns 5"):
        one_less_nit_sot.make_node(function, n_steps, *rest[:6], *rest[7:])
    with pytest.raises(ArityError, match=f"expected {len(node.inputs) - 1} outer inputs \\(n_steps first\\), got {len(node.inputs) - 2}"):
        node.op.make_node(function, n_steps, *rest[:-1])
    with pytest.raises(ArityError, match=f"got {len(node.inputs)}"):
        node.op.make_node(function, n_steps, *rest, X)
    # n_steps and the outer inputs may be numbers
    made = node.op.make_node(function, 4, *rest)
    assert made.inputs[1].data == 4 and made.inputs[2:] == rest
    assert [o.type for o in made.outputs] == [o.type for o in node.outputs]


def test_connection_pattern_is_the_native_scans_below_the_function():
    node, _ = rich_loop()
    native = node.op._native_for_graph(node.inputs)
    got = node.op.connection_pattern(node)
    assert got == [[False] * len(node.outputs), *native.op.connection_pattern(native)]
    assert len(got) == len(node.inputs) and any(any(row) for row in got[1:])


def test_gradients_and_pushforward_match_the_native_scans():

    def cost(scan: Any) -> Any:
        ys = scan(lambda v, y, w: y * v + pt.tanh(y) * w, sequences=[S], outputs_info=[X], non_sequences=[X * 3.0], return_updates=False)
        return ys

    ours, theirs = cost(innergraph.scan), cost(pytensor.scan)
    vals = (XV, SV)
    got = pytensor.function([X, S], grad((ours**2).sum(), [X, S]), mode=CVM)(*vals)
    want = pytensor.function([X, S], grad((theirs**2).sum(), [X, S]), mode=CVM)(*vals)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-12)
    tangent = pt.dvector("t")
    # the consumer's own pushforward (by default PyTensor applies pullbacks twice)
    forward = [pushforward(y, S, tangent, use_op_pushforward=True) for y in (ours, theirs)]
    got_pf = pytensor.function([X, S, tangent], forward[0], mode=CVM)(*vals, SV[::-1])
    want_pf = pytensor.function([X, S, tangent], forward[1], mode=CVM)(*vals, SV[::-1])
    np.testing.assert_allclose(got_pf, want_pf, rtol=1e-12)


# ---- shapes


def test_step_arguments_put_rows_and_taps_as_unknowns_and_non_sequences_as_they_are():
    vars_ = outer()
    shapes: list[Any] = [(10 + i, 20 + i) for i in range(len(vars_))]
    shapes[0] = None  # a sequence of unknown shape
    groups = ScanLayout(SMALL).split_outer_inputs(list(zip(vars_, shapes, strict=True)))
    args, arg_shapes = Scan(ScanLayout(SMALL))._step_arguments(groups)
    assert args == [None] * 11 + vars_[10:]  # 1 row, 2 + 2 mit-mot taps, 2 + 1 mit-sot taps, 2 sit-sots, the untraced state
    rows = [None, (21,), (21,), (22,), (22,), (23,), (23,), (24,), (25,), (26,)]
    assert arg_shapes == [*rows, (17, 27), (20, 30), (21, 31)]


#: a while loop: rows of an int vector and of a matrix, a vector sit-sot, three nit-sots (``zeros(row)``, a matrix
#: row doubled, a 2 x 5 x 4 x row array), an untraced vector state, one non-sequence; it stops once the state's sum passes 3
WHILE = ScanInfo(
    n_seqs=2,
    mit_mot_in_slices=(),
    mit_mot_out_slices=(),
    mit_sot_in_slices=(),
    sit_sot_in_slices=((-1,),),
    n_nit_sot=3,
    n_untraced_sit_sot=1,
    n_non_seqs=1,
    as_while=True,
)
R: Any = pt.lvector("r")
M: Any = pt.dmatrix("m")
RV, MV = np.full(6, 3), np.arange(18.0).reshape(6, 3) / 10


def while_loop() -> Apply:
    r, row, v, c, w = pt.lscalar("r_t"), pt.dvector("m_t"), pt.dvector("v"), pt.dvector("c"), pt.dscalar("w")
    nxt = v + row * w
    inner = [nxt, pt.zeros(r), row * 2.0, pt.zeros((2, 5, 4, r)) + w, c + row, pt.gt(pt.sum(nxt), 3.0)]
    native = NativeScan([r, row, v, c, w], inner, WHILE)
    n = R.shape[0]
    node = native.make_node(n, R, M, expand_empty(pt.shape_padleft(pt.zeros(3)), n), pt.ones(3), n, n, n, X)
    (consumer,) = {o.owner for o in lift_graph(node.outputs)}
    assert consumer is not None and isinstance(consumer.op, Scan)
    return consumer


def inferred(node: Apply, inputs: Sequence[Variable]) -> list[Any]:
    """``node``'s `infer_shape` called directly (a ShapeFeature would hide an error behind the outputs' own shapes)."""
    fg = FunctionGraph(list(inputs), node.outputs, clone=False, features=[ShapeFeature()])
    shapes = [fg.shape_feature.shape_tuple(v) if isinstance(v.type, TensorType) else None for v in node.inputs]
    return list(node.op.infer_shape(node, shapes))


def inferred_and_actual(node: Apply, inputs: Sequence[Variable], values: Sequence[Any]) -> tuple[list[list[int]], list[list[int]]]:
    shapes = inferred(node, inputs)
    flat = [pt.as_tensor_variable(d) for shape in shapes for d in shape]
    dims = iter(pytensor.function(list(inputs), flat, mode=PY, on_unused_input="ignore")(*values))
    got = [[int(next(dims)) for _ in shape] for shape in shapes]
    actual = [list(np.shape(v)) for v in pytensor.function(list(inputs), node.outputs, mode=PY, on_unused_input="ignore")(*values)]
    return got, actual


def test_infer_shape_of_a_counted_loop_equals_its_outputs_shapes():
    node, _ = rich_loop()
    got, actual = inferred_and_actual(node, [X, S, K], [XV, SV, 3])
    assert got == actual == [[6], [5, 2], [4, 3], [4], []]
    assert not any(_reads(d, node) for shape in inferred(node, [X, S, K]) for d in shape)  # no dim reads the loop


def test_infer_shape_of_a_while_loop_reads_its_length_and_row_dependent_dims_from_the_outputs():
    node = while_loop()
    got, actual = inferred_and_actual(node, [X, R, M], [0.5, RV, MV])
    assert got == actual
    assert actual[0][0] < 7 and actual[4] == [3]  # the loop stopped early; the untraced state is its initial value's shape
    reads_the_loop = [[_reads(d, node) for d in shape] for shape in inferred(node, [X, R, M])]
    # the traced outputs' lengths come from the outputs (a while loop); a row's value-dependent dims too, the rest not
    assert reads_the_loop == [[True, False], [True, True], [True, False], [True, False, False, False, True], [False]]


def _reads(dim: Any, node: Apply) -> bool:
    from pytensor.graph.traversal import ancestors

    return isinstance(dim, Variable) and any(v.owner is node for v in ancestors([dim]))


def test_infer_shape_without_nit_sots_builds_no_step_shapes(monkeypatch: pytest.MonkeyPatch):
    calls: list[Any] = []
    monkeypatch.setattr(scan_module, "step_output_shapes", recording(calls, scan_module.step_output_shapes))
    ys = innergraph.scan(lambda v, y: y * v, sequences=[S], outputs_info=[X], return_updates=False)
    (node,) = [n for n in applys_between([X, S], [ys]) if isinstance(n.op, Scan)]
    (length,) = inferred(node, [X, S])[0]
    assert int(pytensor.function([X, S], length, mode=PY)(XV, SV)) == 7 and calls == []
    rich, _ = rich_loop()
    inferred(rich, [X, S, K])
    assert len(calls) == 1


W: Any = pt.dmatrix("w")
WV = np.arange(9.0).reshape(3, 3) / 20


def mit_sot_loop() -> Any:
    """A mit-sot (taps -2, -1) over a vector state and a scalar non-sequence: its gradient's loop has a mit-mot of two output taps."""
    init = pt.stack([X + S[:3], X * S[:3]])
    return pytensor.scan(
        lambda v, a, b, x: a * v * x + pt.sin(b), sequences=[S], outputs_info=[{"initial": init, "taps": [-2, -1]}], non_sequences=[X], return_updates=False
    )


def sit_sot_loop() -> Any:
    """A vector sit-sot and a matrix non-sequence: its gradient's loop has a mit-mot of one output tap, a matrix sit-sot and a scalar nit-sot."""
    return pytensor.scan(lambda v, a, w: pt.tanh(w @ a) * v, sequences=[S], outputs_info=[X + S[:3]], non_sequences=[W], return_updates=False)


@pytest.mark.parametrize("build, counts", [(mit_sot_loop, (2, 1)), (sit_sot_loop, (1, 1))], ids=["mit_sot", "sit_sot"])
def test_infer_shape_of_a_gradients_loop_with_mit_mots_equals_its_outputs_shapes(build: Any, counts: tuple[int, int]):
    """The loop of a gradient: a mit-mot (``counts``: its output taps) and a sit-sot (the non-sequence's cotangent)."""
    ys = build()
    fg = FunctionGraph([X, S, W], lift_graph([*grad((ys**2).sum(), [X, S, W], disconnected_inputs="ignore"), ys]), clone=False)
    loops = [n for n in fg.apply_nodes if isinstance(n.op, Scan) and n.op.layout.info.n_mit_mot]
    assert [(n.op.layout.info.n_mit_mot_outs, n.op.layout.info.n_sit_sot) for n in loops] == [counts]
    got, actual = inferred_and_actual(loops[0], [X, S, W], [XV, SV, WV])
    assert got == actual


# ---- gradients' helpers and the caches


def test_carry_policy_hands_over_only_the_carried_tags_the_node_has(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(scan_module, "CARRIED_TAGS", {"first", "second", "third"})
    node, _ = rich_loop()
    node.tag.first, node.tag.third, node.tag.other = 1, 3, 0
    native = node.op._native_for_graph(node.inputs)
    _carry_policy(node, native)
    assert (native.tag.first, native.tag.third) == (1, 3)
    assert not hasattr(native.tag, "second") and not hasattr(native.tag, "other")
    bare = node.op._native_for_graph(node.inputs)
    _carry_policy(None, bare)
    assert not hasattr(bare.tag, "first")


def test_repoint_map_sends_the_native_twins_outputs_and_other_inputs_to_the_consumers():
    node, _ = rich_loop()
    native = node.op._native_for_graph(node.inputs)
    assert _repoint_map(native, node.inputs, node.outputs) == dict(zip(native.outputs, node.outputs, strict=True))
    fresh = [v.type() for v in node.inputs[1:4]]
    other = native_scan(body_of(node.inputs[0]), node.op).make_node(*fresh, *node.inputs[4:])
    got = _repoint_map(other, node.inputs, node.outputs)
    assert got == {**dict(zip(other.outputs, node.outputs, strict=True)), **dict(zip(fresh, node.inputs[1:4], strict=True))}


def test_native_scan_is_built_once_per_body_op_mode_and_strictness():
    node, _ = rich_loop()
    body, op = body_of(node.inputs[0]), node.op
    first = native_scan(body, op)
    assert isinstance(first, NativeScan) and first.info == LOOP
    assert native_scan(body, Scan(op.layout, **op.flags())) is first
    other_mode = native_scan(body, Scan(op.layout, **{**op.flags(), "mode": PY}))
    not_strict = native_scan(body, Scan(op.layout, **{**op.flags(), "strict": False}))
    assert len({id(first), id(other_mode), id(not_strict)}) == 3
    assert other_mode.mode is PY and not not_strict.strict


def test_backend_native_scan_is_built_once_per_linker_input_types_and_query():
    node, outer = rich_loop()
    body, op, inputs = body_of(node.inputs[0]), node.op, node.inputs[1:]
    first = backend_native_scan(body, op, inputs, "cvm")
    assert isinstance(first, NativeScan) and first.info == LOOP and not hasattr(first.fgraph, "_compile_mode")
    assert backend_native_scan(body, op, inputs, "cvm") is first
    assert backend_native_scan(body, op, [v.type() for v in inputs], "cvm") is first  # the same types
    assert backend_native_scan(body, op, inputs, "cvm", get_default_mode().provided_optimizer) is first
    assert backend_native_scan(body, op, inputs, "py") is not first
    linker = PY.linker
    assert backend_native_scan(body, op, inputs, linker) is backend_native_scan(body, op, inputs, type(linker)())
    query = get_default_mode().provided_optimizer.excluding("fusion")
    assert backend_native_scan(body, op, inputs, "cvm", query) is not first


def test_a_loop_of_300_non_sequences_and_300_nit_sots_is_made():
    """Counts beyond CPython's cached small ints, where ``is not`` differs from ``!=`` on equal lengths."""
    y, ws = pt.dscalar("y"), [pt.dscalar(f"w{i}") for i in range(300)]
    info = dataclass_replace(LOOP, n_seqs=0, mit_sot_in_slices=(), n_nit_sot=300, n_untraced_sit_sot=0, n_non_seqs=300)
    native = NativeScan([y, *ws], [y + pt.add(*ws), *(w * 2.0 for w in ws)], info)
    n = K
    outer = [expand_empty(pt.shape_padleft(X), n), *[n] * 300, *[X + i for i in range(300)]]
    lifted = lift_graph(native.make_node(n, *outer).outputs)
    (node,) = {o.owner for o in lifted}
    assert node is not None and isinstance(node.op, Scan) and len(node.outputs) == 301
    assert len(node.op.make_node(*node.inputs).outputs) == 301
    with pytest.raises(ArityError, match="expected 602 outer inputs"):
        node.op.make_node(*node.inputs[:-1])


def test_backend_native_scan_leaves_the_pipelines_passes_out_for_a_body_the_pipeline_rewrote(monkeypatch: pytest.MonkeyPatch):
    """``exp(y) * 1 + 0``: canonicalized to ``exp(y)`` for a body the pipeline did not rewrite, left as it is for one it did."""
    ys = innergraph.scan(lambda y: pt.exp(y) * 1.0 + 0.0, outputs_info=[X], n_steps=3, return_updates=False)
    (node,) = [n for n in applys_between([X], [ys]) if isinstance(n.op, Scan)]
    body, inputs = body_of(node.inputs[0]), node.inputs[1:]
    ops = lambda native: [type(getattr(n.op, "scalar_op", n.op)).__name__ for n in native.fgraph.toposort()]  # noqa: E731
    assert ops(backend_native_scan(body, node.op, inputs, "cvm")) == ["Exp"]
    monkeypatch.setattr(scan_module, "skips_pipeline_passes", lambda body: True)
    assert ops(backend_native_scan(body, node.op, inputs, "cvm")) == ["Exp", "Mul", "Add"]
