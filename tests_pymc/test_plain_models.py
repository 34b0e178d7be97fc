"""PyMC models without control flow: innergraph stays out of the way.

Most PyMC models have no loop and no conditional. For them ``import innergraph`` must
change nothing: the NUTS function (`innergraph_bench.pymc_models.PLAIN_MODELS`, compiled by
PyMC's own compile) is the graph PyTensor alone compiles, with and without innergraph,
and gives the same numbers. The reference is compiled inside `innergraph.uninstalled`
(no patch, no rewrite of innergraph's), not with ``excluding("innergraph")``. Each model
is compiled once per variant and fastmath setting for the module.

Same numbers means bit for bit without Numba's fastmath, and within 1e-12 (relative) with
it, PyTensor's default. Under fastmath (``reassoc``, ``contract``) vanilla PyTensor itself
is not reproducible bit for bit: LLVM reassociates a sum differently when a callee is
compiled in the process (its IR is inlined into the caller) than when it is loaded from
the on-disk cache (linked as object code). Vanilla's normal-mixture log density is
-1500.0516921054975 on an empty compile directory and -1500.0516921054987 on a warm one
(1.1e-12 apart, 7.6e-16 relative; -1500.0516921054978 in both without fastmath; measured
2026-12-01). Vanilla's entries and innergraph's are kept apart (`numba_once.direct_key`),
so the two variants can meet different cache states: CI met them on ``d29842d``.
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
def _compiled(case_id, variant, fastmath=True):
    """The model's NUTS function and its value at the case's point: ``vanilla`` (innergraph uninstalled) or ``innergraph``.

    ``fastmath`` is ``config.numba__fastmath`` while the function is compiled and called.
    """
    case = nuts_case(case_id)
    with pytensor.config.change_flags(numba__fastmath=fastmath):
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
        # fastmath's reassociation differs with the compile cache's state (module docstring):
        # vanilla's own spread is 1e-15 relative, 1e-13 absolute on these models' gradients
        np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)
    assert np.isfinite(ours[1][0]).all()


@pytest.mark.parametrize("case_id", list(PLAIN_MODELS))
def test_without_fastmath_a_model_without_loops_gives_vanillas_numbers_bit_for_bit(case_id):
    vanilla, ours = _compiled(case_id, "vanilla", False), _compiled(case_id, "innergraph", False)
    assert _text(ours[0]) == _text(vanilla[0])
    for got, expected in zip(ours[1], vanilla[1], strict=True):
        np.testing.assert_array_equal(got, expected)
    assert np.isfinite(ours[1][0]).all()
