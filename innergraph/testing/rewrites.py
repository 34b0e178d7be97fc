"""A differential check for graph rewrites: same values and gradients before and after.

`check_rewrite` applies a rewrite to a `FunctionGraph` of the outputs (functions
unfolded, as inside the rewrite pipeline), then evaluates the graph before and
after on random inputs — values, and the gradient of the sum of all float
outputs with respect to every float input — and compares them. The idea is
JAX's ``assert_dce_result``; the structural half (what the rewrite changed) is
the caller's, on the returned graph.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal, cast

import numpy as np
from pytensor.graph.basic import Variable
from pytensor.graph.fg import FunctionGraph
from innergraph.core.fold import unfold_inner_graphs

__all__ = ["check_rewrite", "rewritten"]


def rewritten(rewrite: Callable[[FunctionGraph], int], inputs: Sequence[Variable], outputs: Sequence[Variable]) -> tuple[FunctionGraph, int]:
    """A copy of the graph with functions unfolded, ``rewrite`` applied; and what it returned."""
    fgraph = FunctionGraph(list(inputs), list(outputs), clone=True)
    unfold_inner_graphs(fgraph)
    return fgraph, rewrite(fgraph)


def _gradients(inputs: Sequence[Variable], outputs: Sequence[Variable]) -> list[Variable]:
    """The gradient of the sum of the float ``outputs`` with respect to every float input."""
    import pytensor
    import pytensor.tensor as pt

    floats: list[Any] = [o for o in outputs if "float" in str(getattr(o.type, "dtype", ""))]
    wrt = [i for i in inputs if "float" in str(getattr(i.type, "dtype", ""))]
    if not (floats and wrt):
        return []
    cost = pt.add(*(o.sum() for o in floats))
    return list(cast(Sequence[Variable], pytensor.grad(cost, wrt, disconnected_inputs="ignore")))


def _compile(inputs: Sequence[Variable], outputs: Sequence[Variable], mode: Any, gradients: bool) -> Callable[..., list[Any]]:
    """A function of ``inputs`` returning ``outputs`` (and, with ``gradients``, `_gradients`)."""
    import pytensor

    extra = _gradients(inputs, outputs) if gradients else []
    return pytensor.function(list(inputs), [*outputs, *extra], mode=mode, on_unused_input="ignore")


def check_rewrite(
    rewrite: Callable[[FunctionGraph], int],
    inputs: Sequence[Variable],
    outputs: Sequence[Variable],
    *,
    values: Sequence[Sequence[Any]] | None = None,
    seed: int = 0,
    rtol: float = 1e-7,  # a rewrite reassociates: a loop's sum pushed out (acc0 + sum(x) for a
    # running sum), K loops batched into one vectorised step, fused elemwise chains, and the
    # gradients of both graphs go through PyTensor's different derivative graphs of them
    expect_change: bool = True,
    gradients: Literal["after", "before", "none"] = "after",
) -> FunctionGraph:
    """Apply ``rewrite`` and check values and gradients are unchanged; return the rewritten graph.

    Parameters
    ----------
    rewrite
        ``fgraph -> number of changes``, as the pipeline's passes.
    inputs, outputs
        The graph (not mutated).
    values
        Argument tuples to evaluate on; by default two random ones (uniform in
        (-1, 1), shapes from the inputs' static shapes, unknown dimensions 3).
    expect_change
        Fail if the rewrite reports no change (a rewrite test that cannot fail is a defect).
    gradients
        ``"after"`` (the default) compares gradients taken of each graph.
        ``"before"`` takes them before rewriting and rewrites them with the
        outputs, as the compile pipeline does; ``"none"`` compares values only.
        The last two are for rewrites whose result PyTensor cannot differentiate
        again (an untraced Scan state), which only run after every gradient was
        built.

    Both graphs are compiled with innergraph installed and its rewrites excluded
    (``mode.excluding("innergraph")``, C VM linker), so the consumers themselves run
    as the rewrite left them. This is not vanilla PyTensor: the graphs hold innergraph's
    consumers, which only innergraph can compile.
    """
    from pytensor.compile.mode import Mode

    if gradients == "before":
        outputs = [*outputs, *_gradients(inputs, outputs)]
    fgraph, changed = rewritten(rewrite, inputs, outputs)
    if expect_change and not changed:
        raise AssertionError(f"{getattr(rewrite, '__name__', rewrite)} changed nothing in {list(outputs)}")
    if values is None:
        rng = np.random.default_rng(seed)
        values = [[_sample(v, rng) for v in inputs] for _ in range(2)]
    installed_rewrites_excluded = Mode(linker="cvm", optimizer="fast_run").excluding("innergraph")
    before_fn = _compile(inputs, outputs, installed_rewrites_excluded, gradients == "after")
    after_fn = _compile(fgraph.inputs, fgraph.outputs, installed_rewrites_excluded, gradients == "after")
    for args in values:
        before, after = before_fn(*args), after_fn(*args)
        for k, (b, a) in enumerate(zip(before, after, strict=True)):
            what = f"output {k}" if k < len(outputs) else f"gradient {k - len(outputs)}"
            np.testing.assert_allclose(a, b, rtol=rtol, atol=1e-12, err_msg=f"{what} changed by the rewrite")
    return fgraph


def _sample(var: Variable, rng: np.random.Generator) -> Any:
    shape = tuple(3 if s is None else s for s in getattr(var.type, "shape", ()))
    dtype = var.type.dtype
    if "int" in dtype:
        return rng.integers(1, 4, size=shape).astype(dtype)
    return rng.uniform(-1, 1, size=shape).astype(dtype)
