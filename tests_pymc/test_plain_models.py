"""PyMC models without control flow: innergraph stays out of the way.

Most PyMC models have no loop and no conditional. For them ``import innergraph`` must
change nothing: the NUTS function (`innergraph_bench.pymc_models.PLAIN_MODELS`, compiled by
PyMC's own compile) is the graph PyTensor alone compiles, with and without innergraph,
and gives the same numbers. The reference is compiled inside `innergraph.uninstalled`
(no patch, no rewrite of innergraph's), not with ``excluding("innergraph")``. Each model
is compiled once per variant for the module.
"""

import functools
import re

import numpy as np
import pytensor
import pytest

import innergraph
from innergraph_bench.bench import compile_graph
from innergraph_bench.pymc_models import PLAIN_MODELS, nuts_case


@functools.cache
def _compiled(case_id, variant):
    """The model's NUTS function and its value at the case's point: ``vanilla`` (innergraph uninstalled) or ``innergraph``."""
    case = nuts_case(case_id)
    if variant == "vanilla":
        with innergraph.uninstalled():
            fn = compile_graph(case, "innergraph", case.build("innergraph"))  # the default mode, PyTensor alone
            return fn, fn(*case.values)
    fn = compile_graph(case, "innergraph", case.build("innergraph"))
    return fn, fn(*case.values)


def _text(fn):
    """``debugprint`` of the compiled graph with the per-process ids taken out."""
    return re.sub(r"\bid [A-Z]+\b", "id", pytensor.dprint(fn, file="str", print_type=True))


@pytest.mark.parametrize("case_id", list(PLAIN_MODELS))
def test_a_model_without_loops_compiles_to_vanillas_graph_and_numbers(case_id):
    vanilla, ours = _compiled(case_id, "vanilla"), _compiled(case_id, "innergraph")
    assert _text(ours[0]) == _text(vanilla[0])
    assert "Bodies:" not in _text(ours[0])
    for got, expected in zip(ours[1], vanilla[1], strict=True):
        np.testing.assert_array_equal(got, expected)
    assert np.isfinite(ours[1][0]).all()
