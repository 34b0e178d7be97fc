"""Checkpointed reverse mode for `innergraph.do_while(max_steps=, checkpoint=)`: values against the
stored-trace gradient (py, cvm, numba) when the loop stops after its first step (no extra step),
after two (one extra), in between and at ``max_steps`` (1, 2 and 12), the segmented form in the
compiled graph, the policy's checks."""

from typing import Any

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.compile.mode import Mode
from pytensor.scan.op import Scan as NativeScan

import innergraph
from typed import grad

x0, w, lim = pt.dscalar("x0"), pt.dscalar("w"), pt.dscalar("lim")
v0 = pt.dvector("v0")
INPUTS = [x0, v0, w, lim]
#: from (0.3, [0.1, -0.2, 0.3], w=0.8) the loop stops after 1, 2, 3 and all steps
LIMITS = (-10.0, 0.35, 0.5, 1e9)
LINKERS = {"py": ((1, 2, 12), (None, "sqrt", 2)), "cvm": ((1, 2, 12), (None, "sqrt", 2)), "numba": ((12,), (None, "sqrt"))}


def _step(s):
    a, v = s
    return a * w + pt.sin(v).sum() * 0.1 + 0.05, v * 0.9 + pt.tanh(a * w)


def _gradients(policy, max_steps):
    a, v = innergraph.do_while(_step, lambda s: s[0] < lim, (x0, v0), max_steps=max_steps, checkpoint=policy)
    cost = a**2 + (v**3).sum()
    return [cost, *grad(cost, [x0, v0, w])]


def _segment_loops(fn):
    return [n for n in fn.maker.fgraph.apply_nodes if isinstance(n.op, NativeScan) and n.op.name == "checkpoint_segments"]


@pytest.fixture(scope="module", params=list(LINKERS))
def functions(request):
    max_steps, policies = LINKERS[request.param]
    mode = Mode(linker=request.param, optimizer="fast_run")
    return {(m, p): pytensor.function(INPUTS, _gradients(p, m), mode=mode) for m in max_steps for p in policies}


def test_values_equal_the_stored_trace_gradient(functions):
    for (max_steps, policy), fn in functions.items():
        if policy is None:
            continue
        for limit in LIMITS:
            values = [0.3, np.array([0.1, -0.2, 0.3]), 0.8, limit]
            for got, want in zip(fn(*values), functions[max_steps, None](*values), strict=True):
                np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12, err_msg=f"max_steps={max_steps}, {policy}, lim={limit}")


def test_the_checkpointed_gradient_runs_the_segmented_loops(functions):
    assert len(_segment_loops(functions[12, "sqrt"])) == 1
    assert _segment_loops(functions[12, None]) == []


def test_the_initial_values_receive_their_cotangent(functions):
    """The trial that kept do_while out lost the initial value's cotangent: compare with finite differences."""
    fn = functions[12, "sqrt"]
    values: list[Any] = [0.3, np.array([0.1, -0.2, 0.3]), 0.8, 0.5]
    cost, g_x0, *_ = fn(*values)
    eps = 1e-6
    shifted = fn(values[0] + eps, *values[1:])[0]
    assert g_x0 != 0
    np.testing.assert_allclose(g_x0, (shifted - cost) / eps, rtol=1e-4)


def test_checkpoint_needs_max_steps_and_a_valid_policy():
    with pytest.raises(ValueError, match="do_while: checkpoint='sqrt' needs max_steps="):
        innergraph.do_while(_step, lambda s: s[0] < lim, (x0, v0), checkpoint="sqrt")
    with pytest.raises(ValueError, match="do_while"):
        innergraph.do_while(_step, lambda s: s[0] < lim, (x0, v0), max_steps=5, checkpoint="cube")
