"""Issue 24: duplicate states and outputs, equal loops merged first, carried cotangents.

Structural before/after tests of each rule (`check_rewrite` compares values and
gradients of the graph before and after), then whole-pipeline checks against
vanilla PyTensor under every linker on the issue's cases.
"""

import dataclasses
import functools

from collections.abc import Callable
from typing import Any

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.graph.basic import ancestors
from pytensor.graph.fg import FunctionGraph
from pytensor.graph.rewriting.basic import MergeOptimizer
from pytensor.graph.rewriting.utils import rewrite_graph
from pytensor.tensor.rewriting.shape import ShapeFeature

import innergraph
from innergraph_bench import cases
from innergraph.ops.call import Call
from innergraph.ops.ifelse import IfElse
from innergraph.ops.scan import Scan
from innergraph.rewriting.carry import carry_cotangents
from innergraph.rewriting.duplicates import merge_duplicate_slots
from innergraph.rewriting.lengths import final_row_reads, length_offset
from innergraph.rewriting.merge_loops import merge_loops
from innergraph.rewriting.untrace import untrace_final_states
from innergraph.stats import graph_stats, unread_buffers
from innergraph.testing.programs import LINKERS, mode_for
from innergraph.testing.rewrites import check_rewrite
from vanilla import vanilla_function
from typed import call, grad, ifelse

x, a0 = pt.dvector("x"), pt.dscalar("a0")


def merged_then(rewrite):
    """``rewrite`` after MergeOptimizer, as in the pipeline (equal outer computations are one variable)."""

    def run(fgraph):
        MergeOptimizer().rewrite(fgraph)
        return rewrite(fgraph)

    run.__name__ = rewrite.__name__
    return run


DUPLICATES = merged_then(merge_duplicate_slots)


def nodes_of(fgraph, cls):
    return [n for n in fgraph.toposort() if isinstance(n.op, cls)]


def scan_infos(fn):
    return [n.op.info for n in fn.maker.fgraph.toposort() if hasattr(n.op, "info")]


def compiled(build: Callable[[], tuple[list, Any]], linker, vanilla, first_call=None):
    """``pytensor.function(*build())`` under ``linker``; vanilla is built, compiled and (with
    ``first_call``) first called with innergraph uninstalled (Numba compiles at the first call)."""
    if vanilla:
        return vanilla_function(build, mode_for(linker), first_call=first_call)
    return pytensor.function(*build(), mode=mode_for(linker))


# -- duplicate states and outputs --------------------------------------------------


def test_two_states_with_the_same_update_and_initial_value_are_one():
    ys = innergraph.scan(
        lambda s, a, b: [a * 0.5 + s, b * 0.5 + s], sequences=[x], outputs_info=[a0, a0], return_updates=False
    )
    fg = check_rewrite(DUPLICATES, [x, a0], [ys[0][-1] + ys[1][-2]])
    ((node),) = nodes_of(fg, Scan)
    assert node.op.layout.info.n_sit_sot == 1


def test_states_that_read_each_other_symmetrically_are_one():
    # a' = a * b + s, b' = b * a + s: with a0 = b0 the two agree at every step
    ys = innergraph.scan(
        lambda s, a, b: [a * b * 0.5 + s, b * a * 0.5 + s], sequences=[x], outputs_info=[a0, a0], return_updates=False
    )
    fg = check_rewrite(DUPLICATES, [x, a0], [ys[0][-1] * ys[1][-1]])
    ((node),) = nodes_of(fg, Scan)
    assert node.op.layout.info.n_sit_sot == 1


def test_states_with_other_initial_values_or_updates_stay_two():
    b0 = pt.dscalar("b0")
    same_update = innergraph.scan(
        lambda s, a, b: [a * 0.5 + s, b * 0.5 + s], sequences=[x], outputs_info=[a0, b0], return_updates=False
    )
    other_update = innergraph.scan(
        lambda s, a, b: [a * 0.5 + s, b * 0.25 + s], sequences=[x], outputs_info=[a0, a0], return_updates=False
    )
    for ys in (same_update, other_update):
        check_rewrite(DUPLICATES, [x, a0, b0], [ys[0][-1] + ys[1][-1]], expect_change=False)


def test_two_per_step_outputs_of_one_body_output_are_one():
    ys = innergraph.scan(
        lambda s, a: [a * 0.5 + s, pt.sin(s) * a, pt.sin(s) * a], sequences=[x], outputs_info=[a0, None, None],
        return_updates=False,
    )
    fg = check_rewrite(DUPLICATES, [x, a0], [ys[1].sum() * ys[2][1]], gradients="none")
    ((node),) = nodes_of(fg, Scan)
    assert node.op.layout.info.n_nit_sot == 1


def test_duplicate_outputs_of_calls_and_conditionals_are_one():
    y = pt.dvector("y")
    first, second = call(lambda v: [pt.sin(v).sum(), pt.sin(v).sum()], x)
    fg = check_rewrite(DUPLICATES, [x], [first * second])
    ((node),) = nodes_of(fg, Call)
    assert len(node.outputs) == 1
    then, other = ifelse(a0 > 0, [pt.exp(x).sum(), pt.exp(x).sum()], [y.sum(), y.sum()])
    fg = check_rewrite(DUPLICATES, [x, y, a0], [then * other])
    ((node),) = nodes_of(fg, IfElse)
    assert len(node.outputs) == 1


def test_conditional_outputs_equal_in_one_branch_only_stay_two():
    y = pt.dvector("y")
    then, other = ifelse(a0 > 0, [pt.exp(x).sum(), pt.exp(x).sum()], [y.sum(), y.max()])
    check_rewrite(DUPLICATES, [x, y, a0], [then * other], expect_change=False)


def test_merging_duplicates_counts_the_consumers_it_changes():
    """A call of one argument twice (two arguments, not states: nothing to merge) first, then a
    loop with two equal states over its result, then a call with two equal outputs: 2, then 0."""
    c = pt.dscalar("c")
    start = call(lambda u, v: u * 2.0 + v, c, c)
    ys = innergraph.scan(lambda s, a, b: [a * 0.5 + s, b * 0.5 + s], sequences=[x], outputs_info=[start, start], return_updates=False)
    first, second = call(lambda v: [pt.sin(v).sum(), pt.sin(v).sum()], ys[0])
    counts = []

    def merge(fgraph):
        counts.append(DUPLICATES(fgraph))
        return counts[-1]

    fg = check_rewrite(merge, [x, c], [ys[1][-1] + first * second])
    assert counts == [2] and merge_duplicate_slots(fg) == 0
    ((loop),) = nodes_of(fg, Scan)
    assert loop.op.layout.info.n_sit_sot == 1
    two_args, one_output = sorted(nodes_of(fg, Call), key=lambda n: -len(n.inputs))  # the function input and its arguments
    assert len(two_args.inputs) == 3 and len(one_output.inputs) == 2 and len(one_output.outputs) == 1


def test_a_call_of_300_arguments_without_duplicates_is_left():
    """More slots than CPython's cached small ints: the test that nothing repeats compares lengths by value."""
    vs = [pt.dscalar(f"v{i}") for i in range(300)]
    out = call(lambda *ps: pt.add(*ps), *vs)
    fg = FunctionGraph(vs, [out], clone=False)
    assert merge_duplicate_slots(fg) == 0
    assert fg.outputs[0] is out


def test_duplicate_carries_of_a_while_loop_stay():
    """Two carries with one initial value and one update, in a loop of two bodies (condition and
    step): the rule merges states of one-body loops only, so nothing changes."""
    w = innergraph.while_loop(lambda s: s[0] < 5.0, lambda s: (s[0] * 2.0 + 1.0, s[1] * 2.0 + 1.0), (a0, a0), max_steps=10)
    fg = FunctionGraph([a0], list(w), clone=True)
    MergeOptimizer().rewrite(fg)
    (node,) = [n for n in fg.apply_nodes if type(n.op).__name__ == "WhileLoop"]
    assert merge_duplicate_slots(fg) == 0
    assert fg.outputs[0].owner is node and len(node.outputs) == 2


@pytest.mark.parametrize("factors", [(0.5, 0.25), (0.25, 0.5)])
def test_duplicate_initial_values_with_other_updates_in_either_order_stay_two(factors):
    """The updates' encodings differ, whichever is first (the test is their equality, not an order)."""
    f1, f2 = factors
    ys = innergraph.scan(lambda s, a, b: [a * f1 + s, b * f2 + s], sequences=[x], outputs_info=[a0, a0], return_updates=False)
    fg = check_rewrite(DUPLICATES, [x, a0], [ys[0][-1] + ys[1][-1]], expect_change=False)
    ((node),) = nodes_of(fg, Scan)
    assert node.op.layout.info.n_sit_sot == 2


def test_duplicate_states_whose_updates_are_one_variable_are_one():
    """Both states' update is one variable of the body (it reads neither state): the updates are
    equal as they are, with no encoding to compare."""

    def step(s, a, b):
        u = s * 2.0 + 1.0
        return [u, u]

    ys = innergraph.scan(step, sequences=[x], outputs_info=[a0, a0], return_updates=False)
    counts = []

    def merge(fgraph):
        counts.append(DUPLICATES(fgraph))
        return counts[-1]

    fg = check_rewrite(merge, [x, a0], [ys[0][-1] * ys[1][-1]])
    assert counts == [1]
    ((node),) = nodes_of(fg, Scan)
    assert node.op.layout.info.n_sit_sot == 1


# -- equal loops are merged before different loops ----------------------------------


def issue_example():
    r1 = pytensor.scan(lambda s, acc: acc * 0.5 + s, sequences=[x], outputs_info=[a0], return_updates=False)
    r2 = pytensor.scan(
        lambda s, acc: (acc * 1 + 0) * 0.5 + s * pt.exp(0), sequences=[x], outputs_info=[a0], return_updates=False
    )
    return [x, a0], [r1[-1] + r2[-1]]


def test_the_issue_example_is_one_loop_with_one_state():
    inputs, outputs = issue_example()
    fn = pytensor.function(inputs, outputs, mode=mode_for("cvm"))
    (info,) = scan_infos(fn)
    assert info.n_sit_sot + info.n_untraced_sit_sot == 1 and info.n_seqs == 1
    vanilla = compiled(issue_example, "cvm", vanilla=True)
    (theirs,) = scan_infos(vanilla)  # PyTensor's ScanMerge: one loop, two equal recurrences
    assert theirs.n_sit_sot + theirs.n_untraced_sit_sot == 2
    values = [np.linspace(-1, 1, 7), 0.3]
    np.testing.assert_allclose(fn(*values), vanilla(*values), rtol=1e-12)


def test_merge_loops_merges_equal_loops_first_and_keeps_different_ones_side_by_side():
    n = pt.iscalar("n")

    def loop(decay):
        return innergraph.scan(lambda acc: acc * decay + 1, outputs_info=[a0], n_steps=n, return_updates=False)

    # three loops over the same n_steps, two of them equal (built apart: not merged yet)
    outputs = [loop(0.5)[-1] + loop(0.5)[-1] + loop(0.25)[-1]]
    fg = check_rewrite(merge_loops, [n, a0], outputs, values=[(np.int32(5), 0.3), (np.int32(2), -0.7)])
    ((node),) = nodes_of(fg, Scan)
    assert node.op.layout.info.n_sit_sot == 2  # the equal loops are one, merged with the other one


# -- carried cotangents -------------------------------------------------------------


def test_an_unread_mit_mot_becomes_a_carried_state_and_a_sequence():
    ys = innergraph.scan(lambda s, acc: acc * pt.sin(s) + s, sequences=[x], outputs_info=[a0], return_updates=False)
    (g,) = grad((ys**2).sum(), [x])  # the initial value's cotangent is not asked for
    fg = check_rewrite(carry_cotangents, [x, a0], [g], gradients="none")
    (reverse,) = [n for n in nodes_of(fg, Scan) if n.op.layout.info.n_mit_mot == 0 and n.op.layout.info.n_untraced_sit_sot]
    info = reverse.op.layout.info
    assert info.n_untraced_sit_sot >= 1 and graph_stats(fg)["unread_buffers"] == 0


def test_a_cotangent_carried_over_two_steps_becomes_a_mit_sot():
    initial = pt.dvector("initial")
    ys = innergraph.scan(
        lambda s, acc: acc * pt.sin(s) + s, sequences=[x], outputs_info=[{"initial": initial, "taps": [-2]}],
        return_updates=False,
    )
    (g,) = grad((ys**2).sum(), [x])
    values = [(np.linspace(-1, 1, 6), np.array([0.3, -0.2])), (np.linspace(0, 2, 4), np.array([1.0, 0.5]))]
    fg = check_rewrite(carry_cotangents, [x, initial], [g], gradients="none", values=values)
    infos = [n.op.layout.info for n in nodes_of(fg, Scan)]
    assert [i.n_mit_mot for i in infos] == [0, 0] and sorted(i.mit_sot_in_slices for i in infos) == [((-2,),), ((-2,),)]


def canonicalized_then(rewrite):
    """``rewrite`` after canonicalize with shape inference, as in the pipeline (lengths read ``n_steps + k``)."""

    def run(fgraph):
        fgraph.attach_feature(ShapeFeature())
        rewrite_graph(fgraph, include=("canonicalize",), clone=False)
        return rewrite(fgraph)

    run.__name__ = rewrite.__name__
    return run


CARRY = canonicalized_then(carry_cotangents)


def test_a_mit_mot_buffer_read_at_more_than_its_final_position_is_kept():
    ys = innergraph.scan(lambda s, acc: acc * pt.sin(s) + s, sequences=[x], outputs_info=[a0], return_updates=False)
    (g,) = grad((ys**2).sum(), [a0])
    (reverse,) = [v.owner for v in ancestors([g]) if v.owner and isinstance(v.owner.op, Scan) and v.owner.op.layout.info.n_mit_mot]
    for other_rows in (reverse.outputs[0][1:].sum(), reverse.outputs[0][::-1][1]):  # rows besides the final one
        fg = check_rewrite(CARRY, [x, a0], [g, other_rows], gradients="none", expect_change=False)
        assert sum(n.op.layout.info.n_mit_mot for n in nodes_of(fg, Scan)) == 1


def test_a_mit_mot_read_only_at_its_final_position_becomes_a_carried_state():
    ys = innergraph.scan(lambda s, acc: acc * pt.sin(s) + s, sequences=[x], outputs_info=[a0], return_updates=False)
    (g,) = grad((ys**2).sum(), [a0])  # the initial value's cotangent: the buffer's last row
    values = [(np.linspace(-1, 1, n), 0.3) for n in (0, 1, 6)]
    fg = check_rewrite(CARRY, [x, a0], [g], gradients="none", values=values)
    infos = [n.op.layout.info for n in nodes_of(fg, Scan)]
    assert [i.n_mit_mot for i in infos] == [0, 0] and sum(i.n_untraced_sit_sot for i in infos) == 1
    assert graph_stats(fg)["unread_buffers"] == 0


def test_a_mit_sot_gradient_with_two_output_taps_becomes_two_carried_states():
    initial = pt.tensor("initial", shape=(2,), dtype="float64")
    ys = innergraph.scan(
        lambda s, a2, a1: a1 * pt.sin(s) + 0.3 * a2 + s, sequences=[x],
        outputs_info=[{"initial": initial, "taps": [-2, -1]}], return_updates=False,
    )
    (g,) = grad((ys**2).sum(), [initial])  # reads the buffer's last two rows, reversed
    before = FunctionGraph([x, initial], [g], clone=True)
    (reverse,) = [n for n in nodes_of(before, Scan) if n.op.layout.info.n_mit_mot]
    assert reverse.op.layout.info.mit_mot_out_slices == ((2, 1),)  # what PyTensor's gradient builds
    values = [(np.linspace(-1, 1, n), np.array([0.3, -0.2])) for n in (0, 1, 5)]
    fg = check_rewrite(CARRY, [x, initial], [g], gradients="none", values=values)
    infos = [n.op.layout.info for n in nodes_of(fg, Scan)]
    assert [i.n_mit_mot for i in infos] == [0, 0] and sum(i.n_untraced_sit_sot for i in infos) == 2


@pytest.mark.parametrize("linker", ["py", "cvm", "numba"])
def test_final_position_reads_give_vanilla_numbers_without_a_mit_mot(linker):
    initial = pt.tensor("initial", shape=(2,), dtype="float64")

    def build():
        ys = pytensor.scan(lambda s, acc: acc * pt.sin(s) + s, sequences=[x], outputs_info=[a0], return_updates=False)
        zs = pytensor.scan(
            lambda s, a2, a1: a1 * pt.cos(s) + 0.3 * a2 + s, sequences=[x],
            outputs_info=[{"initial": initial, "taps": [-2, -1]}], return_updates=False,
        )
        return [x, a0, initial], grad((ys**2).sum() + (zs**2).sum(), [a0, initial])

    first = [np.linspace(-1, 1, 7), 0.3, np.array([0.3, -0.2])]
    ours, theirs = compiled(build, linker, vanilla=False), compiled(build, linker, vanilla=True, first_call=first)
    for n in (0, 1, 7):
        values = [np.linspace(-1, 1, n), 0.3, np.array([0.3, -0.2])]
        for a, b in zip(ours(*values), theirs(*values), strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)
    assert sum(i.n_mit_mot for i in scan_infos(ours)) == 0
    assert sum(i.n_mit_mot for i in scan_infos(theirs)) >= 1


def test_final_rows_are_read_through_slices_and_reversals_only_where_provable():
    n = pt.iscalar("n")
    allocated: Any = pt.alloc(0.0, n + 2)  # one tensor (pt.alloc's annotation is a union)
    twice: Any = pt.alloc(0.0, n * 2)
    buffer = allocated[::-1]
    assert length_offset(buffer, n) == 2 and length_offset(twice, n) is None
    reads = [buffer[-1], buffer[-2:], buffer[:-3:-1], buffer[::-1][:1], buffer[::-1][1]]
    fg = FunctionGraph([n], reads, clone=False)
    found = final_row_reads(fg, buffer, rows=2, minimum=2)
    assert found is not None
    assert [found[r] for r in reads] == [0, (1, 0), (0, 1), (0,), 1]
    for other in (buffer[0], buffer[-3], buffer[1:], buffer[:-1], buffer[::-1][:3]):
        assert final_row_reads(FunctionGraph([n], [other], clone=False), buffer, rows=2, minimum=2) is None


def test_an_unread_forward_trace_becomes_a_carried_state():
    # m only feeds ll; only ll's final value is read: m's trace is an unread buffer
    ms, lls = innergraph.scan(
        lambda s, m, ll: [m * 0.5 + s, ll + (s - m) ** 2], sequences=[x], outputs_info=[a0, a0 * 0], return_updates=False
    )
    before = FunctionGraph([x, a0], [lls[-1]], clone=True)
    assert len(unread_buffers(before)) == 1
    fg = check_rewrite(canonicalized_then(untrace_final_states), [x, a0], [lls[-1]], gradients="none")
    ((node),) = nodes_of(fg, Scan)
    assert (node.op.layout.info.n_sit_sot, node.op.layout.info.n_untraced_sit_sot) == (0, 2)
    assert unread_buffers(fg) == []


# -- the issue's cases, whole pipeline, against vanilla ------------------------------

SMALL = {
    "ar2": cases.ar2(30),
    "garch": cases.garch(30),
    "filter": cases.filter_loglik(30),
    "1669-d2": cases.issue_1669(2),
    "1669-d3": cases.issue_1669(3),
}


@pytest.fixture(scope="module")
def stats_under_cvm():
    out = {}
    for name, case in SMALL.items():
        fns = {v: compiled(functools.partial(case.build, v), "cvm", vanilla=(v == "vanilla"), first_call=case.values)
               for v in ("vanilla", "innergraph")}
        results = {v: fn(*case.values) for v, fn in fns.items()}
        for ours, theirs in zip(results["innergraph"], results["vanilla"], strict=True):
            np.testing.assert_allclose(ours, theirs, rtol=1e-10, atol=1e-12)
        out[name] = {v: graph_stats(fn) for v, fn in fns.items()}
    return out


@pytest.mark.parametrize("name", list(SMALL))
def test_no_unread_buffer_and_no_dead_output_on_the_issue_cases(stats_under_cvm, name):
    vanilla, ours = stats_under_cvm[name]["vanilla"], stats_under_cvm[name]["innergraph"]
    assert ours["unread_buffers"] == ours["dead_outputs"] == 0
    assert vanilla["unread_buffers"] >= 1  # what vanilla leaves: reverse-loop buffers nobody reads


def test_the_filter_gradient_keeps_six_buffers_in_vanilla_and_none_here(stats_under_cvm):
    assert stats_under_cvm["filter"]["vanilla"]["unread_buffers"] == 6
    assert stats_under_cvm["filter"]["innergraph"]["unread_buffers"] == 0


@pytest.mark.parametrize("linker", [lk for lk in LINKERS if lk != "cvm"])
def test_the_filter_gradient_gives_vanilla_numbers(linker):
    case = cases.filter_loglik(12)
    if linker == "jax":
        case = dataclasses.replace(case, build=cases._with_static_shapes(case))
    fns = {v: compiled(functools.partial(case.build, v), linker, vanilla=(v == "vanilla"), first_call=case.values)
           for v in ("vanilla", "innergraph")}
    ours, theirs = (fns[v](*case.values) for v in ("innergraph", "vanilla"))
    for a, b in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
