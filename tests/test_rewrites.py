"""The consumer rewrites (design/rewrites.md): each structurally and differentially.

Every rewrite is applied with `innergraph.testing.rewrites.check_rewrite`, which
evaluates the graph before and after on random inputs and compares values and
gradients; the tests then assert what changed in the graph.
"""

import contextlib

from typing import Any

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.compile.mode import get_default_mode, optdb
from pytensor.graph.basic import Constant, equal_computations
from pytensor.graph.fg import FunctionGraph
from pytensor.graph.rewriting.basic import MergeOptimizer, in2out
from pytensor.tensor.basic import Alloc
from pytensor.tensor.elemwise import DimShuffle
from pytensor.tensor.rewriting.basic import constant_folding
from pytensor.tensor.rewriting.subtensor_lift import local_subtensor_of_alloc
from pytensor.tensor.subtensor import IncSubtensor
from pytensor.ifelse import ifelse as native_ifelse

import innergraph
from innergraph.core.graph import InnerGraph, body_of, scope_toposort
from innergraph.ops.call import Call
from innergraph.ops.ifelse import IfElse
from innergraph.ops.loop import WhileLoop
from innergraph.ops.scan import Scan
from innergraph.rewriting.args import LARGE_CONSTANT, merge_arguments, outline_constants, pass_large_constants
from innergraph.rewriting.fusion import fuse_body
from innergraph.rewriting.dce import remove_dead_slots
from innergraph.rewriting.forward import forward_params
from innergraph.rewriting.licm import hoist_invariants
from innergraph.rewriting.merge_loops import merge_loops
from innergraph.rewriting.lift import lift_native
from innergraph.rewriting.push_out import push_out_dot_sums, push_out_per_step_outputs, push_out_sequence_work
from innergraph.protocol.signature import FORMS, Meaning, sharing_rebuilt_functions
from innergraph.rewriting.simplify import simplify_consumers
from innergraph.rewriting.untrace import last_step_reads, untrace_final_states
from innergraph.testing.rewrites import check_rewrite, rewritten
from vanilla import vanilla_function, vanilla_values
from typed import call, grad, ifelse as ig_ifelse, recording

x0, c = pt.dscalar("x0"), pt.dscalar("c")
d = pt.dscalar("d")
xs = pt.dvector("xs")


def folded_then(rewrite):
    """``rewrite`` after constant folding (an argument becomes a constant in the pipeline)."""

    def run(fgraph):
        in2out(constant_folding, local_subtensor_of_alloc).rewrite(fgraph)  # as canonicalize does
        return rewrite(fgraph)

    run.__name__ = rewrite.__name__
    return run


def merged_then(rewrite):
    """``rewrite`` after MergeOptimizer, as in the pipeline (equal outer computations are one variable)."""

    def run(fgraph):
        MergeOptimizer().rewrite(fgraph)
        return rewrite(fgraph)

    run.__name__ = rewrite.__name__
    return run


def canonicalized_then(rewrite):
    """``rewrite`` after PyTensor's canonicalize (``x[1:][-1]`` is ``x[-1]`` there), as in the pipeline."""
    from pytensor.compile.mode import optdb
    from pytensor.graph.rewriting.db import RewriteDatabaseQuery
    from pytensor.tensor.rewriting.shape import ShapeFeature

    canonicalize = optdb["canonicalize"].query(RewriteDatabaseQuery(include=["fast_run"], exclude=["innergraph"]))

    def run(fgraph):
        fgraph.attach_feature(ShapeFeature())
        MergeOptimizer().rewrite(fgraph)
        canonicalize.rewrite(fgraph)
        return rewrite(fgraph)

    run.__name__ = rewrite.__name__
    return run


def nodes_of(fgraph, op_type):
    return [n for n in fgraph.apply_nodes if isinstance(n.op, op_type)]


def only_scan(fgraph):
    (node,) = nodes_of(fgraph, Scan)
    return node, node.op.layout.info


# -- dead outputs and params -------------------------------------------------------


def test_dead_states_of_every_kind_are_removed_together():
    def step(x, m2, m1, s, a, b, k):
        # a and b only feed each other, so they die together; the mit-sot and nit-sot are unused
        return m1 + x * m2, s * k + x, b + 1, a * 2, x * k

    mit_sot = {"initial": pt.stack([x0, x0]), "taps": [-2, -1]}
    outs = innergraph.scan(
        step, sequences=[xs], outputs_info=[mit_sot, x0, x0, x0, None], non_sequences=[c], return_updates=False
    )
    fg = check_rewrite(remove_dead_slots, [x0, xs, c], [outs[1]])
    _, info = only_scan(fg)
    assert (info.n_mit_sot, info.n_sit_sot, info.n_nit_sot, info.n_seqs, info.n_non_seqs) == (0, 1, 0, 1, 1)
    assert innergraph.graph_stats(fg)["unused_outputs"] == 0


def test_a_dead_untraced_state_is_removed():
    from pytensor.tensor.random.type import random_generator_type

    rng = random_generator_type("rng")

    def step(y, g):
        next_g, _ = pt.random.normal(0, 1, rng=g).owner.outputs
        return y + 1, next_g  # nothing live reads the generator

    ys, _ = innergraph.scan(step, outputs_info=[x0, rng], n_steps=3, return_updates=False)
    values = [[0.5, np.random.default_rng(0)], [-1.0, np.random.default_rng(1)]]
    fg = check_rewrite(remove_dead_slots, [x0, rng], [ys], values=values)
    assert only_scan(fg)[1].n_untraced_sit_sot == 0


def test_a_param_read_by_a_live_output_keeps_its_state():
    outs = innergraph.scan(
        lambda x, s, t: (s + t, t + x), sequences=[xs], outputs_info=[x0, c], return_updates=False
    )
    fg = check_rewrite(remove_dead_slots, [x0, xs, c], [outs[0]], expect_change=False)
    assert only_scan(fg)[1].n_sit_sot == 2
    node = only_scan(fg)[0]
    assert remove_dead_slots(fg) == 0 and only_scan(fg)[0] is node  # nothing dead: no rebuild, no change counted


def test_while_condition_keeps_what_it_reads():
    from pytensor.scan.utils import until

    outs = innergraph.scan(
        lambda s, t, u, k: ([s * 2, t + 1, u * 3], until(t > k)),
        outputs_info=[x0, x0, x0],
        non_sequences=[c],
        n_steps=10,
        return_updates=False,
    )
    fg = check_rewrite(remove_dead_slots, [x0, c], [outs[0]], values=[[0.5, 3.0], [1.0, 0.5]])
    node, info = only_scan(fg)
    assert info.as_while and info.n_sit_sot == 2 and info.n_non_seqs == 1  # t and k feed the condition


def test_mit_mot_states_of_gradients_are_pruned():
    ys = innergraph.scan(lambda y, k: y * k, outputs_info=[x0], non_sequences=[c], n_steps=4, return_updates=False)
    _, g_x0 = grad(ys[-1], [c, x0])  # the backward scan also accumulates the gradient for k
    fg = check_rewrite(merged_then(remove_dead_slots), [x0, c], [g_x0])
    assert innergraph.graph_stats(fg)["unused_outputs"] == 0


@pytest.mark.parametrize("two_params_in", ["else", "then"])
def test_each_branch_keeps_the_params_its_own_live_outputs_read(two_params_in):
    """A branch reading ``c * d`` does not keep the other branch's second param alive.

    The branches' params are positional placeholders, so both bodies' second param is one
    `NominalVariable`: a walk that mixed the bodies' outputs (``bb <= b`` or ``bb >= b``
    for ``bb == b``, mutants that survived ``dce.py``'s run) kept ``d`` in the branch that
    reads only ``c``.
    """
    one, two = [pt.exp(c), pt.sin(d)], [c * d, x0 * 3]
    then, other = (one, two) if two_params_in == "else" else (two, one)
    (a, _) = ig_ifelse(x0 > 0, then, other)
    fg = check_rewrite(remove_dead_slots, [x0, c, d], [a], values=[[0.5, 1.5, -2.0], [-1.0, 0.3, 4.0]])
    (node,) = nodes_of(fg, IfElse)
    expected = [1, 2] if two_params_in == "else" else [2, 1]
    assert [len(body_of(f).param_types) for f in node.inputs[1:3]] == expected


def test_a_consumer_of_many_slots_with_nothing_dead_is_left_as_it_is():
    """300 params, all read: no rebuild and no change counted (slot counts above CPython's cached ints)."""
    ps = [pt.dscalar(f"p{i}") for i in range(300)]
    total = call(lambda *qs: pt.add(*qs), *ps)
    fg = FunctionGraph(ps, [total], clone=False)
    (node,) = nodes_of(fg, Call)
    assert remove_dead_slots(fg) == 0 and nodes_of(fg, Call) == [node]


def test_loops_over_one_body_walk_it_once_and_live_slots_needs_no_memo(monkeypatch):
    """K loops over one step body walk it once (the `leaves` memo), and `live_slots` alone gives the same slots.

    Without the memo shared across consumers (``live_slots`` starting a fresh one) the
    numbers stay right and the walks grow with K; the mutation run of ``dce.py`` found no
    test that would notice.
    """
    from innergraph.protocol.signature import consumers
    from innergraph.rewriting import dce

    def step(x, s, t):
        return s * x, t + 1  # t is dead: nothing reads it but itself

    def walks(k):
        seqs = [xs, xs * 2, xs + 1][:k]
        outs = [innergraph.scan(step, sequences=[q], outputs_info=[x0, c], return_updates=False)[0] for q in seqs]
        fg = FunctionGraph([x0, xs, c], outs, clone=True)
        MergeOptimizer().rewrite(fg)
        assert len({n.inputs[0] for n in nodes_of(fg, Scan)}) == 1  # one body variable
        before = [len(sig.slots) for sig in consumers(fg)]
        alone = [len(dce.live_slots(fg, sig)) for sig in consumers(fg)]  # no memo passed
        seen: list[Any] = []
        real = dce.scope_leaves
        monkeypatch.setattr(dce, "scope_leaves", recording(seen, real))
        assert remove_dead_slots(fg) == k
        monkeypatch.setattr(dce, "scope_leaves", real)
        assert [len(sig.slots) for sig in consumers(fg)] == alone < before  # each loop lost its dead state
        assert all(only.op.layout.info.n_sit_sot == 1 for only in nodes_of(fg, Scan))
        return len(seen)

    assert walks(3) == walks(1) > 0


def test_dead_call_and_conditional_outputs():
    used, _ = call(lambda p, q, r: [pt.exp(p) * q, pt.log(r)], x0, c, xs.sum())
    fg = check_rewrite(remove_dead_slots, [x0, c, xs], [used])
    (node,) = nodes_of(fg, Call)
    assert len(node.outputs) == 1 and len(body_of(node.inputs[0]).param_types) == 2

    a, b = ig_ifelse(x0 > 0, [pt.exp(c), pt.sin(xs).sum()], [c, xs.sum()])
    fg = check_rewrite(remove_dead_slots, [x0, c, xs], [a])
    (node,) = nodes_of(fg, IfElse)
    assert len(node.outputs) == 1
    assert [len(body_of(f).param_types) for f in node.inputs[1:3]] == [1, 1]  # xs no longer passed


# -- duplicate and constant arguments ----------------------------------------------


def test_duplicate_arguments_become_one_param():
    outs = innergraph.scan(
        lambda x, y, s, k1, k2: s + x * y * k1 * k2,
        sequences=[xs, xs],
        outputs_info=[x0],
        non_sequences=[pt.exp(c), pt.exp(c)],
        return_updates=False,
    )
    fg = check_rewrite(merged_then(merge_arguments), [x0, xs, c], [outs])
    _, info = only_scan(fg)
    assert (info.n_seqs, info.n_non_seqs) == (1, 1)


def test_constant_arguments_are_inlined():
    outs = innergraph.scan(
        lambda x, s, k: s + x * k, sequences=[xs], outputs_info=[x0], non_sequences=[pt.exp(pt.constant(0.0)) * 2.5], return_updates=False
    )
    fg = check_rewrite(folded_then(merge_arguments), [x0, xs], [outs])
    node, info = only_scan(fg)
    assert info.n_non_seqs == 0
    consts = [v for n in scope_toposort(body_of(node.inputs[0]).outputs) for v in n.inputs if isinstance(v, pt.TensorConstant)]
    assert any(np.array_equal(v.data, 2.5) for v in consts)

    y = call(lambda p, q: p * q, x0, pt.exp(pt.constant(0.0)) * 3.0)
    fg = check_rewrite(folded_then(merge_arguments), [x0], [y])
    assert [len(n.inputs) for n in nodes_of(fg, Call)] == [2]  # the function and x0


def test_a_sequence_of_equal_rows_becomes_a_non_sequence():
    for seq in (pt.constant(np.full(5, 1.5)), pt.alloc(c, 5)):
        outs = innergraph.scan(lambda x, s: s * x, sequences=[seq], outputs_info=[x0], n_steps=4, return_updates=False)
        fg = check_rewrite(folded_then(merge_arguments), [x0, c], [outs])
        assert only_scan(fg)[1].n_seqs == 0


def test_large_constants_become_arguments_of_call_and_branch_bodies():
    big = pt.constant(np.arange(100.0))
    y = ig_ifelse(x0 > 0, (xs.sum() * big).sum(), c)
    fg = check_rewrite(pass_large_constants, [x0, xs, c], [y], values=[[0.5, np.ones(3), 2.0], [-0.5, np.ones(3), 2.0]])
    (node,) = nodes_of(fg, IfElse)
    then_body = body_of(node.inputs[1])
    inside = [v for n in scope_toposort(then_body.outputs) for v in n.inputs if isinstance(v, pt.TensorConstant)]
    assert all(v.data.size <= LARGE_CONSTANT for v in inside)
    assert any(isinstance(v, pt.TensorConstant) and v.data.size == 100 for v in node.inputs)
    # ... and merge_arguments does not inline it back
    assert merge_arguments(fg) == 0


def _constants_in(body):
    return [v for n in scope_toposort(body.outputs) for v in n.inputs if isinstance(v, pt.TensorConstant)]


def test_constants_that_alone_tell_bodies_apart_become_arguments():
    """Three branches that differ only in `+ i` share one body; what differs in
    more than constants, or reads a constant as an index, stays apart."""
    slow = (xs**2).sum()
    outs = [ig_ifelse(x0 > 0, xs.sum() * c * 2.5 + i, slow) for i in (1.0, 2.0, 3.0)]
    outs.append(ig_ifelse(x0 > 0, xs.sum() * c, slow))  # another template: kept
    outs += [ig_ifelse(x0 > 0, xs[:k].sum() * c, slow) for k in (1, 2)]  # k is an index: kept
    values = [[0.5, np.arange(3.0), 2.0], [-0.5, np.arange(3.0), 2.0]]
    fg = check_rewrite(merged_then(outline_constants), [x0, xs, c], outs, values=values)
    MergeOptimizer().rewrite(fg)
    then = [body_of(o.owner.inputs[1]) for o in fg.outputs]
    assert all(isinstance(o.owner.inputs[1], Constant) for o in fg.outputs[:3])  # changed consumers come folded
    assert then[0] is then[1] is then[2]  # one folded body, bound to 1.0, 2.0 and 3.0
    assert [float(o.owner.op.split(o.owner.inputs)[3][-1].data) for o in fg.outputs[:3]] == [1.0, 2.0, 3.0]
    assert any(np.array_equal(v.data, 2.5) for v in _constants_in(then[0]))  # the same in all three: inside
    assert len({id(b) for b in then}) == 4  # the other template and the two index reads stay distinct
    assert then[4] != then[5]


def test_outlined_bodies_of_one_template_are_built_once():
    """Within the fold (`sharing_rebuilt_functions`), consumers whose bodies share a
    template get one new function object: nothing is left for MergeOptimizer."""
    big = [pt.constant(np.full(100, float(i))) for i in range(3)]
    outs = [ig_ifelse(x0 > 0, xs.sum() * c + i, (big[i] * xs.sum()).sum()) for i in range(3)]

    def outline_sharing(fgraph):
        with sharing_rebuilt_functions():
            return outline_constants(fgraph)

    fg = check_rewrite(merged_then(outline_sharing), [x0, xs, c], outs, values=[[0.5, np.arange(3.0), 2.0], [-0.5, np.arange(3.0), 2.0]])
    nodes = [o.owner for o in fg.outputs]
    assert nodes[0].inputs[1] is nodes[1].inputs[1] is nodes[2].inputs[1]  # `p.sum() * p + k`: one constant
    assert nodes[0].inputs[2] is nodes[1].inputs[2] is nodes[2].inputs[2]  # `(big * p.sum()).sum()`: one constant


def test_outlining_passes_large_constants_and_folds_the_new_bodies():
    big = pt.constant(np.arange(100.0))
    y = ig_ifelse(x0 > 0, (xs.sum() * big).sum(), c)
    fg = check_rewrite(outline_constants, [x0, xs, c], [y], values=[[0.5, np.ones(3), 2.0], [-0.5, np.ones(3), 2.0]])
    (node,) = nodes_of(fg, IfElse)
    assert all(isinstance(f, Constant) for f in node.inputs[1:3])
    assert all(v.data.size <= LARGE_CONSTANT for v in _constants_in(body_of(node.inputs[1])))
    assert any(isinstance(v, pt.TensorConstant) and v.data.size == 100 for v in node.inputs)
    # no body node joined the graph: only the outer conditional and its inputs' nodes
    assert not any(isinstance(n.op, InnerGraph) for n in fg.apply_nodes)


def test_body_fusion_queries_the_fusion_database_once_per_state(registered_nothing):
    from innergraph.core.compat import scope_safe_fusion

    assert scope_safe_fusion() is scope_safe_fusion()
    db, before = optdb["elemwise_fusion"], scope_safe_fusion()
    with registered_nothing(db, "test_body_fusion_nothing", "fusion", position=99) as nothing:
        after = scope_safe_fusion()  # a rewrite registered in the fusion database reaches body fusion
        assert after is not before and nothing in after.data
    assert nothing not in scope_safe_fusion().data


def test_fusion_leaves_a_body_it_cannot_change_as_it_is():
    lone = body_of(innergraph.inner_graph(lambda u: pt.exp(u.sum()), [xs.type]).function)
    chain = body_of(innergraph.inner_graph(lambda u: (pt.exp(u) * 2.0).sum(), [xs.type]).function)
    assert fuse_body(lone) is lone  # one elementwise node: nothing to fuse, no copy made
    fused = fuse_body(chain)
    assert fused is not chain and fused != chain  # exp and mul become one Composite
    assert sum(isinstance(n.op, pt.elemwise.Elemwise) for n in scope_toposort(fused.outputs)) == 1


def test_fusing_a_fused_body_gives_it_back():
    # a body compiled later runs the fusion pass again over its nested bodies, which are
    # fused copies already: they are given back, not fused and copied a second time
    chain = body_of(innergraph.inner_graph(lambda u: (pt.exp(u) * 2.0).sum(), [xs.type]).function)
    fused = fuse_body(chain)
    assert fuse_body(fused) is fused
    assert fuse_body(chain) is fused


# -- forwarding --------------------------------------------------------------------


def test_pass_through_states_are_forwarded():
    outs = innergraph.scan(lambda x, s, t: (s + x * t, t), sequences=[xs], outputs_info=[x0, c], return_updates=False)
    fg = check_rewrite(forward_params, [x0, xs, c], outs)
    _, info = only_scan(fg)
    assert (info.n_sit_sot, info.n_non_seqs) == (1, 1)  # t is now a non-sequence


def test_traced_pass_through_states_of_while_loops_stay():
    from pytensor.scan.utils import until

    outs = innergraph.scan(lambda s, t: ([s * 2, t], until(s > 4)), outputs_info=[x0, c], n_steps=10, return_updates=False)
    fg = check_rewrite(forward_params, [x0, c], outs, values=[[0.5, 1.0], [3.0, 2.0]], expect_change=False)
    assert only_scan(fg)[1].n_sit_sot == 2  # t's trace ends where the loop stopped: not a repeated init


def test_pass_through_mit_mot_taps_are_dropped():
    ys = innergraph.scan(lambda y: y**2, outputs_info=[x0], n_steps=4, return_updates=False)
    g = grad(grad(ys[-1], x0), x0)  # its backward scan writes a tap back unchanged
    fg = check_rewrite(forward_params, [x0], [g])
    out_taps = [t for n in nodes_of(fg, Scan) for s in n.op.layout.info.mit_mot_out_slices for t in s]
    in_taps = [n.op.layout.info.mit_mot_in_slices for n in nodes_of(fg, Scan)]
    assert len(out_taps) < sum(len(s) for taps in in_taps for s in taps)


def test_call_and_conditional_outputs_that_return_an_argument():
    a, b = call(lambda p, q: [p * q, q], x0, c)
    fg = check_rewrite(forward_params, [x0, c], [a, b])
    assert fg.outputs[1] is fg.inputs[1]
    y = ig_ifelse(x0 > 0, [c, pt.exp(c)], [c, c])
    fg = check_rewrite(forward_params, [x0, c], y)
    assert fg.outputs[0] is fg.inputs[1] and len(nodes_of(fg, IfElse)[0].outputs) == 1



def test_call_and_conditional_outputs_that_return_a_constant():
    three = pt.constant(3.0)
    a, b = call(lambda p, q: [p * q, three], x0, c)
    fg = check_rewrite(forward_params, [x0, c], [a, b], gradients="none")  # d(3)/d(.) is disconnected
    assert fg.outputs[1] is three and len(nodes_of(fg, Call)[0].outputs) == 1
    y = ig_ifelse(x0 > 0, [three, pt.exp(c)], [three, c])
    fg = check_rewrite(forward_params, [x0, c], y, gradients="none")
    assert fg.outputs[0] is three and len(nodes_of(fg, IfElse)[0].outputs) == 1
    y = ig_ifelse(x0 > 0, [three], [pt.constant(4.0)])  # different constants: the conditional stays
    check_rewrite(forward_params, [x0, c], y, expect_change=False, gradients="none")


def test_forwarding_counts_the_consumers_it_changed():
    """A loop with a pass-through state and a call returning its argument change (2); a loop
    with nothing to forward and the backward loop of a gradient (a buffer whose taps all
    write something new) do not. On the result, nothing is left to forward (0)."""
    passing = innergraph.scan(lambda x, s, t: (s + x * t, t), sequences=[xs], outputs_info=[x0, c], return_updates=False)
    plain = innergraph.scan(lambda x, s: s * 0.9 + x, sequences=[xs], outputs_info=[c], return_updates=False)
    ys = innergraph.scan(lambda y: y**2, outputs_info=[x0], n_steps=4, return_updates=False)
    a, b = call(lambda p, q: [p * q, q], x0, c)
    outs = [*passing, plain, grad(ys[-1], x0), a, b]
    fg, changed = rewritten(forward_params, [x0, xs, c], outs)
    assert changed == 2
    assert rewritten(forward_params, fg.inputs, fg.outputs)[1] == 0
    check_rewrite(forward_params, [x0, xs, c], outs)


def test_a_pass_through_untraced_state_is_its_initial_value():
    outs = innergraph.scan(lambda x, s, t: (s + x * t, t), sequences=[xs], outputs_info=[x0, c], return_updates=False)
    fg = check_rewrite(canonicalized_then(lambda g: untrace_final_states(g) + forward_params(g)), [x0, xs, c], [o[-1] for o in outs], gradients="none")
    assert fg.outputs[1] is fg.inputs[2]  # t's final value is c itself
    assert only_scan(fg)[1].n_untraced_sit_sot == 1


@pytest.mark.parametrize("taps", [[-2, -1], [-1, -2]])
def test_a_two_tap_state_returning_a_tap_is_not_forwarded(taps):
    """Its trace is its two initial rows and then the last of them repeated, not one value repeated."""
    ms = innergraph.scan(lambda a, b: b, outputs_info=[dict(initial=pt.stack([x0, c]), taps=taps)], n_steps=3, return_updates=False)
    fg = check_rewrite(forward_params, [x0, c], [ms], expect_change=False)
    assert only_scan(fg)[1].n_mit_sot == 1


def test_a_pass_through_vector_state_is_its_initial_row_repeated():
    v0 = pt.dvector("v0")  # 3 entries (check_rewrite's default), over 4 rows: the trace is 5 x 3
    s, t = innergraph.scan(lambda x, s, t: (s + x * t.sum(), t), sequences=[xs], outputs_info=[x0, v0], n_steps=4, return_updates=False)
    fg = check_rewrite(forward_params, [x0, xs, v0], [s, t], values=[[0.5, np.arange(4.0), [1.0, 2.0, 3.0]]])
    assert only_scan(fg)[1].n_sit_sot == 1


def _buffer_written_back(taps, as_while=False):
    """A native Scan of 3 steps whose buffer's one output tap writes back what its last input
    tap read (a buffer that only passes rows through), beside a state reading both taps."""
    from pytensor.scan.op import Scan as NativeScan, ScanInfo

    buffer = pt.dvector("buffer")
    low, high, s = pt.dscalar("low"), pt.dscalar("high"), pt.dscalar("s")
    info = ScanInfo(
        n_seqs=0, mit_mot_in_slices=(tuple(taps),), mit_mot_out_slices=((taps[-1],),), mit_sot_in_slices=(), sit_sot_in_slices=((-1,),),
        n_nit_sot=0, n_untraced_sit_sot=0, n_non_seqs=0, as_while=as_while,
    )
    op = NativeScan([low, high, s], [high, s * 2.0 + low + high * 0.5, *([s > 100.0] if as_while else [])], info)
    return [buffer, x0], op(pt.constant(3, dtype="int64"), buffer, pt.set_subtensor(pt.zeros(4)[0], x0))


def test_a_buffer_that_only_passes_rows_through_becomes_sequences_over_it():
    """Taps 2 and 5 (not from 0, not consecutive), so each sequence starts at its tap less the lowest."""
    inputs, outs = _buffer_written_back([2, 5])
    values = [[np.arange(8.0) * 1.5, 0.5], [np.arange(8.0) ** 2, -1.0]]
    fg = check_rewrite(lambda g: lift_native(g) * 0 + forward_params(g), inputs, outs, values=values, gradients="none")
    _, info = only_scan(fg)
    assert (info.n_seqs, info.n_mit_mot) == (2, 0)
    assert fg.outputs[0] is fg.inputs[0]  # the buffer's result is the buffer


def test_a_while_loop_s_buffer_that_only_passes_rows_through_stays():
    inputs, outs = _buffer_written_back([2, 5], as_while=True)
    fg, changed = rewritten(lambda g: lift_native(g) * 0 + forward_params(g), inputs, outs)
    assert changed == 0 and only_scan(fg)[1].n_mit_mot == 1


# -- untracing ---------------------------------------------------------------------


def test_states_read_only_at_their_last_step_keep_no_trace():
    from pytensor.tensor.basic import AllocEmpty

    def step(x, s, t):
        return s * 0.9 + x, t + s

    (s, t), (u, v) = (innergraph.scan(step, sequences=[seq], outputs_info=[x0, c], return_updates=False) for seq in (xs, xs[::-1]))
    outs = [s[-1], t[-1], u.sum(), v[-1]]
    fg = check_rewrite(canonicalized_then(untrace_final_states), [x0, xs, c], outs, gradients="none")
    first, second = sorted(nodes_of(fg, Scan), key=lambda n: n.op.layout.info.n_sit_sot)
    assert (first.op.layout.info.n_sit_sot, first.op.layout.info.n_untraced_sit_sot) == (0, 2)
    assert (second.op.layout.info.n_sit_sot, second.op.layout.info.n_untraced_sit_sot) == (1, 1)  # u's trace is summed
    assert fg.outputs[:2] == first.outputs and fg.outputs[3] is second.outputs[1]  # no indexing left
    assert first.inputs[3:5] == [fg.inputs[0], fg.inputs[2]]  # the initial values themselves, not row 0 of a buffer
    assert sum(isinstance(n.op, AllocEmpty) for n in fg.apply_nodes) == 1  # u's buffer only


def test_a_constant_initial_value_is_read_without_the_buffer():
    ys = innergraph.scan(lambda x, s: s * 0.9 + x, sequences=[xs], outputs_info=[pt.constant(0.5, dtype="float64")], return_updates=False)
    fg = check_rewrite(canonicalized_then(untrace_final_states), [xs], [ys[-1]], gradients="none")
    node, info = only_scan(fg)  # canonicalize folded 0.5[None] into the constant [0.5]; row 0 is 0.5
    assert info.n_untraced_sit_sot == 1 and isinstance(node.inputs[-1], Constant) and node.inputs[-1].data == 0.5


def test_gradient_accumulators_keep_no_trace():
    ys = innergraph.scan(lambda x, s, w: s * w + x, sequences=[xs], outputs_info=[x0], non_sequences=[c], return_updates=False)
    fg = check_rewrite(canonicalized_then(untrace_final_states), [x0, xs, c], [ys[-1]], gradients="before")
    forward, backward = sorted(nodes_of(fg, Scan), key=lambda n: n.op.layout.info.n_mit_mot)
    assert forward.op.layout.info.n_sit_sot == 1  # the backward loop reads its trace
    assert backward.op.layout.info.n_untraced_sit_sot >= 1 and backward.op.layout.info.n_sit_sot == 0  # dC/dc


def test_one_new_body_for_loops_that_shared_one():
    seqs = (xs, xs[1:], xs[:-1] * 2.0)  # three lengths: the loops do not merge
    finals = [innergraph.scan(lambda x, s: s * 0.9 + x, sequences=[seq], outputs_info=[x0], return_updates=False)[-1] for seq in seqs]
    fg = check_rewrite(canonicalized_then(simplify_consumers), [x0, xs], [pt.add(*finals)], gradients="none")
    scans = nodes_of(fg, Scan)
    assert len(scans) == 3 and all(n.op.layout.info.n_untraced_sit_sot == 1 for n in scans)
    assert len({n.inputs[0] for n in scans}) == 1  # the rebuilt consumers share one function


def test_while_loops_and_other_reads_keep_their_traces():
    from pytensor.scan.utils import until

    ys = innergraph.scan(lambda s: (s * 2, until(s > 4)), outputs_info=[x0], n_steps=10, return_updates=False)
    check_rewrite(canonicalized_then(untrace_final_states), [x0], [ys[-1]], values=[[0.5], [3.0]], expect_change=False)
    ys = innergraph.scan(lambda x, s: s + x, sequences=[xs], outputs_info=[x0], return_updates=False)
    check_rewrite(canonicalized_then(untrace_final_states), [x0, xs], [ys[-1], ys[-2]], expect_change=False)
    check_rewrite(canonicalized_then(untrace_final_states), [x0, xs], [ys[-1], ys], expect_change=False)
    check_rewrite(canonicalized_then(untrace_final_states), [x0, xs], [ys[-1:]], expect_change=False)  # a slice, not the row


def test_untracing_counts_the_loops_it_changed():
    """Two loops untraced, one left (its trace read whole): 2. Then, on the result, nothing left:
    an untraced vector state whose final value is read at its last *element* stays as it is."""
    v0 = pt.dvector("v0")
    ys, zs, ws = (innergraph.scan(lambda x, s: s * k + x, sequences=[xs], outputs_info=[x0], return_updates=False) for k in (0.9, 0.8, 0.7))
    vs = innergraph.scan(lambda x, s: s * 0.9 + x, sequences=[xs], outputs_info=[v0], return_updates=False)
    fg, changed = rewritten(canonicalized_then(untrace_final_states), [x0, xs, v0], [ys[-1], zs[-1], ws, vs[-1]])
    assert changed == 3
    assert sorted(n.op.layout.info.n_untraced_sit_sot for n in nodes_of(fg, Scan)) == [0, 1, 1, 1]
    final: Any = fg.outputs[3]
    fg, changed = rewritten(canonicalized_then(untrace_final_states), fg.inputs, [final[-1]])
    assert changed == 0  # the untraced state is a carry now, not a trace read at row -1
    got = pytensor.function(fg.inputs, fg.outputs, mode=get_default_mode().excluding("innergraph"), on_unused_input="ignore")(0.5, [1.0, 2.0], [1.0, 3.0])
    np.testing.assert_allclose(got, vanilla_values(_last_element_of_a_vector_loop, [[1.0, 2.0], [1.0, 3.0]]))


def _last_element_of_a_vector_loop():
    v0 = pt.dvector("v0")
    vs = pytensor.scan(lambda x, s: s * 0.9 + x, sequences=[xs], outputs_info=[v0], return_updates=False)
    return [xs, v0], [vs[-1][-1]]


def test_reads_of_a_whole_trace_or_other_rows_keep_their_traces():
    """Row 2, a symbolic row, row -1 of a matrix (a row of the last step), the whole trace
    (not ``ys``, a slice of it) and its last row as a slice: all keep the trace."""
    i = pt.lscalar("i")
    ys = innergraph.scan(lambda x, s: s + x, sequences=[xs], outputs_info=[x0], return_updates=False)
    trace = ys.owner.inputs[0]
    for outs, values in (
        ([ys[-1], ys[2]], None),
        ([ys[-1], ys[i]], [[0.5, [1.0, 2.0, 3.0], 1], [1.5, [1.0, 2.0, 3.0], -2]]),
        ([ys[-1], trace * 2.0], None),
        ([ys[-1], trace[-1:]], None),
    ):
        inputs = [x0, xs, i] if values else [x0, xs]
        fg = check_rewrite(canonicalized_then(untrace_final_states), inputs, outs, values=values, expect_change=False, gradients="none")
        assert only_scan(fg)[1].n_untraced_sit_sot == 0
    m0 = pt.dmatrix("m0")
    ms = innergraph.scan(lambda x, s: s * x, sequences=[xs], outputs_info=[m0], return_updates=False)  # a constant n_steps would make ms[-1] ms[n]
    fg = check_rewrite(canonicalized_then(untrace_final_states), [m0, xs], [ms[-1][-1]], expect_change=False, gradients="none")
    assert only_scan(fg)[1].n_untraced_sit_sot == 0  # ms[-1, -1]: two indices, one row of the last step


@pytest.mark.parametrize("taps", [[-2, -1], [-1, -2]])
def test_a_state_of_two_taps_keeps_its_trace(taps):
    """A mit-sot read only at its last row still needs its last two rows each step: not a carry
    (its taps in either order: the slot keeps the order given)."""
    ms = innergraph.scan(lambda x, a, b: a * 0.5 + b + x, sequences=[xs], outputs_info=[dict(initial=pt.stack([x0, c]), taps=taps)], return_updates=False)
    fg, changed = rewritten(canonicalized_then(untrace_final_states), [x0, xs, c], [ms[-1]])
    assert changed == 0 and only_scan(fg)[1].n_mit_sot == 1
    check_rewrite(canonicalized_then(untrace_final_states), [x0, xs, c], [ms[-1]], expect_change=False, gradients="none")


def test_last_step_reads_are_reads_of_row_minus_one_only():
    trace, other = pt.dvector("trace"), pt.dvector("other")
    first, second = trace[-1], trace[-1]  # two nodes (no merge here): both
    assert last_step_reads(FunctionGraph([trace], [first, second * 2.0], clone=False), trace) == [first, second]
    assert last_step_reads(FunctionGraph([trace, other], [other * 2.0], clone=False), trace) == []
    for read in (trace[()], trace[-1:], trace[0], trace.sum()):  # trace[()] is a Subtensor of no index
        assert last_step_reads(FunctionGraph([trace], [trace[-1], read], clone=False), trace) is None


def test_a_counted_loop_after_a_while_loop_keeps_no_trace():
    """The while loop (left alone) comes first in the graph's order; the counted loop after it is still untraced."""
    from pytensor.scan.utils import until

    ws = innergraph.scan(lambda s: (s * 2, until(s > 4)), outputs_info=[x0], n_steps=10, return_updates=False)
    ys = innergraph.scan(lambda x, s: s * 0.9 + x, sequences=[xs], outputs_info=[ws[-1]], return_updates=False)
    fg = check_rewrite(canonicalized_then(untrace_final_states), [x0, xs], [ys[-1]], values=[[0.5, [1.0, 2.0]], [3.0, [1.0]]], gradients="none")
    counted, loop = sorted(nodes_of(fg, Scan), key=lambda n: n.op.layout.info.as_while)
    assert counted.op.layout.info.n_untraced_sit_sot == 1 and loop.op.layout.info.n_untraced_sit_sot == 0



# -- loop-invariant code motion ----------------------------------------------------


def test_invariant_work_moves_out_and_merges_with_the_outer_graph():
    outs = innergraph.scan(
        lambda x, s, k: s + x * (pt.exp(k) * pt.sin(k)), sequences=[xs], outputs_info=[x0], non_sequences=[c], return_updates=False
    )
    outer = pt.exp(c) * pt.sin(c)
    def hoist_then_merge(fgraph):
        changed = hoist_invariants(fgraph)
        MergeOptimizer().rewrite(fgraph)
        return changed

    fg = check_rewrite(hoist_then_merge, [x0, xs, c], [outs, outer])
    node, _ = only_scan(fg)
    body_ops = {type(n.op.scalar_op).__name__ for n in scope_toposort(body_of(node.inputs[0]).outputs) if hasattr(n.op, "scalar_op")}
    assert not body_ops & {"Exp", "Sin"}
    assert fg.outputs[1] in node.inputs  # the hoisted value is the outer graph's own node


def test_branch_only_work_stays_inside():
    outs = innergraph.scan(
        lambda x, s, k: s + native_ifelse(x > 0, pt.exp(k), x), sequences=[xs], outputs_info=[x0], non_sequences=[c], return_updates=False
    )
    check_rewrite(hoist_invariants, [x0, xs, c], [outs], expect_change=False)
    lazy = innergraph.scan(
        lambda x, s, k: s + ig_ifelse(x > 0, pt.exp(k), x), sequences=[xs], outputs_info=[x0], non_sequences=[c], return_updates=False
    )
    check_rewrite(hoist_invariants, [x0, xs, c], [lazy], expect_change=False)


def _hoisted(fg, loop_type=Scan):
    """The one ``loop_type`` node of ``fg`` and the Op names (scalar ops by their scalar Op) of each of its bodies."""
    (node,) = nodes_of(fg, loop_type)
    names = [
        [type(getattr(n.op, "scalar_op", n.op)).__name__ for n in scope_toposort(body_of(f).outputs)] for f in FORMS[loop_type].functions(node)
    ]
    return node, names


def test_hoisting_counts_the_loops_it_changes_and_leaves_calls_and_constant_work():
    """The pass's count, on a graph with a call first (not a loop: its work stays), a loop whose
    invariant work multiplies by a constant (moved out whole), a loop whose only invariant work is
    constant (stays: nothing to share with the outer graph) and a while loop whose condition has
    nothing to move (its step has): 2, then 0 on the result."""
    first = call(lambda u: pt.exp(u) * 2.0, c)  # a call before the loops, in the graph's order
    s1 = innergraph.scan(lambda x, s, k: s + x * (pt.exp(k) * 2.0), sequences=[xs], outputs_info=[first], non_sequences=[c], return_updates=False)
    s2 = innergraph.scan(lambda x, s: s * pt.exp(pt.constant(0.5)) + x, sequences=[xs], outputs_info=[x0], return_updates=False)
    s3 = innergraph.while_loop(lambda s: s < c, lambda s: s * pt.sin(d) + 1.0, x0, max_steps=6)
    counts = []

    def hoist(fgraph):
        counts.append(hoist_invariants(fgraph))
        return counts[-1]

    fg = check_rewrite(hoist, [x0, xs, c, d], [s1, s2, s3], gradients="none")
    assert counts == [2] and hoist_invariants(fg) == 0
    (body_call,) = nodes_of(fg, Call)
    assert [type(n.op.scalar_op).__name__ for n in scope_toposort(body_of(body_call.inputs[0]).outputs)] == ["Exp", "Mul"]
    loops = sorted(nodes_of(fg, Scan), key=lambda n: len(n.inputs))
    two, one = ([type(getattr(n.op, "scalar_op", n.op)).__name__ for n in scope_toposort(body_of(f).outputs)] for f in (n.inputs[0] for n in loops))
    assert "Exp" in two and "Exp" not in one  # s2 (its inputs kept) keeps exp(0.5); s1 (one more input) has none left
    assert equal_computations([loops[1].inputs[-1]], [pt.exp(c) * 2.0], in_xs=fg.inputs[2:3], in_ys=[c])  # the product, constant and all
    node, (cond, step) = _hoisted(fg, WhileLoop)
    assert cond == ["LT"] and step == ["Mul", "Add", "LT"]
    assert any(equal_computations([v], [pt.sin(d)], in_xs=fg.inputs[3:4], in_ys=[d]) for v in node.inputs)


def test_invariant_values_a_body_returns_move_out_with_those_it_uses():
    """exp(k) is used and returned, cos(k) only returned, sin(k) only used: all three move out."""

    def step(x, s, k):
        e = pt.exp(k)
        return s + x * e + pt.sin(k), e, pt.cos(k)

    outs = innergraph.scan(step, sequences=[xs], outputs_info=[x0, None, None], non_sequences=[c], return_updates=False)
    fg = check_rewrite(hoist_invariants, [x0, xs, c], list(outs))
    node, (ops,) = _hoisted(fg)
    assert not {"Exp", "Sin", "Cos"} & set(ops), ops
    moved = node.inputs[-3:]
    for want in (pt.exp(c), pt.sin(c), pt.cos(c)):
        assert sum(equal_computations([v], [want], in_xs=fg.inputs[2:3], in_ys=[c]) for v in moved) == 1, want


def test_each_body_of_a_while_loop_moves_out_its_own_invariant_work():
    """A while loop with an argument of its condition only (e), two of its step only (d1, d2) and one
    shared (c): the bodies number their params apart (the condition's second param is e, the step's
    is d1; the condition's third is c, the step's is d2), and each body's work is moved out with its
    own params' arguments, as arguments of that body alone."""
    from innergraph.ops.loop_build import build_while

    e, d1, d2 = pt.dscalar("e"), pt.dscalar("d1"), pt.dscalar("d2")

    def step(xs_):
        new = xs_[0] * pt.sin(d1) + pt.cos(d2) + c
        return [new], new < c

    (out,) = build_while(lambda xs_: xs_[0] < pt.exp(e) + c, step, [x0], max_steps=pt.constant(5))
    node = out.owner
    assert (node.op.n_cond_args, node.op.n_step_args) == (1, 2)
    fg = check_rewrite(hoist_invariants, [x0, e, d1, d2, c], [out], gradients="none")
    node, (cond, step_ops) = _hoisted(fg, WhileLoop)
    assert cond == ["LT"] and "Sin" not in step_ops and "Cos" not in step_ops, (cond, step_ops)
    assert (node.op.n_cond_args, node.op.n_step_args) == (2, 4)  # exp(e) + c for the condition, sin(d1) and cos(d2) for the step
    parts = node.op.split(node.inputs)
    _, e_, d1_, d2_, c_ = fg.inputs
    assert equal_computations(list(parts["cond_args"]), [e_, pt.exp(e_) + c_])
    assert equal_computations(list(parts["step_args"]), [d1_, d2_, pt.sin(d1_), pt.cos(d2_)])
    assert equal_computations(list(parts["args"]), [c_])


def test_a_body_with_no_invariant_kind_of_its_own_is_skipped_and_the_next_one_hoisted(monkeypatch):
    """A loop form (a contributor's) may declare no invariant kind binding its first body alone:
    that body is skipped, and the next one still gets its invariant work moved out."""
    from dataclasses import replace

    out = innergraph.while_loop(lambda s: s < c, lambda s: s * pt.sin(d) + 1.0, x0, max_steps=6)
    form = FORMS[WhileLoop]
    monkeypatch.setitem(FORMS, WhileLoop, replace(form, kinds=tuple(k for k in form.kinds if k.name != "cond_arg")))
    assert FORMS[WhileLoop].kind_for(Meaning.INVARIANT, (0,)) is None
    fg = FunctionGraph([x0, c, d], [out], clone=False)
    assert hoist_invariants(fg) == 1
    _, (cond, step) = _hoisted(fg, WhileLoop)
    assert cond == ["LT"] and step == ["Mul", "Add", "LT"]


# -- merging loops -----------------------------------------------------------------


def test_independent_loops_over_the_same_steps_merge():
    o1 = innergraph.scan(lambda x, s: s + x, sequences=[xs], outputs_info=[x0], return_updates=False)
    o2 = innergraph.scan(lambda x, s: s * x, sequences=[xs], outputs_info=[c], return_updates=False)
    fg = check_rewrite(merged_then(merge_loops), [x0, xs, c], [o1, o2])
    _, info = only_scan(fg)
    assert info.n_sit_sot == 2


def test_dependent_loops_and_other_trip_counts_do_not_merge():
    o1 = innergraph.scan(lambda x, s: s + x, sequences=[xs], outputs_info=[x0], return_updates=False)
    o2 = innergraph.scan(lambda x, s: s * x, sequences=[o1], outputs_info=[c], return_updates=False)
    o3 = innergraph.scan(lambda s: s * 2, outputs_info=[c], n_steps=3, return_updates=False)
    fg = check_rewrite(merged_then(merge_loops), [x0, xs, c], [o2, o3], expect_change=False)
    assert len(nodes_of(fg, Scan)) == 3


# -- per-step outputs --------------------------------------------------------------


def test_row_wise_outputs_leave_only_with_the_whole_loop():
    s, y = innergraph.scan(lambda x, s: (s + x, pt.exp(x) * 2), sequences=[xs], outputs_info=[x0, None], return_updates=False)
    fg = check_rewrite(push_out_sequence_work, [x0, xs], [s, y])
    node, info = only_scan(fg)  # the loop stays for s, and so does y, as PyTensor's scan_push_out_seq leaves it
    assert (info.n_seqs, info.n_nit_sot) == (2, 1) and body_of(node.inputs[0]).outputs[-1].owner is None  # exp(x) * 2 is a row
    y, z = innergraph.scan(lambda x, k: (pt.exp(x) * k, pt.sin(k)), sequences=[xs], non_sequences=[c], outputs_info=[None, None], return_updates=False)
    fg = check_rewrite(push_out_sequence_work, [xs, c], [y, z])
    assert not nodes_of(fg, Scan)  # every output is row-wise or the same every step: no loop left
    exp_of_rows, same_every_step = (o.owner for o in fg.outputs)
    assert "Exp" in str(exp_of_rows.inputs[0].owner.op) and exp_of_rows.inputs[0].ndim == 1  # exp over all rows at once
    assert isinstance(same_every_step.op, Alloc) and equal_computations(same_every_step.inputs[:1], [pt.sin(c)], in_xs=fg.inputs[1:], in_ys=[c])


def test_row_wise_outputs_with_other_work_stay():
    a, b = pt.dmatrix("a"), pt.dmatrix("b")
    ys, squares = innergraph.scan(lambda x, w: (pt.dot(x**2, w), x**2), sequences=[a], non_sequences=[b], return_updates=False)
    fg = check_rewrite(push_out_sequence_work, [a, b], [ys, squares])
    node, info = only_scan(fg)  # PyTensor's test_dot_nitsot_output: the loop keeps both outputs
    assert (info.n_seqs, info.n_nit_sot) == (2, 2)  # rows of x**2 and of x**2[None] (unmerged here); x itself is unread
    assert [type(n.op).__name__ for n in scope_toposort(body_of(node.inputs[0]).outputs)] == ["Dot", "DimShuffle"]


def test_a_buffer_longer_than_the_loop_keeps_zeros_in_its_last_rows():
    from pytensor.scan.op import Scan as NativeScan, ScanInfo

    info = ScanInfo(
        n_seqs=1, mit_mot_in_slices=(), mit_mot_out_slices=(), mit_sot_in_slices=(), sit_sot_in_slices=(),
        n_nit_sot=1, n_untraced_sit_sot=0, n_non_seqs=0, as_while=False,
    )
    row = pt.dscalar("row")
    op = NativeScan(inputs=[row], outputs=[row * 2.0], info=info)
    n, size = pt.lscalar("n"), pt.lscalar("size")
    out = op.make_node(n, xs[:n], size).outputs[0]
    values = [[np.arange(10.0), np.array(3), np.array(7)]]
    fg = check_rewrite(lambda g: lift_native(g) + push_out_sequence_work(g), [xs, n, size], [out], values=values, gradients="none")
    assert not nodes_of(fg, Scan)
    np.testing.assert_array_equal(pytensor.function(fg.inputs, fg.outputs)(*values[0])[0], [0, 2, 4, 0, 0, 0, 0])


def test_row_wise_work_becomes_a_sequence():
    def step(x, s, k):
        return s * 0.9 + pt.sin(x) * pt.exp(-(x**2)) + k * x + pt.exp(s)

    finals = [innergraph.scan(step, sequences=[seq], outputs_info=[x0], non_sequences=[c], return_updates=False)[-1] for seq in (xs, xs[1:] * 2)]
    def push_out_once(fgraph):
        MergeOptimizer().rewrite(fgraph)
        with sharing_rebuilt_functions():  # as in simplify_consumers
            return push_out_sequence_work(fgraph)

    fg = check_rewrite(push_out_once, [x0, xs, c], finals)
    scans = nodes_of(fg, Scan)
    assert len(scans) == 2 and len({n.inputs[0] for n in scans}) == 1  # the loops still share one function
    body = body_of(scans[0].inputs[0])
    scalar_ops = [type(n.op.scalar_op).__name__ for n in scope_toposort(body.outputs) if hasattr(n.op, "scalar_op")]
    assert scalar_ops.count("Exp") == 1 and "Sin" not in scalar_ops  # exp(s) reads the state: it stays
    assert all(n.op.layout.info.n_seqs == 2 for n in scans)  # sin(x) * exp(-x**2) and k * x, over all rows; x unread
    before = FunctionGraph([x0, xs, c], finals, clone=True)
    MergeOptimizer().rewrite(before)
    subtensors = lambda g: sum(type(n.op).__name__ == "Subtensor" for n in g.apply_nodes)  # noqa: E731
    assert subtensors(fg) == subtensors(before)  # scan's x[:n] is the rows already: no second slice


def test_row_wise_work_in_lazy_branches_and_while_loops_stays():
    from pytensor.scan.utils import until

    lazy = innergraph.scan(lambda x, s: s + native_ifelse(s > 0, pt.exp(x), s), sequences=[xs], outputs_info=[x0], return_updates=False)
    check_rewrite(push_out_sequence_work, [x0, xs], [lazy], expect_change=False)
    stops = innergraph.scan(lambda x, s: (s + pt.exp(x), until(s > 2)), sequences=[xs], outputs_info=[x0], return_updates=False)
    check_rewrite(push_out_sequence_work, [x0, xs], [stops], expect_change=False, gradients="none")


def test_a_state_accumulating_a_sequence_of_products_becomes_its_sum():
    """What is left of ``u + dot(column, row)`` once canonicalized and its product pushed out (PyTensor's test_sum_dot)."""
    us = innergraph.scan(lambda r, u: u + r, sequences=[xs * xs[::-1]], outputs_info=[x0], return_updates=False)
    fg = check_rewrite(canonicalized_then(lambda g: untrace_final_states(g) + push_out_dot_sums(g)), [x0, xs], [us[-1]], gradients="none")
    assert not nodes_of(fg, Scan)


def test_a_state_accumulating_a_plain_sequence_stays_a_loop_as_in_vanilla():
    """``acc + x_t`` is PyTensor's loop (rel-3.3.0's tests/scan/test_views.py builds it and inspects it); summing it at once would
    also add its terms in another order than vanilla."""
    us = innergraph.scan(lambda r, u: u + r, sequences=[xs], outputs_info=[x0], return_updates=False)
    check_rewrite(canonicalized_then(lambda g: untrace_final_states(g) + push_out_dot_sums(g)), [x0, xs], [us[-1]], gradients="none", expect_change=False)


def test_a_running_sum_another_output_reads_stays_in_the_loop():
    """The ar2 gradient's carried cotangent ``s + r`` whose new value other per-step work reads (a wrong gradient once)."""
    us, ws = innergraph.scan(
        lambda r, u: [u + r, (u + r) * pt.sin(r)], sequences=[xs * xs[::-1]], outputs_info=[x0, None], return_updates=False
    )
    fg = check_rewrite(
        canonicalized_then(lambda g: untrace_final_states(g) + push_out_dot_sums(g)), [x0, xs], [us[-1], ws.sum()], gradients="none"
    )
    assert nodes_of(fg, Scan)


def test_dot_accumulators_become_one_dot():
    a, b, u0 = pt.tensor3("a"), pt.tensor3("b"), pt.dmatrix("u0")
    us = innergraph.scan(lambda x, y, u: u + pt.dot(x, y), sequences=[a, b], outputs_info=[u0], return_updates=False)
    values = [[np.random.default_rng(0).normal(size=s) for s in ((4, 2, 3), (4, 3, 5), (2, 5))]]
    fg = check_rewrite(
        canonicalized_then(lambda g: untrace_final_states(g) + push_out_dot_sums(g)), [a, b, u0], [us[-1]], values=values, gradients="none"
    )
    assert not nodes_of(fg, Scan)
    kept = innergraph.scan(lambda x, y, u: u + pt.dot(x, y) * u.sum(), sequences=[a, b], outputs_info=[u0], return_updates=False)
    check_rewrite(canonicalized_then(push_out_dot_sums), [a, b, u0], [kept[-1]], values=values, gradients="none", expect_change=False)


def test_per_step_outputs_reading_final_mit_mot_taps_move_out():
    ys = innergraph.scan(lambda y: y**2, outputs_info=[x0], n_steps=4, return_updates=False)
    g = grad(grad(ys[-1], x0), x0)
    fg = check_rewrite(merged_then(lambda g: forward_params(g) + merge_arguments(g) + push_out_per_step_outputs(g)), [x0], [g])
    assert sum(n.op.layout.info.n_nit_sot for n in nodes_of(fg, Scan)) == 0


# -- all together, in the pipeline ---------------------------------------------------


def test_simplify_reaches_a_fixpoint():
    o1 = innergraph.scan(lambda x, s, k: (s + x * pt.exp(k)), sequences=[xs], outputs_info=[x0], non_sequences=[c], return_updates=False)
    o2, dead = innergraph.scan(lambda x, s, t: (s * x, t + 1), sequences=[xs], outputs_info=[c, x0], return_updates=False)
    fg = check_rewrite(merged_then(simplify_consumers), [x0, xs, c], [o1, o2])
    assert simplify_consumers(fg) == 0
    assert innergraph.graph_stats(fg)["consumers"]["scan"] == 1
    assert innergraph.graph_stats(fg)["unused_outputs"] == 0


def _scripted(answers, seen):
    """A stand-in rewrite answering ``answers`` in turn (then 0), recording the consumers it is shown."""
    from innergraph.protocol.signature import consumers

    def rewrite(fgraph):
        seen.append([sig.node for sig in consumers(fgraph)])
        return answers.pop(0) if answers else 0

    return rewrite


def _a_loop_graph():
    ys = innergraph.scan(lambda x, s: s * 0.9 + x, sequences=[xs], outputs_info=[x0], return_updates=False)
    return rewritten(lambda g: 0, [x0, xs], [ys[-1]])[0]


def test_simplify_counts_changes_round_by_round_until_a_round_changes_nothing():
    fg = _a_loop_graph()
    first: list[Any] = []
    second: list[Any] = []
    assert simplify_consumers(fg, [_scripted([1, 2], first), _scripted([3, 0], second)]) == 6  # 1 + 3, 2 + 0, then 0
    assert len(first) == len(second) == 3


def test_simplify_stops_after_its_rounds():
    fg = _a_loop_graph()
    seen: list[Any] = []
    assert simplify_consumers(fg, [_scripted([1] * 20, seen)]) == 8 == len(seen)


def test_simplify_runs_nothing_on_a_graph_without_consumers_or_with_no_rewrites():
    seen: list[Any] = []
    assert simplify_consumers(FunctionGraph([x0], [pt.exp(x0) * 2.0]), [_scripted([1], seen)]) == 0
    assert seen == []
    assert simplify_consumers(_a_loop_graph(), []) == 0


def test_simplify_shows_each_rewrite_the_consumers_as_they_are_now():
    """A rewrite that rebuilt a consumer makes the next one see the new node, in the round and the next."""
    from innergraph.protocol.signature import consumers, replace_consumer

    fg = _a_loop_graph()
    rebuilt = [0]

    def rebuild(fgraph):
        if rebuilt[0] == 2:
            return 0
        for sig in consumers(fgraph):
            replace_consumer(fgraph, sig, sig.slots, reason="test")
        rebuilt[0] += 1
        return 1

    seen: list[Any] = []
    assert simplify_consumers(fg, [rebuild, _scripted([], seen)]) == 2
    assert [len(nodes) for nodes in seen] == [1, 1, 1]  # an order kept from before the rebuild would list the removed node only: none


@pytest.mark.parametrize("linker", ["cvm", "numba"])
def test_pipeline_matches_vanilla(linker):
    from pytensor.compile.mode import Mode

    def build() -> tuple[list, Any]:
        o1 = pytensor.scan(lambda x, s, k: s + x * pt.exp(k), sequences=[xs], outputs_info=[x0], non_sequences=[c], return_updates=False)
        o2 = pytensor.scan(lambda x, s: s * x, sequences=[xs], outputs_info=[c], return_updates=False)
        cost = o1[-1] + o2.sum()
        return [x0, xs, c], [cost, *grad(cost, [x0, c])]

    mode = Mode(linker=linker, optimizer="fast_run")
    args = (0.3, np.linspace(-1, 1, 7), 0.7)
    ours = pytensor.function(*build(), mode=mode)
    vanilla = vanilla_function(build, mode, first_call=args)
    np.testing.assert_allclose(ours(*args), vanilla(*args), rtol=1e-10)
    assert innergraph.graph_stats(ours)["consumers"]["scan"] == 1  # merged, as PyTensor's own ScanMerge does


@pytest.mark.parametrize("variant", ["innergraph", "vanilla"])
def test_the_tags_of_pytensors_rewrites_turn_ours_off_too(variant):
    from pytensor.scan.op import Scan as NativeScan

    ys = pytensor.scan(lambda x, s: s * 0.9 + pt.sin(x), sequences=[xs], outputs_info=[x0], return_updates=False)
    args = (0.3, np.linspace(0, 1, 5))
    expected = vanilla_values(lambda: ([x0, xs], ys), args, get_default_mode())
    for excluded, sin_in_loop in ((None, False), ("scan_pushout_seqs_ops", True)):
        with innergraph.uninstalled() if variant == "vanilla" else contextlib.nullcontext():
            mode = get_default_mode()
            fn = pytensor.function([x0, xs], ys, mode=mode.excluding(excluded) if excluded else mode)
            got = fn(*args)
        (node,) = [n for n in fn.maker.fgraph.apply_nodes if isinstance(n.op, NativeScan)]
        assert ("sin" in str([n.op for n in node.op.fgraph.apply_nodes]).lower()) is sin_in_loop
        np.testing.assert_allclose(got[-1], expected[-1])


def _set_rows(fgraph):
    """The registered ``innergraph_set_rows`` pass; returns how many writes it changed."""
    from pytensor.compile.mode import optdb

    def expanded():
        return sum(isinstance(n.op, IncSubtensor) and n.inputs[1].owner is not None and isinstance(n.inputs[1].owner.op, DimShuffle) for n in fgraph.apply_nodes)

    before = expanded()
    optdb["innergraph_set_rows"].rewrite(fgraph)
    return before - expanded()


def test_a_one_row_write_of_an_expanded_value_writes_the_row():
    buf, v = pt.dmatrix("buf"), pt.dvector("v")
    written = pt.set_subtensor(buf[1:2], v[None])
    added = pt.inc_subtensor(buf[0:1], (v * 2)[None])
    values = [[np.arange(12.0).reshape(3, 4), np.ones(4)]]
    fg = check_rewrite(_set_rows, [buf, v], [written, added], values=values)
    writes = [n for n in fg.apply_nodes if isinstance(n.op, IncSubtensor)]
    assert len(writes) == 2
    for node in writes:  # each writes its value as it is, into one row
        value: Any = node.inputs[1]
        assert value.ndim == 1 and not (value.owner and isinstance(value.owner.op, DimShuffle))
        assert node.inputs[2].type.dtype == "uint8"  # the row index already as Numba's mode wants it
    uint_indices = optdb["local_uint_constant_indices"]
    assert uint_indices.rewrite(fg)[1] == 0  # ... so that pass finds nothing left to change
    # a slice of two rows, or a value not expanded, stays
    check_rewrite(_set_rows, [buf, v], [pt.set_subtensor(buf[1:3], pt.stack([v, v]))], values=values, expect_change=False)
