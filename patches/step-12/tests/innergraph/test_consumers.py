"""The in-graph call and conditional: bodies read as folded function inputs, run by PyTensor's linkers.

``call`` and ``ifelse`` build their bodies with ``inner_graph`` and read them folded
(a constant holding the `Body`), so the graphs compile with ``pytensor.function`` as
they are, before any rewrite of innergraph is registered.
"""

import numpy as np

import pytensor
import pytensor.tensor as pt
from pytensor.compile.mode import Mode
from pytensor.graph.basic import Apply
from pytensor.graph.op import Op
from pytensor.innergraph.ops.call import Call, call
from pytensor.innergraph.ops.ifelse import IfElse, ifelse


# the Python linker: no C compilation, and the conditional is lazy by itself (its branches are bodies)
PY = Mode(linker="py", optimizer="fast_run")


def nodes_of(fn, op_class):
    return [
        node for node in fn.maker.fgraph.toposort() if isinstance(node.op, op_class)
    ]


def test_a_call_computes_its_body_and_its_gradient():
    x, y = pt.dvectors("x", "y")
    out = call(lambda a, b: a * b + pt.exp(a), x, y)
    cost = out.sum()
    fn = pytensor.function([x, y], [out, *pytensor.grad(cost, [x, y])], mode=PY)

    x_val, y_val = np.array([0.5, 1.0, -2.0]), np.array([3.0, -1.0, 0.25])
    value, dx, dy = fn(x_val, y_val)
    np.testing.assert_allclose(value, x_val * y_val + np.exp(x_val))
    np.testing.assert_allclose(dx, y_val + np.exp(x_val))
    np.testing.assert_allclose(dy, x_val)


def test_calls_of_bodies_built_apart_share_one_folded_body():
    x, y = pt.dvectors("x", "y")
    first = call(lambda a: pt.tanh(a) * 2, x)
    second = call(lambda a: pt.tanh(a) * 2, y)
    same_args = call(lambda a: pt.tanh(a) * 2, x)
    fn = pytensor.function([x, y], [first + same_args, second], mode=PY)

    calls = nodes_of(fn, Call)
    assert len(calls) == 2  # the two calls of x merged into one node
    assert calls[0].inputs[0] is calls[1].inputs[0]  # one constant, one body
    x_val, y_val = np.array([0.1, 0.2]), np.array([-1.0, 3.0])
    both, other = fn(x_val, y_val)
    np.testing.assert_allclose(both, 4 * np.tanh(x_val))
    np.testing.assert_allclose(other, 2 * np.tanh(y_val))


class Counted(Op):
    """The identity, counting its runs."""

    __props__ = ()
    runs = 0

    def make_node(self, x):
        x = pt.as_tensor_variable(x)
        return Apply(self, [x], [x.type()])

    def perform(self, node, inputs, output_storage):
        Counted.runs += 1
        output_storage[0][0] = inputs[0].copy()


def test_a_conditional_runs_only_the_branch_it_takes():
    c = pt.bscalar("c")
    x = pt.dvector("x")
    out = ifelse(c, x * 2, Counted()(pt.exp(x)).sum() * pt.ones_like(x))
    fn = pytensor.function([c, x], out, mode=PY)

    assert len(nodes_of(fn, IfElse)) == 1
    x_val = np.array([1.0, 2.0])
    Counted.runs = 0
    np.testing.assert_allclose(fn(1, x_val), 2 * x_val)
    assert Counted.runs == 0
    np.testing.assert_allclose(fn(0, x_val), np.exp(x_val).sum() * np.ones(2))
    assert Counted.runs == 1
