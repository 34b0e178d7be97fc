"""``carry_from_zero``: a carried cotangent reads the outer cotangent buffer once, as the mit-mot did.

The pattern of the GARCH(1,1) likelihood written with ``pm.Potential`` (issue 21): a
variance recursion by scan, a likelihood of its trace, the gradient. PyTensor's
gradient loop reads the cotangent buffer whole, as a mit-mot (``B[::-1]``); the carried
form of `innergraph.rewriting.carry` read it twice (a contribution sequence
``B[::-1][1:]`` and an initial row ``B[::-1][0]``), one node more than vanilla in the
compiled function. Carrying from zero reads it once again (``B[::-1]``) and keeps the
carried loop (no buffer written per step).
"""

from typing import Any

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.compile.mode import Mode
from pytensor.scan.op import Scan
from pytensor.tensor.subtensor import IncSubtensor, Subtensor

from innergraph.stats import graph_stats
from vanilla import vanilla_function
from typed import grad

Y = np.random.default_rng(21).normal(size=60)
THETA = np.array([-2.0, -1.0, 1.5])


def _garch() -> tuple[list, Any]:
    """The GARCH(1,1) log-likelihood and its gradient in ``theta``."""
    theta = pt.dvector("theta")
    omega, alpha, beta = pt.exp(theta[0]), pt.sigmoid(theta[1]), pt.sigmoid(theta[2])
    s2 = pytensor.scan(
        lambda y_tm1, s2_tm1, o, a, b: o + a * y_tm1**2 + b * s2_tm1,
        sequences=[pt.as_tensor(Y[:-1])],
        outputs_info=[pt.as_tensor(np.var(Y))],
        non_sequences=[omega, alpha, beta],
        return_updates=False,
    )
    ll = (-0.5 * (pt.log(s2) + Y[1:] ** 2 / s2)).sum()
    return [theta], [ll, grad(ll, theta)]


MODE = Mode(linker="numba", optimizer="fast_run")
VARIANTS = {
    "innergraph": MODE,
    "innergraph, carry_from_zero excluded": MODE.excluding("carry_from_zero"),
}


@pytest.fixture(scope="module")
def compiled():
    made = {name: pytensor.function(*_garch(), mode=mode) for name, mode in VARIANTS.items()}
    made["vanilla"] = vanilla_function(_garch, MODE, first_call=[THETA])  # built, compiled and called uninstalled
    return made


def _gradient_loop(fn):
    (loop,) = [n for n in fn.maker.fgraph.apply_nodes if isinstance(n.op, Scan) and (n.op.name or "").startswith("grad_of")]
    return loop


def _buffer_reads(fn):
    """The outer ``Subtensor`` nodes the gradient loop reads the cotangent buffer through (an ``IncSubtensor``)."""
    loop = _gradient_loop(fn)
    return [
        i.owner
        for i in loop.inputs
        if i.owner is not None and isinstance(i.owner.op, Subtensor)
        and i.owner.inputs[0].owner is not None and isinstance(i.owner.inputs[0].owner.op, IncSubtensor)
    ]


def test_the_gradient_gives_vanillas_numbers(compiled):
    expected = compiled["vanilla"](THETA)
    for name in ("innergraph", "innergraph, carry_from_zero excluded"):
        for a, b in zip(expected, compiled[name](THETA), strict=True):
            np.testing.assert_allclose(b, a, rtol=1e-12, atol=1e-12, err_msg=name)


def test_the_cotangent_buffer_is_read_once_as_vanilla_reads_it(compiled):
    assert len(_buffer_reads(compiled["vanilla"])) == 1  # the mit-mot, B[::-1]
    assert len(_buffer_reads(compiled["innergraph, carry_from_zero excluded"])) == 2  # B[-2::-1] and B[-1]
    (read,) = _buffer_reads(compiled["innergraph"])
    assert read.op == _buffer_reads(compiled["vanilla"])[0].op  # the same reversal


def test_the_loop_stays_carried_and_no_bigger_than_vanillas(compiled):
    vanilla, ours = (graph_stats(compiled[n]) for n in ("vanilla", "innergraph"))
    without = graph_stats(compiled["innergraph, carry_from_zero excluded"])
    assert ours["total_nodes"] <= vanilla["total_nodes"]
    assert ours["total_nodes"] == without["total_nodes"] - 1
    loop = _gradient_loop(compiled["innergraph"]).op.info
    assert loop.n_mit_mot == 0 and loop.n_untraced_sit_sot >= 1  # carried: no cotangent buffer written per step
