"""Lazy shapes for the hidden nodes the consumer rewrites import (`innergraph.rewriting.hidden_shapes`).

* Structure: the benchmark cases with loops, calls and conditionals compile to the
  same graph (``debugprint`` text, inner graphs and folded bodies included: the Ops
  of every step) with the lazy shapes and without them.
* The block itself: a param-bound node gets ``Shape_i`` shapes of its own outputs, a
  visible node PyTensor's inference; when the block ends, a lazily shaped node of a
  call's body (not lowered) is inferred again, one of a loop's body is not;
  PyTensor's own ``on_import`` is back.
* A visible node whose type fixes its whole shape gets the shape PyTensor gives it
  without an ``infer_shape`` call (the pushed-out vectors of the GARCH models).
"""

import contextlib

import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.graph.fg import FunctionGraph
from pytensor.graph.traversal import io_toposort
from pytensor.tensor.rewriting.shape import ShapeFeature
from pytensor.tensor.shape import Shape_i

import innergraph
import innergraph.rewriting.simplify as simplify
from innergraph.bench import compile_graph
from innergraph.cases import select
from innergraph.graph import InnerGraph, body_of, params
from innergraph.ops.call import Call
from innergraph.ops.scan import Scan
from innergraph.rewriting.hidden_shapes import lazy_hidden_shapes
from innergraph.types import InnerGraphType

#: Loops pushed out of (ar2, garch, filter, 1669), nested loops, conditionals, calls,
#: and loops sharing a body (their pushed-out work is a call body the rewrites build).
CASE_IDS = ["ar2", "garch", "1669-d2", "nested", "ifelse", "student-t-ofg-K8", "shared-5ops-K4", "newton-scan"]


def _compiled_text(case, lazy):
    replacement = simplify.lazy_hidden_shapes if lazy else (lambda fgraph: contextlib.nullcontext())
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(simplify, "lazy_hidden_shapes", replacement)
        fn = compile_graph(case, "innergraph", case.build("innergraph"))
    return pytensor.dprint(fn, file="str", print_type=True)


@pytest.mark.parametrize("case", select(CASE_IDS), ids=lambda case: case.id)
def test_compiled_graph_is_the_same_with_lazy_hidden_shapes(case):
    assert _compiled_text(case, lazy=True) == _compiled_text(case, lazy=False)


def _new_body(x, w):
    p0, p1 = params([x.type, w.type])
    return pt.log(p0 + p1) * p1  # param-bound: Log, Add, Mul


def test_param_bound_nodes_get_lazy_shapes_and_visible_ones_inferred():
    x, w = pt.dvector("x"), pt.dvector("w")
    fgraph = FunctionGraph([x, w], [x + w], clone=False)
    feature = ShapeFeature()
    fgraph.attach_feature(feature)
    hidden = _new_body(x, w)
    visible = pt.exp(x) * w
    with lazy_hidden_shapes(fgraph):
        assert "on_import" in vars(feature)
        fgraph.add_output(hidden)
        fgraph.add_output(visible)
        (hidden_dim,) = feature.shape_of[hidden]
        assert isinstance(hidden_dim.owner.op, Shape_i) and hidden_dim.owner.inputs[0] is hidden  # lazy
        (visible_dim,) = feature.shape_of[visible]
        assert visible_dim.owner is None or visible_dim.owner.inputs[0] is not visible  # inferred from x and w
    assert "on_import" not in vars(feature)  # PyTensor's own method again


def test_an_input_nominal_variable_is_no_param():
    """PyTensor's Scan compiles inner graphs whose inputs are NominalVariables: their nodes are visible."""
    p0, p1 = params([pt.dvector().type, pt.dvector().type])
    fgraph = FunctionGraph([p0, p1], [p0 + p1], clone=False)
    feature = ShapeFeature()
    fgraph.attach_feature(feature)
    out = pt.exp(p0) * p1
    with lazy_hidden_shapes(fgraph):
        fgraph.add_output(out)
    (dim,) = feature.shape_of[out]
    assert not (isinstance(dim.owner.op, Shape_i) and dim.owner.inputs[0] is out)


def _lazy(feature, var):
    (dim,) = feature.shape_of[var]
    return dim.owner is not None and isinstance(dim.owner.op, Shape_i) and dim.owner.inputs[0] is var


def test_a_call_body_outliving_the_block_is_inferred_again_a_loop_body_is_not():
    x, w = pt.dvector("x"), pt.dvector("w")
    trace = innergraph.scan(lambda xt, acc: acc + xt, sequences=[x], outputs_info=[pt.zeros(())], return_updates=False)
    (loop,) = [n for n in io_toposort([x], [trace]) if isinstance(n.op, Scan)]
    fgraph = FunctionGraph([x, w], [x * w], clone=False)
    feature = ShapeFeature()
    fgraph.attach_feature(feature)
    call_body = _new_body(x, w)
    loop_body = [o * 1.5 for o in body_of(loop.inputs[0]).outputs]
    with lazy_hidden_shapes(fgraph):
        fgraph.add_output(Call()(InnerGraph(InnerGraphType((x.type, w.type), (x.type,)))(call_body), x, w))
        unfolded = InnerGraph(loop.inputs[0].type)(*loop_body)
        fgraph.add_output(loop.op(unfolded, *loop.inputs[1:])[0])
        assert _lazy(feature, call_body)
        assert all(_lazy(feature, o) for o in loop_body if o.ndim)
    assert not _lazy(feature, call_body)  # a call is not lowered: PyTensor's inference after all
    assert all(_lazy(feature, o) for o in loop_body if o.ndim)  # lowered at 1.59: left lazy


def _infer_shape_calls(monkeypatch):
    from pytensor.tensor.elemwise import Elemwise

    calls = []
    infer = Elemwise.infer_shape

    def counted(self, fgraph, node, shapes):
        calls.append(node)
        return infer(self, fgraph, node, shapes)

    monkeypatch.setattr(Elemwise, "infer_shape", counted)
    return calls


def test_a_visible_node_of_static_shape_is_not_inferred(monkeypatch):
    x, w = pt.tensor("x", shape=(200,)), pt.tensor("w", shape=(None,))
    calls = _infer_shape_calls(monkeypatch)
    shapes = {}
    for lazy in (False, True):
        fgraph = FunctionGraph([x, w], [x + 1.0], clone=False)
        feature = ShapeFeature()
        fgraph.attach_feature(feature)
        static, open_ = pt.exp(x) * x, pt.exp(w) * w
        calls.clear()
        with lazy_hidden_shapes(fgraph) if lazy else contextlib.nullcontext():
            fgraph.add_output(static)
            fgraph.add_output(open_)
        assert {n.outputs[0] for n in calls} == ({open_, open_.owner.inputs[0]} if lazy else {static, static.owner.inputs[0], open_, open_.owner.inputs[0]})
        shapes[lazy] = [[int(d.data) for d in feature.shape_of[v]] for v in (static, static.owner.inputs[0])]
    assert shapes[True] == shapes[False] == [[200], [200]]  # the constants PyTensor's set_shape makes either way


def test_no_shape_feature_no_change():
    x = pt.dvector("x")
    fgraph = FunctionGraph([x], [pt.exp(x)], clone=False)
    with lazy_hidden_shapes(fgraph):
        fgraph.add_output(_new_body(x, x))
    assert not hasattr(fgraph, "shape_feature")
