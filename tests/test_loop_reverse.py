"""``innergraph.loop(..., reverse=...)``: reverse mode through the loop's reverse, no history stored.
Gradients against the equivalent Scan's for fixed and symbolic trip counts, verify_grad, the
compiled forward graph (the bare while loop) and the error without reverse or max_steps."""

from typing import Any

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.compile.builders import OpFromGraph
from pytensor.compile.mode import Mode
from pytensor.gradient import verify_grad
from pytensor.scan.op import Scan as NativeScan

import innergraph
from innergraph.ops.loop import ForiLoop, WhileLoop
from innergraph.ops.scan import Scan
from typed import grad

MODE = Mode(linker="cvm", optimizer="fast_run")
x0, b = pt.dvector("x0"), pt.dvector("b")
a = pt.dscalar("a")
n = pt.lscalar("n")
VALUES: list[Any] = [np.array([0.5, -1.0, 2.0]), 0.9, np.array([0.1, 0.2, -0.3])]


def affine_loop(x0, a, b, steps):
    """``x = a x + b`` ``steps`` times, as a do-while on a counter, given its reverse ``x = (x - b) / a``."""
    state = innergraph.loop(
        None,
        lambda s: {"x": s["x"] * a + b, "k": s["k"] + 1},
        lambda s: s["k"] < steps,
        {"x": x0, "k": pt.constant(0, dtype="int64")},
        reverse=lambda s: {"x": (s["x"] - b) / a, "k": s["k"] - 1},
    )
    return state["x"], state["k"]


def affine_scan(x0, a, b, steps):
    return pytensor.scan(lambda x: x * a + b, outputs_info=[x0], n_steps=steps, return_updates=False)[-1]


def kinds(fn):
    return {type(node.op) for node in fn.maker.fgraph.apply_nodes}


@pytest.mark.parametrize("steps", [5, n], ids=["static", "symbolic"])
def test_gradient_equals_the_scans(steps):
    xs, ks = affine_loop(x0, a, b, steps)
    want = affine_scan(x0, a, b, steps)
    wrt = [x0, a, b]
    got_g = grad((pt.sin(xs) * xs).sum(), wrt)
    want_g = grad((pt.sin(want) * want).sum(), wrt)
    inputs = [x0, a, b, n]
    f = pytensor.function(inputs, [xs, ks, *got_g], mode=MODE, on_unused_input="ignore")
    g = pytensor.function(inputs, [want, *want_g], mode=MODE, on_unused_input="ignore")
    got, ref = f(*VALUES, 5), g(*VALUES, 5)
    assert got[1] == 5
    for u, w in zip([got[0], *got[2:]], ref, strict=True):
        np.testing.assert_allclose(u, w, rtol=1e-10, atol=1e-12)
    assert not kinds(f) & {Scan, NativeScan}  # no history: the loop again, then a fori loop backwards
    assert {WhileLoop, ForiLoop} <= kinds(f)


def test_verify_grad():
    rng = np.random.default_rng(23)
    verify_grad(lambda x, a, b: affine_loop(x, a, b, 4)[0], [VALUES[0], np.array(0.8), VALUES[2]], rng=rng, mode=MODE)


def test_forward_is_the_bare_while_loop():
    f = pytensor.function([x0, a, b], affine_loop(x0, a, b, 3)[0], mode=MODE)
    assert WhileLoop in kinds(f) and OpFromGraph not in {type(t) for t in kinds(f)}
    want = VALUES[0]
    for _ in range(3):
        want = want * VALUES[1] + VALUES[2]
    np.testing.assert_allclose(f(*VALUES), want, rtol=1e-12)


def test_without_reverse_or_bound_the_error_names_the_loop_and_reverse():
    state = innergraph.loop(None, lambda s: s * a + b, lambda s: s.sum() < 10.0, x0)
    with pytest.raises(ValueError, match=r"DoWhile.*reverse= to innergraph.loop"):
        grad(state.sum(), a)
