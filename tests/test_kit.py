# mypy: disable-error-code="override"
# (this file's Ops and linkers declare make_node with the arguments they take, as PyTensor's own do)
"""Every consumer of this project, checked with the public kit (innergraph.testing)."""

import warnings
from typing import Any

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.compile.builders import OpFromGraph
from pytensor.gradient import disconnected_type
from pytensor.graph.basic import Apply
from pytensor.graph.op import Op
from pytensor.ifelse import ifelse as vanilla_ifelse

import innergraph
from innergraph.protocol.runtime import body_value, compiled_function, linker_for, make_body_thunk
from innergraph.testing import OpCase, check_inner_graph_op
from typed import call, grad

CALL = OpCase(
    build=lambda bodies, args: call(bodies[0], *args),
    arg_types=[pt.dvector().type, pt.dscalar().type],
    bodies=[lambda v, a: pt.tanh(v) * a],
    rewritten=[lambda v, a: (pt.tanh(v) * 1 + 0) * a],
    changed=[lambda v, a: pt.sin(v) * a],
    reference=lambda args: pt.tanh(args[0]) * args[1],
    sample=lambda rng: [rng.normal(size=4), rng.normal()],
    differentiable=[0, 1],
)


def _scan_build(bodies, args):
    return innergraph.scan(bodies[0], sequences=[args[0]], outputs_info=[args[1]], return_updates=False)


SCAN = OpCase(
    build=_scan_build,
    arg_types=[pt.dvector().type, pt.dscalar().type],
    bodies=[lambda s, y: y * 0.5 + pt.tanh(s)],
    rewritten=[lambda s, y: (y * 0.5 + pt.tanh(s)) * 1],
    changed=[lambda s, y: y * 0.5 + pt.sin(s)],
    reference=lambda args: pytensor.scan(
        lambda s, y: y * 0.5 + pt.tanh(s), sequences=[args[0]], outputs_info=[args[1]], return_updates=False
    ),
    sample=lambda rng: [rng.normal(size=5), rng.normal()],
    differentiable=[0, 1],
)


def _branches(bodies, args, cond_fn):
    v, a = args
    return cond_fn(a > 0, bodies[0](v, a), bodies[1](v, a))


IFELSE = OpCase(
    build=lambda bodies, args: _branches(bodies, args, innergraph.ifelse),
    arg_types=[pt.dvector().type, pt.dscalar().type],
    bodies=[lambda v, a: (pt.exp(v) * a).sum(), lambda v, a: (v**2).sum()],
    rewritten=[lambda v, a: (pt.exp(v) * a).sum() + 0, lambda v, a: (v**2).sum() * 1],
    changed=[lambda v, a: (pt.exp(v) * a).sum(), lambda v, a: (v**3).sum()],
    reference=lambda args: _branches(
        [lambda v, a: (pt.exp(v) * a).sum(), lambda v, a: (v**2).sum()], args, vanilla_ifelse
    ),
    sample=lambda rng: [rng.normal(size=3), np.float64(0.7)],
    differentiable=[0],
)


@pytest.mark.parametrize("case", [CALL, SCAN, IFELSE], ids=["call", "scan", "ifelse"])
def test_consumer_passes_the_kit(case):
    check_inner_graph_op(case, seed=3)


def test_the_kit_catches_a_broken_reference():
    broken = OpCase(**{**CALL.__dict__, "reference": lambda args: pt.sin(args[0]) * args[1]})
    with pytest.raises(AssertionError, match="law 5"):
        check_inner_graph_op(broken)


def test_a_reference_that_cannot_run_is_named_as_such():
    from pytensor.raise_op import Assert

    failing = OpCase(**{**CALL.__dict__, "reference": lambda args: Assert("no such run")(pt.tanh(args[0]) * args[1], pt.lt(args[1], -1e9))})
    with pytest.raises(AssertionError, match=r"law 5: the vanilla reference \(case.reference\) failed to run .*no such run"):
        check_inner_graph_op(failing)


def test_the_kit_catches_bodies_that_do_not_differ():
    same = OpCase(**{**CALL.__dict__, "changed": CALL.bodies})
    with pytest.raises(AssertionError, match="law 2"):
        check_inner_graph_op(same)


def test_the_design_doc_example():
    """The complete example in design/testing.md runs and passes the kit."""
    import pathlib
    import re

    import sys
    import types

    text = (pathlib.Path(__file__).parent.parent / "design" / "testing.md").read_text()
    (code,) = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    module = types.ModuleType("design_testing_example")  # importable, so the kit can pickle its Op
    sys.modules[module.__name__] = module
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("error", ".*returned DisconnectedType")  # it declares its connection pattern
            exec(compile(code, "design/testing.md", "exec"), module.__dict__)
    finally:
        del sys.modules[module.__name__]


# --- each law can fail ---------------------------------------------------------------------
#
# ``check_inner_graph_op`` checks, in order: law 1, law 2, law 5, law 4, pickling,
# infer_shape, verify_grad. Each case below is a consumer that passes every check before
# the one it breaks, so the failure shows that check at work, with its message.


class Apply3(Op):
    """``Apply3()(function, x)`` = ``function(function(function(x)))``: a small consumer that passes the kit."""

    __props__: tuple[str, ...] = ()
    kind = "call"  # how graph_stats (and the kit) find it
    times = 3
    gain = 1.0  # a factor on the result (1 in a correct consumer)

    def make_node(self, function, x):
        x = function.type.param_types[0].filter_variable(x)
        return Apply(self, [function, x], [x.type()])

    def _function(self, inputs):
        return inputs[0]

    def _body(self, node):
        return body_value(self._function(node.inputs))

    def _run(self, node, linker):
        fn = compiled_function(self._body(node), linker)

        def run(args):
            value = args[-1]
            for _ in range(self.times):
                (value,) = fn(value)
            return [np.asarray(value * self.gain)]

        return run

    def make_thunk(self, node, storage_map, compute_map, no_recycling, impl=None):
        return make_body_thunk(node, storage_map, compute_map, self._run(node, linker_for(impl)))

    def perform(self, node, inputs, output_storage):
        output_storage[0][0] = self._run(node, "py")(inputs)[0]

    def infer_shape(self, node, input_shapes):
        return [input_shapes[-1]]

    def connection_pattern(self, node):
        return [[False]] * (len(node.inputs) - 1) + [[True]]  # the function input has no gradient

    def pullback(self, inputs, outputs, cotangents):
        unrolled = x = inputs[-1]
        for _ in range(self.times):
            unrolled = call(self._function(inputs), unrolled)
        grad_x = grad(None, x, known_grads={unrolled * self.gain: cotangents[0]})
        return [disconnected_type()] * (len(inputs) - 1) + [grad_x]


def _apply3(op_class):
    def build(bodies, args):
        closure = innergraph.inner_graph(bodies[0], [args[0]])
        return op_class()(innergraph.fold_function(closure.function), args[0])

    return build


def _three_times(x, gain=1.0):
    for _ in range(3):
        x = pt.tanh(x) * 0.5 + 1
    return x * gain


APPLY3 = OpCase(
    build=_apply3(Apply3),
    arg_types=[pt.dvector().type],
    bodies=[lambda v: pt.tanh(v) * 0.5 + 1],
    rewritten=[lambda v: (pt.tanh(v) * 0.5 + 1) * 1 + 0],
    changed=[lambda v: pt.sin(v) * 0.5 + 1],
    reference=lambda args: _three_times(args[0]),
    sample=lambda rng: [rng.normal(size=4)],
    differentiable=[0],
)


def test_the_small_consumer_passes_the_kit():
    check_inner_graph_op(APPLY3)


class NeverMerges(Apply3):
    """Compares by identity: two equal applications stay two nodes."""

    def __eq__(self, other):
        return self is other

    def __hash__(self):
        return id(self)


def test_law_1_fails_on_a_consumer_that_never_merges():
    with pytest.raises(AssertionError, match="law 1: two consumers built from the same bodies did not merge"):
        check_inner_graph_op(OpCase(**{**APPLY3.__dict__, "build": _apply3(NeverMerges)}))


class BodyInOp(Apply3):
    """Keeps its body on the Op instead of taking it as an input, and compares by props: any two bodies merge."""

    def __init__(self, function):
        self.function = function

    def make_node(self, x):
        return Apply(self, [x], [x.type()])

    def _function(self, inputs):
        return self.function


def test_law_2_fails_on_a_consumer_that_merges_other_bodies():
    def build(bodies, args):
        closure = innergraph.inner_graph(bodies[0], [args[0]])
        return BodyInOp(innergraph.fold_function(closure.function))(args[0])

    with pytest.raises(AssertionError, match="law 2: consumers built from bodies of different meaning merged"):
        check_inner_graph_op(OpCase(**{**APPLY3.__dict__, "build": build}))


class OffByOne(Apply3):
    """Applies its body four times."""

    times = 4


def test_law_5_fails_on_a_consumer_that_computes_something_else():
    with pytest.raises(AssertionError, match="law 5: result 0 differs from the vanilla reference"):
        check_inner_graph_op(OpCase(**{**APPLY3.__dict__, "build": _apply3(OffByOne)}))


class Frozen(Apply3):
    """Keeps its body on the Op and compares bodies by their canonical encoding when built (as vanilla
    PyTensor compares frozen inner graphs): alpha-equivalent bodies merge, but nothing rewrites them."""

    __props__ = ("key",)

    def __init__(self, function):
        self.function = function
        self.key = body_value(function).key()

    def __str__(self):
        return "Frozen"

    def make_node(self, x):
        return Apply(self, [x], [x.type()])

    def _function(self, inputs):
        return self.function


def _frozen(bodies, args):
    closure = innergraph.inner_graph(bodies[0], [args[0]])
    return Frozen(innergraph.fold_function(closure.function))(args[0])


def test_law_4_fails_on_frozen_bodies():
    """Equal bodies merge (law 1), others stay apart (law 2), but bodies equal only up to canonicalization
    stay two. (PyTensor 3.3's own OpFromGraph passes law 4: its pipeline rewrites OpFromGraph inner
    graphs before merging them.)"""
    with pytest.raises(AssertionError, match=r"law 4: .* did not become one after FAST_RUN: output 0 is computed by "
                                             r"Frozen.*compute the same values, but the rewriter did not make them one"):
        check_inner_graph_op(OpCase(**{**APPLY3.__dict__, "build": _frozen}))


def test_law_4_fails_on_a_scan_whose_rewritten_body_means_something_else():
    """The push-out moves ``tanh(s)`` and ``sin(s)`` out of both bodies, which become one body: the two
    scans must still be one after FAST_RUN, and they are not."""
    wrong = OpCase(**{**SCAN.__dict__, "rewritten": SCAN.changed})
    with pytest.raises(AssertionError, match="law 4: .* they do not even compute the same values"):
        check_inner_graph_op(wrong)


def _map(bodies, args):
    return innergraph.scan(bodies[0], sequences=[args[0]], non_sequences=[args[1]], return_updates=False)


MAP = OpCase(
    build=_map,
    arg_types=[pt.dvector().type, pt.dscalar().type],
    bodies=[lambda s, a: pt.sin(s) * a],
    rewritten=[lambda s, a: (pt.sin(s) * 1) * a],
    changed=[lambda s, a: pt.cos(s) * a],
    reference=lambda args: pytensor.scan(lambda s, a: pt.sin(s) * a, sequences=[args[0]], non_sequences=[args[1]],
                                         return_updates=False),
    sample=lambda rng: [rng.normal(size=5), rng.normal()],
    differentiable=[0, 1],
)


def test_a_map_passes_the_kit():
    check_inner_graph_op(MAP)


def test_law_4_fails_on_a_map_whose_rewritten_body_means_something_else():
    """Merging and push-out take ``tan`` and ``sin`` out of the map's body (the loop disappears): law 4
    compares the consumers' results, not the bodies left over."""
    wrong = OpCase(**{**MAP.__dict__, "rewritten": [lambda s, a: pt.tan(s) * a]})
    with pytest.raises(AssertionError, match="law 4: .* they do not even compute the same values"):
        check_inner_graph_op(wrong)


class Scaled(Apply3):
    """Multiplies its result by ``gain``, which it pickles in single precision."""

    __props__ = ("gain",)

    def __init__(self, gain=0.1):
        self.gain = gain

    def __reduce__(self):
        return type(self), (float(np.float32(self.gain)),)  # 0.1 comes back as 0.10000000149...


def test_pickling_fails_on_a_consumer_that_pickles_a_rounded_parameter():
    """A relative error of 1.5e-8: ``np.allclose``'s default tolerance (1e-5) would let it through."""
    scaled = OpCase(**{**APPLY3.__dict__, "build": _apply3(Scaled), "reference": lambda args: _three_times(args[0], 0.1)})
    with pytest.raises(AssertionError, match="pickling: the unpickled function gives other results: output 0"):
        check_inner_graph_op(scaled)


class NoShape(Apply3):
    """Has no ``infer_shape``: PyTensor reads the shape from the computed output."""

    infer_shape = None  # type: ignore[assignment]  # no infer_shape: what the test is about


def test_infer_shape_fails_on_a_consumer_without_it():
    with pytest.raises(AssertionError, match=r"infer_shape: output 0's shape is read from the computed output of NoShape"):
        check_inner_graph_op(OpCase(**{**APPLY3.__dict__, "build": _apply3(NoShape)}))


class WrongShape(Apply3):
    def infer_shape(self, node, input_shapes):
        return [(input_shapes[-1][0] + 1,)]


def test_infer_shape_fails_on_a_consumer_that_infers_a_wrong_shape():
    with pytest.raises(AssertionError, match=r"infer_shape: output 0 has shape \(4,\), inferred \(5,\)"):
        check_inner_graph_op(OpCase(**{**APPLY3.__dict__, "build": _apply3(WrongShape)}))


class DoubledGradient(Apply3):
    """Its pullback returns twice the gradient."""

    def pullback(self, inputs, outputs, cotangents):
        *function, grad_x = super().pullback(inputs, outputs, cotangents)
        return [*function, grad_x * 2]


def _doubled_gradient_reference(args):
    """The same computation as a vanilla OpFromGraph whose gradient override is doubled too."""
    x = pt.dvector("x")

    def doubled(inputs, outputs, cotangents):
        return [2 * grad(None, inputs[0], known_grads={_three_times(inputs[0]): cotangents[0]})]

    return OpFromGraph([x], [_three_times(x)], pullback=doubled)(args[0])


def test_verify_grad_fails_on_a_wrong_gradient_the_reference_shares():
    """Law 5 compares gradients with the reference's: a reference written with the same custom gradient
    agrees with it. Finite differences do not."""
    doubled = OpCase(**{**APPLY3.__dict__, "build": _apply3(DoubledGradient), "reference": _doubled_gradient_reference})
    with pytest.raises(AssertionError, match="verify_grad: the gradient of the consumer differs from finite differences"):
        check_inner_graph_op(doubled)


# --- against="isolated": bodies rewritten on their own, as PyTensor rewrites an OpFromGraph -----


def test_rewrite_bodies_in_isolation_rewrites_the_bodies_and_nothing_else():
    from pytensor.scalar import basic as ps

    from innergraph.testing import body_ops, rewrite_bodies_in_isolation

    x = pt.dvector("x")
    y: Any = innergraph.call(lambda v: pt.log(pt.exp(v * 1.0)).sum(), x)
    outer: Any = y * 1.0  # outside every body: left as it is
    isolated: Any = rewrite_bodies_in_isolation([outer])[0]
    assert isolated.owner.op == outer.owner.op and len(isolated.owner.inputs) == 2  # the outer Mul kept
    before, after = body_ops(y.owner.inputs[0]), body_ops(isolated.owner.inputs[0].owner.inputs[0])
    assert {type(op) for op in before} >= {ps.Log, ps.Exp, ps.Mul}
    assert not {type(op) for op in after} & {ps.Log, ps.Exp, ps.Mul}  # log(exp(v * 1)) is v
    assert body_ops(y.owner.inputs[0]) == before  # the user's graph is not changed
    f = pytensor.function([x], [outer, isolated], mode=pytensor.compile.mode.get_default_mode().excluding("innergraph"))
    got, want = f(np.arange(4.0))
    np.testing.assert_allclose(got, want)
    np.testing.assert_allclose(want, np.arange(4.0).sum())


def test_the_kit_against_isolated_needs_no_vanilla_reference():
    check_inner_graph_op(OpCase(**{**CALL.__dict__, "reference": None}), against="isolated")


def test_law_5_against_isolated_fails_when_the_two_treatments_differ(monkeypatch):
    """The comparison is real: a reference computing twice the consumer's value fails it."""
    from innergraph.testing import kit, rewrite_bodies_in_isolation

    def doubled(outputs: Any, mode: Any = None) -> list[Any]:
        return [pt.mul(2.0, o) for o in rewrite_bodies_in_isolation(outputs, mode)]

    monkeypatch.setattr(kit, "rewrite_bodies_in_isolation", doubled)
    with pytest.raises(AssertionError, match=r"law 5 \(against='isolated'\): result 0 differs"):
        check_inner_graph_op(OpCase(**{**CALL.__dict__, "reference": None}), against="isolated")


def test_the_kit_refuses_a_missing_reference_or_an_unknown_comparison():
    with pytest.raises(ValueError, match="case.reference is None"):
        check_inner_graph_op(OpCase(**{**CALL.__dict__, "reference": None}))
    with pytest.raises(ValueError, match="against must be 'vanilla' or 'isolated', got 'opfromgraph'"):
        check_inner_graph_op(CALL, against="opfromgraph")
