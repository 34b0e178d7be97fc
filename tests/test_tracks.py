"""Walking rewrites guarded by their tracks: skipped only where they could change nothing."""

import io

import pytensor.tensor as pt
from pytensor.compile.mode import optdb
from pytensor.graph.basic import equal_computations
from pytensor.graph.fg import FunctionGraph
from pytensor.graph.rewriting.basic import GraphRewriter, SequentialGraphRewriter, in2out, node_rewriter
from pytensor.tensor.elemwise import CAReduce, Elemwise
from pytensor.tensor.math import Argmax

from innergraph.rewriting.tracks import UnlessUntracked, skipping_untracked, tracked_classes


def recording(op_class, seen):
    @node_rewriter([op_class])
    def record(fgraph, node):
        seen.append(node.op)
        return False

    return in2out(record, name=f"record_{op_class.__name__}")


def test_a_member_whose_tracked_ops_are_absent_is_skipped():
    x = pt.dvector("x")
    fg = FunctionGraph([x], [pt.exp(x) + 1])
    seen: list = []
    guarded = skipping_untracked(SequentialGraphRewriter(recording(Argmax, seen), recording(Elemwise, seen)))
    assert [type(m) for m in guarded.data] == [UnlessUntracked, UnlessUntracked]
    guarded.rewrite(fg)
    assert seen and all(isinstance(op, Elemwise) for op in seen)  # the Argmax walker never looked at a node


class IntroduceSum(GraphRewriter):
    """Replaces the output ``y`` by ``y + y.sum()``: a CAReduce node the graph had none of."""

    def apply(self, fgraph):
        (out,) = fgraph.outputs
        fgraph.replace(out, out + out.sum(), import_missing=True)


def test_a_tracked_node_an_earlier_member_introduced_is_seen():
    x = pt.dvector("x")
    fg = FunctionGraph([x], [pt.exp(x)])
    seen: list = []
    skipping_untracked(SequentialGraphRewriter(IntroduceSum(), recording(CAReduce, seen))).rewrite(fg)
    assert len(seen) == 1 and isinstance(seen[0], CAReduce)


def test_in_place_passes_track_their_op_class():
    assert tracked_classes(optdb["inplace_elemwise"]) == (Elemwise,)
    assert tracked_classes(optdb["add_destroy_handler"]) is None  # not known: always runs


def test_guarded_late_passes_change_a_body_exactly_as_unguarded_ones():
    from innergraph.protocol.runtime import body_rewriter

    a, b = pt.dmatrix("a"), pt.dvector("b")

    def fgraph():
        from pytensor.compile.aliasing import add_supervisor_to_fgraph
        from pytensor.compile.io import In

        fg = FunctionGraph([a, b], [pt.linalg.solve(a + 1, b).sum() * 2], clone=True)
        add_supervisor_to_fgraph(fg, [In(v, borrow=True, mutable=False) for v in fg.inputs], accept_inplace=True)
        return fg

    class Unmarked:
        cache: dict = {}

    rewriter = body_rewriter(Unmarked(), "numba")  # type: ignore[arg-type]  # any object with a cache will do
    plain, guarded = fgraph(), fgraph()
    rewriter.rewrite(plain)
    skipping_untracked(rewriter).rewrite(guarded)
    assert any(n.op.destroy_map for n in guarded.apply_nodes)  # the solve, or the add, now works in place
    assert equal_computations(guarded.outputs, plain.outputs, guarded.inputs, plain.inputs)
    assert [n.op for n in guarded.toposort()] == [n.op for n in plain.toposort()]


def test_profiles_print_for_skipped_and_run_members():
    from pytensor.compile.aliasing import add_supervisor_to_fgraph
    from pytensor.compile.io import In

    x = pt.dvector("x")
    fg = FunctionGraph([x], [pt.exp(x) * 2], clone=True)
    add_supervisor_to_fgraph(fg, [In(v, borrow=True, mutable=False) for v in fg.inputs], accept_inplace=True)
    members = recording(Argmax, []), recording(Elemwise, []), optdb["inplace_elemwise"]
    guarded = skipping_untracked(SequentialGraphRewriter(*members))
    guarded.rewrite(fg)
    assert any(n.op.destroy_map for n in fg.apply_nodes)  # the in-place pass ran
    stream = io.StringIO()
    SequentialGraphRewriter.print_profile(stream, guarded.pre_profile)  # each member's own format, none for the skipped
    text = stream.getvalue()
    assert "loop time" in text and "InplaceElemwiseOptimizer" in text


def test_an_op_pattern_tracks_its_op_type():
    from pytensor.graph.rewriting.unify import OpPattern

    @node_rewriter([OpPattern(CAReduce, axis=None), Argmax])
    def reduce_all(fgraph, node):
        return False

    assert tracked_classes(in2out(reduce_all)) == (CAReduce, Argmax)


def test_the_guarded_sequence_is_made_once_per_sequence():
    seen: list = []
    sequence = SequentialGraphRewriter(recording(Argmax, seen), recording(Elemwise, seen))
    guarded = skipping_untracked(sequence)
    assert skipping_untracked(sequence) is guarded
    other = SequentialGraphRewriter(recording(Argmax, seen))
    assert skipping_untracked(other) is not guarded and skipping_untracked(other) is skipping_untracked(other)


def test_a_guarded_members_summary_and_profile_are_its_own():
    member = recording(Elemwise, [])
    guard = UnlessUntracked(member, (Elemwise,))
    ours, theirs = io.StringIO(), io.StringIO()
    guard.print_summary(ours)
    member.print_summary(theirs)
    assert ours.getvalue() == theirs.getvalue() and ours.getvalue().startswith("WalkingGraphRewriter")

    x = pt.dvector("x")
    fg = FunctionGraph([x], [pt.exp(x) + 1], clone=True)
    prof = guard.apply(fg)
    ours, theirs = io.StringIO(), io.StringIO()
    UnlessUntracked.print_profile(ours, prof)
    type(member).print_profile(theirs, prof[1])
    assert ours.getvalue() == theirs.getvalue() and ours.getvalue()
