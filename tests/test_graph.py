"""Unit tests: params, inner-graph nodes, verification errors, the builder's capture, visibility."""

import pickle

import pytensor.scalar as ps
import pytensor.tensor as pt
import pytest
from pytensor.graph.basic import Constant, NominalVariable, equal_computations
from pytensor.graph.fg import FunctionGraph
from pytensor.ifelse import ifelse as vanilla_ifelse

from innergraph import (
    ArityError,
    BodyTypeError,
    FreeVariableError,
    InnerGraph,
    InnerGraphType,
    ParamError,
    body_of,
    inner_graph,
)
from innergraph.core.fold import always_computed, visible_nodes
from innergraph.core.graph import scope_leaves, scope_toposort, used_params
from typed import call, param

dscalar = pt.dscalar().type
dvector = pt.dvector().type


def test_params_are_interned_per_id_and_type():
    assert param(0, dscalar) is param(0, dscalar)
    assert param(0, dscalar) is not param(1, dscalar)
    assert param(0, dscalar) is not param(0, dvector)


def test_inner_graph_node_signature_and_equality():
    ftype = InnerGraphType([dscalar, dscalar], [dscalar])
    out = param(0, dscalar) + param(1, dscalar)
    f = InnerGraph(ftype).make_node(out).outputs[0]
    assert f.type == ftype
    assert InnerGraph(ftype) == InnerGraph(InnerGraphType([dscalar, dscalar], [dscalar]))
    assert InnerGraph(ftype) != InnerGraph(InnerGraphType([dscalar, dvector], [dscalar]))
    assert str(ftype).count("->") == 1


def test_free_variable_is_named():
    x = pt.dscalar("free_x")
    with pytest.raises(FreeVariableError, match="free_x"):
        InnerGraph(InnerGraphType([dscalar], [dscalar]))(param(0, dscalar) + x)


def test_param_out_of_range_and_type_collision():
    with pytest.raises(ParamError, match="out of range"):
        InnerGraph(InnerGraphType([dscalar], [dscalar]))(param(3, dscalar) * 2)
    with pytest.raises(ParamError, match="declares"):
        InnerGraph(InnerGraphType([dvector], [dscalar]))(param(0, dscalar) * 2)


def test_nested_body_reading_its_parents_param_is_rejected():
    # A hand-built nested body that reads the enclosing body's param 1 directly, instead
    # of receiving it as an argument: inside the nested body, id 1 is out of range.
    with pytest.raises(ParamError, match="out of range"):
        InnerGraph(InnerGraphType([dscalar], [dscalar]))(param(0, dscalar) * param(1, dscalar))
    # Received as an argument, the same computation is fine and reuses ids 0 and 1.
    nested = InnerGraph(InnerGraphType([dscalar, dscalar], [dscalar])).make_node(param(0, dscalar) * param(1, dscalar)).outputs[0]
    outer = InnerGraph(InnerGraphType([dscalar, dscalar], [dscalar])).make_node(call(nested, param(0, dscalar), param(1, dscalar))).outputs[0]
    assert body_of(outer).type.param_types == (dscalar, dscalar)


def test_output_must_be_a_variable_and_fit_declared_type():
    with pytest.raises(BodyTypeError, match="not a PyTensor Variable"):
        InnerGraph(InnerGraphType([dscalar], [dscalar]))("nope")
    with pytest.raises(BodyTypeError, match="does not fit"):
        InnerGraph(InnerGraphType([dvector], [dscalar]))(param(0, dvector) * 2)
    with pytest.raises(BodyTypeError, match="declares 1 outputs"):
        InnerGraph(InnerGraphType([dscalar], [dscalar]))(param(0, dscalar), param(0, dscalar))


def test_builder_rejects_duplicate_and_constant_inputs():
    x = pt.dscalar("x")
    with pytest.raises(ParamError, match="same variable"):
        inner_graph(x * 2, [x, x])
    with pytest.raises(ParamError, match="constant"):
        inner_graph(x * 2, [pt.constant(1.0)])


def test_call_checks_arity_and_types_naming_the_argument():
    f = inner_graph(lambda u, v: u * v, [dscalar, dscalar])
    with pytest.raises(ArityError, match="takes 2 arguments"):
        call(f, pt.dscalar())
    with pytest.raises(BodyTypeError, match="argument 1 .*matrix_arg"):
        call(f, pt.dscalar(), pt.dmatrix("matrix_arg"))
    with pytest.raises(BodyTypeError, match="must be a function variable"):
        from innergraph import Call

        Call()(pt.dscalar("not_a_function"), pt.dscalar())


def test_hoist_captures_largest_free_subexpression():
    a, b = pt.dscalar("a"), pt.dscalar("b")
    hoisted = pt.exp(a) * b
    f = inner_graph(lambda u: u + hoisted, [dscalar])
    assert f.captured == (hoisted,)
    body = body_of(f.function)
    assert equal_computations(list(body.outputs), [param(0, dscalar) + param(1, dscalar)])


def test_leaves_capture_copies_free_work_into_the_body():
    a, b = pt.dscalar("a"), pt.dscalar("b")
    f = inner_graph(lambda u: u + pt.exp(a) * b, [dscalar], capture="leaves")
    assert f.captured == (a, b)
    p0, p1, p2 = (param(i, dscalar) for i in range(3))
    assert equal_computations(list(body_of(f.function).outputs), [p0 + pt.exp(p1) * p2])


def test_constant_only_work_stays_in_the_body():
    f = inner_graph(lambda u: u + pt.exp(pt.constant(2.0)), [dscalar])
    assert f.captured == ()
    leaves = scope_leaves(body_of(f.function).outputs)
    assert any(isinstance(v, Constant) for v in leaves)


def test_builder_does_not_mutate_the_users_graph():
    x = pt.dscalar("x")
    y = pt.exp(x) + 1
    before = [y.owner, list(y.owner.inputs), y.owner.inputs[0].owner]
    inner_graph(y, [x])
    assert [y.owner, list(y.owner.inputs), y.owner.inputs[0].owner] == before
    assert not any(isinstance(v, NominalVariable) for v in scope_leaves([y]))


def test_scope_walk_stops_at_nested_functions():
    inner = inner_graph(lambda u: pt.sin(u), [dscalar]).function
    outer = inner_graph(lambda u: call(inner, u) * 2, [dscalar]).function
    body = body_of(outer)
    nodes = scope_toposort(body.outputs)
    assert not any(isinstance(getattr(n.op, "scalar_op", None), ps.Sin) for n in nodes)
    # `call` reads the nested function folded: a constant holding the same body
    assert any(isinstance(v, Constant) and v.data == body_of(inner) for v in scope_leaves(body.outputs))
    assert used_params(body) == {0}


def test_unused_params_are_reported_by_used_params():
    f = inner_graph(lambda u, v: u * 2, [dscalar, dscalar]).function
    assert used_params(body_of(f)) == {0}


def test_types_and_functions_pickle():
    f = inner_graph(lambda u: u * 2 + 1, [dscalar]).function
    g = pickle.loads(pickle.dumps(f))
    assert g.type == f.type
    assert equal_computations(list(body_of(g).outputs), list(body_of(f).outputs))


def test_a_body_pickles_through_its_cached_canonical_encoding(monkeypatch):
    import innergraph.core.canonical

    body = body_of(inner_graph(lambda u: u * 2 + 1, [dscalar]).function)
    key = body.key()

    def encode_again(_):
        raise AssertionError("pickling a Body encoded it again")

    monkeypatch.setattr(innergraph.core.canonical, "encode", encode_again)
    data = pickle.dumps(body)
    monkeypatch.undo()
    again = pickle.loads(data)
    assert again == body and again is not body and again.key() == key


def test_always_computed_leaves_out_the_branches_of_a_lazy_ifelse():
    x = pt.dscalar("x")
    cond, taken_only, eager = pt.gt(x, 0), pt.exp(x), pt.log(x)
    fg = FunctionGraph([x], [vanilla_ifelse(cond, taken_only, x) + eager], clone=False)
    computed = always_computed(fg.outputs)
    assert taken_only.owner in visible_nodes(fg)
    assert taken_only.owner not in computed
    assert cond.owner in computed and eager.owner in computed
    assert computed < visible_nodes(fg)


@pytest.mark.parametrize("dtype", ["int8", "int16", "int32", "int64", "uint8", "float32", "float64", "bool"])
def test_a_constant_keeps_its_type_through_the_canonical_encoding(dtype):
    """Decoding an encoding gives constants of the same types: encoded afresh, the body encodes the same (issue 47)."""
    import numpy as np

    from innergraph.core.canonical import decode, encode

    v = pt.vector("v", dtype=dtype if dtype != "bool" else "int8")
    scalar = np.array(1, dtype=dtype)[()]
    built = inner_graph(lambda u: [u[2], u[-1:] + pt.constant(np.array([scalar]), dtype=dtype), u * ps.constant(scalar)], [v])
    body = body_of(built.function)
    again = decode(encode(body))
    assert encode(again) == encode(body)
    originals = [c for n in scope_toposort(body.outputs) for c in n.inputs if isinstance(c, Constant)]
    loaded = [c for n in scope_toposort(again.outputs) for c in n.inputs if isinstance(c, Constant)]
    assert [c.type for c in loaded] == [c.type for c in originals] and originals
    assert [np.asarray(c.data).dtype for c in loaded] == [np.asarray(c.data).dtype for c in originals]


def test_a_body_calling_a_body_decodes_to_an_equal_body():
    """A nested body (an ``("f", encoding)`` leaf) decodes to the body it encodes (a mutant of issue 47's run survived here)."""
    from innergraph import call
    from innergraph.core.canonical import decode, encode
    from innergraph.core.graph import is_function

    v = pt.dvector("v")
    built = inner_graph(lambda u: call(lambda w: pt.exp(w) * 2, u[1:]) + u[0], [v])
    body = body_of(built.function)
    nested = [i for n in scope_toposort(body.outputs) for i in n.inputs if is_function(i)]
    assert nested  # the inner body is a leaf of the outer one
    again = decode(encode(body))
    assert encode(again) == encode(body)
    again_nested = [i for n in scope_toposort(again.outputs) for i in n.inputs if is_function(i)]
    assert [encode(body_of(f)) for f in again_nested] == [encode(body_of(f)) for f in nested]
