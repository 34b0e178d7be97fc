"""Compile bodies for the Python-thunk linkers (``py``, ``vm``, ``cvm``, ``c|py``).

A consumer compiles each distinct `Body` once per implementation and keeps the
result in ``body.cache``: consumers that read the same (merged) function variable
share one compiled function. `compile_count` counts compilations, so tests can
check that merged bodies compile once.

The implementation follows the outer linker: a thunk requested with
``impl="py"`` (the ``py`` linker, or a VM without C thunks) compiles its body
with the ``py`` linker; otherwise with ``cvm`` (``vm`` when no C compiler is
configured). Numba has its own path: `innergraph.backends.numba`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from innergraph._compat import Function
from pytensor.graph.basic import Apply, Constant, Variable

from innergraph.instantiate import instantiate
from innergraph.types import Body

__all__ = ["body_value", "compile_count", "compiled_function", "linker_for", "make_body_thunk"]

#: How many times each body was compiled, keyed by ``(id(body), linker)``.
compile_count: Counter[tuple[int, str]] = Counter()


def linker_for(impl: str | None) -> str:
    """The linker a body is compiled with when the outer thunk uses ``impl``."""
    from pytensor import config

    if impl == "py":
        return "py"
    return "cvm" if config.cxx else "vm"


def body_value(function: Variable) -> Body:
    """The `Body` of a folded function variable, with a clear error otherwise."""
    if isinstance(function, Constant) and isinstance(function.data, Body):
        return function.data
    raise RuntimeError(
        f"Function variable {function} reached a linker unfolded; the graph must be "
        "prepared with innergraph.fold_inner_graphs (is innergraph installed?)"
    )


def compiled_function(body: Body, linker: str) -> Function:
    """The body compiled as a PyTensor function with ``linker``, cached on the body."""
    key = ("function", linker)
    fn = body.cache.get(key)
    if fn is None:
        fn = _compile(body, linker)
        body.cache[key] = fn
        compile_count[(id(body), linker)] += 1
    return fn


def _compile(body: Body, linker: str) -> Function:
    import pytensor
    from pytensor.compile.mode import Mode, get_default_mode

    inputs = [t(name=f"p{i}") for i, t in enumerate(body.param_types)]
    outputs = instantiate(body, inputs)
    mode = Mode(linker=linker, optimizer=get_default_mode().provided_optimizer)
    fn = pytensor.function(inputs, outputs, mode=mode, on_unused_input="ignore")
    fn.trust_input = True
    return fn


def make_body_thunk(
    node: Apply,
    storage_map: dict[Variable, list[Any]],
    compute_map: dict[Variable, list[bool]],
    run: Callable[[Sequence[Any]], Sequence[Any]],
) -> Callable[[], None]:
    """A thunk that feeds ``node``'s non-function inputs to ``run`` and stores its results."""
    from innergraph.graph import is_function

    in_cells = [storage_map[v] for v in node.inputs if not is_function(v)]
    out_cells = [storage_map[v] for v in node.outputs]
    done = [compute_map[v] for v in node.outputs]

    def thunk() -> None:
        results = run([c[0] for c in in_cells])
        for cell, value in zip(out_cells, results):
            cell[0] = value
        for flag in done:
            flag[0] = True

    thunk.inputs = [storage_map[v] for v in node.inputs]  # type: ignore[attr-defined]
    thunk.outputs = out_cells  # type: ignore[attr-defined]
    thunk.lazy = False  # type: ignore[attr-defined]
    return thunk
