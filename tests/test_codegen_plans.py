"""Generated Numba code is planned once per equal consumer: equal conditionals over one pair of
bodies share one plan and one generated function, and a different wiring of the same bodies gets its own.
A loop the generators cannot run (per-step outputs and a condition) is refused when planned."""

from typing import Any

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.compile.mode import Mode
from pytensor.graph.basic import Apply
from pytensor.graph.op import Op
from pytensor.ifelse import ifelse as vanilla_ifelse

import innergraph
import innergraph.backends.numba_generated as generated
from innergraph.consumer import (
    Capabilities, Form, Iterate, Meaning, Slot, SlotKind, body_of, fold_function, inner_graph, params, register_consumer,
)
from innergraph.ops.ifelse import IfElse
from innergraph.protocol.plans import loop_plan
from vanilla import vanilla_function

b, x, y = pt.dvector("b"), pt.dscalar("x"), pt.dscalar("y")
NUMBA = Mode(linker="numba", optimizer="fast_run")


def graph(cond_fn, odd_first):
    """Three conditionals over one then body (after outlining ``+ i``) and one else body, and an odd one
    whose else branch reads ``y`` where the others read ``x``: the same bodies, wired differently.

    Converted in either order (``odd_first``): a plan of the three reads ``x`` for the odd one's ``y``,
    while the odd one's plan happens to read the right input of the three.
    """
    c = pt.gt(x, 0)
    outs = [cond_fn(c, (b * x).sum() + i, (b / x).sum()) for i in (1.0, 2.0, 3.0)]
    odd = cond_fn(c, (b * x).sum() + 4.0, (b / y).sum())
    return [odd, *outs] if odd_first else [*outs, odd]


@pytest.fixture(scope="module", params=[False, True], ids=["odd-last", "odd-first"])
def compiled(request):
    """The innergraph function, how many branch plans its conversion made, and vanilla's function."""
    calls = []
    original = generated.branch_plan

    def counting(op, node):
        calls.append(node)
        return original(op, node)

    generated.branch_plan = counting
    innergraph.clear_body_cache()  # the other order's compilation interned these bodies, with their plans
    try:
        fn = pytensor.function([b, x, y], graph(innergraph.ifelse, request.param), mode=NUMBA)
    finally:
        generated.branch_plan = original
    vanilla = vanilla_function(lambda: ([b, x, y], graph(vanilla_ifelse, request.param)), NUMBA,
                               first_call=(np.linspace(0.5, 2.0, 7), 1.5, 3.0))
    return fn, calls, vanilla


def test_equal_conditionals_are_planned_once_per_wiring(compiled):
    fn, calls, _ = compiled
    nodes = [n for n in fn.maker.fgraph.apply_nodes if isinstance(n.op, IfElse)]
    assert len(nodes) == 4
    assert len({(n.inputs[1].data, n.inputs[2].data) for n in nodes}) == 1, "the test lost its subject: the bodies differ"
    assert len(calls) == 2  # one plan for the three equal wirings, one for the conditional reading y


@pytest.mark.parametrize("args", [(1.5, 3.0), (-1.5, 3.0), (-2.0, -0.5)])
def test_values_equal_vanilla(compiled, args):
    fn, _, vanilla = compiled
    bv = np.linspace(0.5, 2.0, 7)
    got, want = fn(bv, *args), vanilla(bv, *args)
    np.testing.assert_allclose(got, want, rtol=1e-14)
    if args[0] < 0:  # the odd conditional's else branch reads y, not x
        assert len({float(v) for v in got}) == 2


class MapUntil(Op):
    """A map whose step also says whether to go on: per-step outputs with a condition (not generated)."""

    __props__ = ()

    def make_node(self, fn, n, xs):  # type: ignore[override]  # (fn, n, xs), as the consumer takes them
        return Apply(self, [fn, pt.as_tensor(n, dtype="int64"), xs], [fn.type.output_types[0].clone(shape=(None,))()])

    def perform(self, node, inputs, output_storage):  # never run here: only planned
        raise NotImplementedError


def _split_map_until(node):
    body, n = body_of(node.inputs[0]), node.inputs[1]
    (p,) = params(body.param_types)
    return (n,), [
        Slot("row", (node.inputs[2],), ((0, p),)),
        Slot("out", (n,), (), ((0, body.outputs[0]),), (body.type.output_types[0],), (node.outputs[0],)),
        Slot("go", outputs=((0, body.outputs[1]),), output_types=(body.type.output_types[1],)),
    ]


register_consumer(MapUntil, Form(
    n_bodies=1, param_order=("row",), output_order=("out", "go"), arg_order=("row",), result_order=("out",),
    split=_split_map_until, make=lambda op, header, fns, groups, args: MapUntil().make_node(fns[0], *header, *args),
    functions=lambda node: [node.inputs[0]], semantics=Iterate(),
    kinds=(SlotKind("row", Meaning.SEQUENCE), SlotKind("out", Meaning.PER_STEP_OUTPUT), SlotKind("go", Meaning.CONDITION)),
    capabilities=Capabilities(loop=True, counted=True),
))


def test_per_step_outputs_with_a_condition_are_refused_naming_the_op():
    xs = pt.dvector("xs")
    closure = inner_graph(lambda x: [pt.sin(x), pt.lt(x, 1.0)], [xs[0].type()])
    out: Any = MapUntil()(fold_function(closure.function), xs.shape[0], xs)
    node = out.owner
    with pytest.raises(ValueError, match=r"MapUntil.*writes per-step outputs only when it is counted and has no condition"):
        loop_plan(node.op, node)
