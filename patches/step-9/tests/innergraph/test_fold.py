"""Folding bodies into constants before linking, interning them, and the records of the hooks.

A body's nodes are rewritten with the outer graph but never run by it: a consumer
reads its function variable, which is folded into a constant holding the `Body`
before linking, so no linker schedules the body's nodes. The consumer below is
written for these tests; the consumers of later steps follow the same protocol.
"""

import gc

import numpy as np
import pytest

import pytensor
import pytensor.tensor as pt
from pytensor.compile.mode import Mode
from pytensor.graph.basic import Apply, Constant
from pytensor.graph.fg import FunctionGraph
from pytensor.graph.op import Op
from pytensor.graph.rewriting.basic import MergeOptimizer
from pytensor.innergraph.core import collector
from pytensor.innergraph.core.build import inner_graph
from pytensor.innergraph.core.dispatch import runs
from pytensor.innergraph.core.fold import (
    fold_function,
    fold_inner_graphs,
    folded_bodies,
    has_inner_graphs,
    unfold_inner_graphs,
    visible_nodes,
)
from pytensor.innergraph.core.graph import InnerGraph, body_of, scope_toposort
from pytensor.innergraph.core.hooks import Patch
from pytensor.innergraph.core.instantiate import instantiate
from pytensor.innergraph.core.interning import clear_body_cache, intern_body
from pytensor.innergraph.core.types import mark_rewritten
from pytensor.link.numba.linker import NumbaLinker
from pytensor.link.vm import VMLinker


class ApplyBody(Op):
    """Apply a body of one vector param to a vector (a consumer for these tests)."""

    __props__ = ()

    def make_node(self, function, x):
        x = pt.as_tensor_variable(x)
        output_type = body_of(function).type.output_types[0]
        return Apply(self, [function, x], [output_type()])

    def perform(self, node, inputs, output_storage):
        body, x = inputs

        def compile_body():
            arg = pt.dvector("arg")
            return pytensor.function(
                [arg], instantiate(body, [arg])[0], mode="FAST_RUN"
            )

        output_storage[0][0] = body.cached("test_fold", compile_body)(x)


def double_plus_one():
    return inner_graph(lambda v: v * 2 + 1, [pt.dvector]).function


def test_folding_takes_a_bodys_nodes_out_of_the_outer_graph():
    x = pt.dvector("x")
    function = double_plus_one()
    fgraph = FunctionGraph([x], [ApplyBody()(function, pt.exp(x))], clone=False)
    body_nodes = set(scope_toposort(body_of(function).outputs))

    assert body_nodes <= fgraph.apply_nodes
    assert not body_nodes & visible_nodes(fgraph)
    assert fold_inner_graphs(fgraph) == 1
    assert not has_inner_graphs(fgraph)
    assert not body_nodes & fgraph.apply_nodes
    (folded,) = [v for v in fgraph.outputs[0].owner.inputs if isinstance(v, Constant)]
    assert folded.data == body_of(function)
    assert folded_bodies(fgraph.outputs) == [(folded, folded.data)]
    assert fold_inner_graphs(fgraph) == 0  # idempotent


def test_a_folded_body_never_gets_a_thunk_and_its_consumer_computes():
    x = pt.dvector("x")
    out = ApplyBody()(fold_function(double_plus_one()), pt.exp(x))
    fn = pytensor.function([x], out, mode=Mode(linker="py", optimizer=None))

    ops = [node.op for node in fn.maker.fgraph.toposort()]
    assert [type(op) for op in ops].count(ApplyBody) == 1
    assert not any(isinstance(op, InnerGraph) for op in ops)
    assert len(ops) == 2  # exp and the consumer: the body's nodes are not scheduled
    x_val = np.array([0.0, 1.0, 2.0])
    np.testing.assert_allclose(fn(x_val), np.exp(x_val) * 2 + 1)


def test_unfolding_gives_the_rewriter_an_equal_body_and_leaves_the_folded_one_alone():
    x = pt.dvector("x")
    folded = fold_function(double_plus_one())
    body = folded.data
    nodes_before = list(scope_toposort(body.outputs))
    fgraph = FunctionGraph([x], [ApplyBody()(folded, x)], clone=False)

    assert unfold_inner_graphs(fgraph) == 1
    assert has_inner_graphs(fgraph)
    assert list(scope_toposort(body.outputs)) == nodes_before  # not mutated
    assert fold_inner_graphs(fgraph) == 1
    (refolded,) = [v for v in fgraph.outputs[0].owner.inputs if isinstance(v, Constant)]
    assert refolded.data == body


def test_consumers_of_equal_bodies_built_apart_read_one_folded_body():
    x = pt.dvector("x")
    outputs = [ApplyBody()(double_plus_one(), x), ApplyBody()(double_plus_one(), x)]
    fgraph = FunctionGraph([x], outputs, clone=False)
    MergeOptimizer().rewrite(fgraph)
    fold_inner_graphs(fgraph)

    assert fgraph.outputs[0] is fgraph.outputs[1]
    assert len(folded_bodies(fgraph.outputs)) == 1


def test_an_equal_rewritten_body_is_interned_as_the_first():
    clear_body_cache()
    first = mark_rewritten(body_of(double_plus_one()))
    second = mark_rewritten(body_of(double_plus_one()))
    # A body not rewritten is compiled with the whole rewriter: it is not interned.
    user_built = body_of(double_plus_one())

    assert first is not second
    assert intern_body(first) is first
    assert intern_body(second) is first
    assert intern_body(user_built) is user_built
    clear_body_cache()
    assert intern_body(second) is second


def test_which_linker_runs_a_consumer():
    assert runs(VMLinker(), ApplyBody)  # a thunk linker runs any Op with a perform
    assert not runs(NumbaLinker(), ApplyBody)  # no Numba conversion registered
    assert runs(NumbaLinker(), type(pt.exp(pt.dvector()).owner.op))


def test_a_record_puts_back_the_very_object_it_replaced():
    class Owner:
        def method(self):
            return "PyTensor's"

    original = Owner.__dict__["method"]
    record = Patch(Owner, "method", lambda self: "replaced")
    record.apply()
    assert Owner().method() == "replaced"
    record.revert()
    assert Owner.__dict__["method"] is original


def test_full_collections_are_deferred_within_a_window_and_restored_after():
    if not gc.isenabled():
        pytest.skip("the collector is disabled")
    before = gc.get_threshold()
    with collector.full_collections_deferred():
        with collector.full_collections_deferred():
            assert collector.depth() == 2
        assert gc.get_threshold()[2] == max(before[2], collector.DEFERRED_THRESHOLD2)
    assert collector.depth() == 0
    assert gc.get_threshold() == before
