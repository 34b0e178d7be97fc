"""Lazy shapes for hidden nodes change nothing in the five PyMC models' compiled NUTS functions.

`innergraph.rewriting.hidden_shapes` gives the body nodes the consumer rewrites import
``Shape_i`` shapes instead of PyTensor's inference. The compiled graph (``debugprint``
text, inner graphs included) and the Ops of every loop's step are the same with and
without it; the values equal vanilla's.
"""

import contextlib

import numpy as np
import pytensor
import pytest
from pytensor.scan.op import Scan

import innergraph.rewriting.simplify as simplify
from innergraph.bench import compile_graph
from innergraph.pymc_models import MODELS, nuts_case


def _ops_per_step(fn):
    return sorted((str(op.name), sorted(type(n.op).__name__ for n in op.fgraph.apply_nodes)) for op in {n.op for n in fn.maker.fgraph.apply_nodes if isinstance(n.op, Scan)})


def _compiled(case, lazy):
    replacement = simplify.lazy_hidden_shapes if lazy else (lambda fgraph: contextlib.nullcontext())
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(simplify, "lazy_hidden_shapes", replacement)
        return compile_graph(case, "innergraph", case.build("innergraph"))


@pytest.mark.parametrize("case_id", list(MODELS))
def test_lazy_hidden_shapes_leave_the_compiled_nuts_function_as_it_was(case_id):
    case = nuts_case(case_id)
    lazy, eager = _compiled(case, lazy=True), _compiled(case, lazy=False)
    assert pytensor.dprint(lazy, file="str", print_type=True) == pytensor.dprint(eager, file="str", print_type=True)
    assert _ops_per_step(lazy) == _ops_per_step(eager)
    vanilla = compile_graph(case, "vanilla", case.build("vanilla"))
    for a, b in zip(vanilla(*case.values), lazy(*case.values), strict=True):
        np.testing.assert_allclose(b, a, rtol=case.rtol, atol=1e-12)
