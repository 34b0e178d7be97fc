"""Bodies as function-typed variables: closure, alpha-equivalence, merging, pickling.

These tests reach ``pytensor.innergraph.core`` without enabling innergraph: nothing
in PyTensor imports it yet, and no rewrite or linker knows a function variable.
"""

import pickle

import numpy as np
import pytest

import pytensor
import pytensor.tensor as pt
from pytensor.graph.basic import Constant, NominalVariable, equal_computations
from pytensor.graph.fg import FunctionGraph
from pytensor.graph.rewriting.basic import MergeOptimizer
from pytensor.innergraph.core.build import inner_graph
from pytensor.innergraph.core.canonical import decode, encode
from pytensor.innergraph.core.errors import (
    ArityError,
    BodyTypeError,
    FreeVariableError,
    ParamError,
)
from pytensor.innergraph.core.graph import (
    InnerGraph,
    body_of,
    is_function,
    param,
    scope_toposort,
    used_params,
)
from pytensor.innergraph.core.instantiate import instantiate
from pytensor.innergraph.core.types import InnerGraphType
from pytensor.scalar import exp as scalar_exp


def body_ops(function):
    return [node.op for node in scope_toposort(body_of(function).outputs)]


def has_exp(function):
    return any(
        getattr(op, "scalar_op", None) == scalar_exp for op in body_ops(function)
    )


def test_a_body_reads_only_its_params_and_what_it_captured():
    a = pt.dscalar("a")
    closure = inner_graph(lambda x: x * pt.exp(a) + 1, [pt.dvector])

    function = closure.function
    assert is_function(function)
    assert isinstance(function.owner.op, InnerGraph)
    # The largest free subexpression is captured (exp(a), broadcast to a vector),
    # so the body does no work that does not depend on its params.
    assert equal_computations(list(closure.captured), [pt.exp(a).dimshuffle("x")])
    assert not has_exp(function)
    body = body_of(function)
    assert body.type == InnerGraphType(
        [pt.dvector().type, closure.captured[0].type], [pt.dvector().type]
    )
    assert used_params(body) == {0, 1}
    leaves = {
        v
        for node in scope_toposort(body.outputs)
        for v in node.inputs
        if v.owner is None
    }
    assert all(isinstance(v, NominalVariable | Constant) for v in leaves)
    assert param(0, pt.dvector().type) in leaves


def test_capturing_leaves_keeps_the_work_in_the_body():
    a = pt.dscalar("a")
    closure = inner_graph(lambda x: x * pt.exp(a), [pt.dvector], capture="leaves")
    assert closure.captured == (a,)
    assert has_exp(closure.function)


def test_an_instantiated_body_computes_what_its_graph_computes():
    a = pt.dscalar("a")
    closure = inner_graph(lambda x: pt.sin(x) * pt.exp(a) + 1, [pt.dvector])
    y = pt.dvector("y")
    (out,) = instantiate(closure.function, [y, *closure.captured])

    assert not any(
        isinstance(v, NominalVariable) for v in pytensor.graph.graph_inputs([out])
    )
    fn = pytensor.function([y, a], out)
    y_val = np.linspace(-1.0, 1.0, 5)
    np.testing.assert_allclose(fn(y_val, 0.5), np.sin(y_val) * np.exp(0.5) + 1)


def test_bodies_built_apart_are_equal_exactly_when_alpha_equivalent():
    def minus(fn):
        return body_of(inner_graph(fn, [pt.dvector, pt.dvector]).function)

    first = minus(lambda x, y: x - 2 * y)
    renamed = minus(lambda u, v: u - 2 * v)
    swapped = minus(lambda x, y: y - 2 * x)
    other_constant = minus(lambda x, y: x - 3 * y)

    assert first is not renamed
    assert first == renamed
    assert hash(first) == hash(renamed)
    assert encode(first) == encode(renamed)
    assert first != swapped
    assert first != other_constant


def test_merging_makes_alpha_equivalent_functions_one_variable():
    def scaled(k):
        return inner_graph(lambda x: x * k + 1, [pt.dvector]).function

    fgraph = FunctionGraph([], [scaled(2.0), scaled(2.0), scaled(3.0)], clone=False)
    MergeOptimizer().rewrite(fgraph)

    same, also_same, other = fgraph.outputs
    assert same is also_same
    assert other is not same
    # Each body is x * k + 1 over broadcast constants: two ExpandDims, Mul, Add and
    # the InnerGraph node. The two equal bodies are one after merging, and the third
    # shares the broadcast 1 with them: 5 + 4 nodes, not 3 * 5.
    assert len(fgraph.apply_nodes) == 5 + 4


def test_the_encoding_rebuilds_an_equal_body():
    body = body_of(
        inner_graph(lambda x, n: pt.cumsum(x) ** n, [pt.dvector, pt.lscalar]).function
    )
    rebuilt = decode(encode(body))

    assert rebuilt == body
    x, n = pt.dvector("x"), pt.lscalar("n")
    (out,) = instantiate(rebuilt, [x, n])
    x_val = np.arange(1.0, 4.0)
    np.testing.assert_allclose(
        pytensor.function([x, n], out)(x_val, 2), np.cumsum(x_val) ** 2
    )


def test_a_body_pickles_to_the_same_bytes_wherever_it_was_built():
    def build():
        return body_of(inner_graph(lambda x: pt.tanh(x) * 0.5, [pt.dmatrix]).function)

    first, second = build(), build()
    data = pickle.dumps(first)

    assert data == pickle.dumps(second)
    assert pickle.loads(data) == first


def test_a_body_that_reads_a_free_variable_is_refused_naming_it():
    a = pt.dscalar("free_a")
    x = param(0, pt.dvector().type)
    function_type = InnerGraphType([x.type], [pt.dvector().type])
    with pytest.raises(FreeVariableError, match="free_a"):
        InnerGraph(function_type).make_node(x * a)


def test_a_param_outside_the_signature_is_refused():
    x = param(0, pt.dvector().type)
    function_type = InnerGraphType([x.type], [pt.dvector().type])
    with pytest.raises(ParamError, match="out of range"):
        InnerGraph(function_type).make_node(x + param(1, pt.dvector().type))
    with pytest.raises(ParamError, match="declares"):
        InnerGraph(function_type).make_node(x + param(0, pt.dscalar().type))


def test_wrong_outputs_and_arguments_are_refused():
    with pytest.raises(BodyTypeError, match="outputs"):
        InnerGraph(InnerGraphType([], [pt.dvector().type])).make_node()
    with pytest.raises(BodyTypeError):
        inner_graph(lambda x: "not a variable", [pt.dvector])
    closure = inner_graph(lambda x: x + 1, [pt.dvector])
    with pytest.raises(ArityError):
        instantiate(closure.function, [pt.dvector(), pt.dvector()])


def test_a_function_variable_never_runs():
    function = inner_graph(lambda x: x + 1, [pt.dvector]).function
    with pytest.raises(RuntimeError, match="folded into constants"):
        function.owner.op.perform(function.owner, [], [[None]])
