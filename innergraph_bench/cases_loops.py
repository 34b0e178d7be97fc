"""Benchmark cases for the loops: `innergraph.while_loop` against ``pytensor.scan(..., until=...)``.

Group ``"loops"``. The vanilla variant is the loop PyTensor users write today, a
Scan with an ``until`` condition whose last row is read; the innergraph variant is
the same computation as a `innergraph.while_loop` (per-iteration cost, compile time).
The ``-scan`` cases build the Scan for both variants: innergraph's variant is what
``innergraph_until_to_while`` (on by default under Numba and JAX) makes of it: a
while loop.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytensor
import pytensor.tensor as pt
from pytensor.scan.utils import until

import innergraph
from innergraph_bench.case import Case, Graph

__all__ = ["fixed_point", "loop_cases", "newton", "while_step"]


def _until_loop(step: Callable[[Any], Any], stop: Callable[[Any], Any], x0: Any, max_steps: int) -> Any:
    """``x = step(x)`` until ``stop(x)``, as PyTensor writes it: a Scan with ``until``, its last row."""
    trace = pytensor.scan(lambda x: (step(x), until(stop(step(x)))), outputs_info=[x0], n_steps=max_steps, return_updates=False)
    return trace[-1]


def _case(
    case_id: str, title: str, step: Callable[..., Any], stop: Callable[..., Any], x0: Any, values: list[Any], max_steps: int,
    make_inputs: Callable[[], list[Any]], scan_only: bool = False,
) -> Case:
    def build(variant: str) -> Graph:
        inputs = make_inputs()
        s, st, start = step(*inputs), stop(*inputs), x0(*inputs)
        if variant == "vanilla" or scan_only:
            return inputs, [_until_loop(s, st, start, max_steps)]
        return inputs, [innergraph.do_while(s, lambda x: pt.invert(st(x)), start)]

    if scan_only:  # the same Scan for both variants: innergraph_until_to_while (default) makes it a while loop
        case_id, title = f"{case_id}-scan", title.replace("do_while vs scan until", "scan until, both variants")
    return Case(case_id, "loops", title, build, values, rtol=1e-9)


def while_step(steps: int = 10_000, scan_only: bool = False) -> Case:
    """``x = x + 1`` until ``x >= steps``: the per-iteration cost of a loop with a condition."""
    return _case(
        "while-step", f"while loop, {steps:,} steps of x + 1 (do_while vs scan until), numba",
        lambda x0: (lambda x: x + 1.0), lambda x0: (lambda x: x >= steps), lambda x0: x0,
        [np.float64(0.0)], steps + 1, lambda: [pt.dscalar("x0")], scan_only,
    )


def newton(size: int = 1_000, scan_only: bool = False) -> Case:
    """Newton's iteration for ``sqrt(c)`` on ``size`` values until every residual is below 1e-10."""
    return _case(
        "newton", f"Newton's iteration for sqrt of {size} values until converged (do_while vs scan until)",
        lambda c: (lambda x: 0.5 * (x + c / x)), lambda c: (lambda x: pt.max(pt.abs(x * x - c)) < 1e-10), lambda c: pt.ones_like(c),
        [np.linspace(1.0, 1e4, size)], 200, lambda: [pt.dvector("c")], scan_only,
    )


def fixed_point(size: int = 1_000, scan_only: bool = False) -> Case:
    """The fixed point of ``x = cos(a * x)`` on ``size`` values, until the update moves less than 1e-12."""
    return _case(
        "fixed-point", f"fixed point of x = cos(a x) on {size} values until converged (do_while vs scan until)",
        lambda a: (lambda x: pt.cos(a * x)), lambda a: (lambda x: pt.max(pt.abs(pt.cos(a * x) - x)) < 1e-12), lambda a: pt.zeros_like(a),
        [np.linspace(0.1, 0.9, size)], 1_000, lambda: [pt.dvector("a")], scan_only,
    )


def loop_cases() -> list[Case]:
    """The loop cases, in report order: each as a while loop, then as the Scan users write (``-scan``)."""
    cases = [while_step, newton, fixed_point]
    return [*(make() for make in cases), *(make(scan_only=True) for make in cases)]
