"""Every consumer of this project, checked with the public kit (innergraph.testing)."""

import warnings

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.ifelse import ifelse as vanilla_ifelse

import innergraph
from innergraph.testing import OpCase, check_inner_graph_op

CALL = OpCase(
    build=lambda bodies, args: innergraph.call(bodies[0], *args),
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
