"""Compile bodies for the Python-thunk linkers (``py``, ``vm``, ``cvm``, ``c|py``).

A consumer compiles each distinct `Body` once per implementation and keeps the
result in ``body.cache``: consumers that read the same (merged) function variable
share one compiled function. `compile_count` counts compilations, so tests can
check that merged bodies compile once.

The implementation follows the outer linker: a thunk requested with
``impl="py"`` (the ``py`` linker, or a VM without C thunks) compiles its body
with the ``py`` linker; otherwise with ``cvm`` (``vm`` when no C compiler is
configured). Numba has its own path: `innergraph.backends.numba`.

Terms
-----
rewritten body
    A body the rewrite pipeline unfolded and folded again (`mark_rewritten`): every
    ``optdb`` pass before the fold (``innergraph_fold``, 48.5: merge, canonicalize,
    stabilize, specialize, ...) already reached its nodes together with the outer
    graph, and ``innergraph_fusion`` fuses it right after. Compiling it leaves those
    passes and elemwise fusion out (`pipeline_passes`); the in-place and the
    backend's late passes run, unless the body holds a hidden fold
    (`innergraph.core.hidden_folds`: the shared graph kept constant folding from doing
    what it does to the body alone), which gets the whole rewriter. Any other
    body — built by a user and compiled without the pipeline, or under
    ``mode.excluding("innergraph")`` — gets the default mode's whole rewriter.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from pytensor.graph.basic import Apply, Variable

from innergraph.core.instantiate import instantiate
from innergraph.core.types import Body, is_folded, is_rewritten
from innergraph.core.compat import Function, queried_once
from innergraph.core.graph import is_function
from innergraph.core.hidden_folds import has_hidden_fold

__all__ = [
    "body_rewriter",
    "body_value",
    "compile_count",
    "CheckedFunction",
    "compiled_function",
    "skips_pipeline_passes",
    "linker_for",
    "make_body_thunk",
    "pipeline_passes",
]

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
    if is_folded(function):
        return function.data
    raise RuntimeError(
        f"Function variable {function} reached a linker unfolded; the graph must be "
        "prepared with innergraph.fold_inner_graphs (is innergraph installed?)"
    )


def compiled_function(body: Body, linker: str, *, trust_input: bool = False) -> Any:
    """The body compiled as a PyTensor function with ``linker``, cached on the body.

    Parameters
    ----------
    body
        The body to compile (compiled once per linker, whatever ``trust_input``).
    linker
        A PyTensor linker name (``"py"``, ``"cvm"``, ``"vm"``, ``"c|py"``); see `linker_for`.
    trust_input
        False (the default): the returned callable converts each argument to its
        param's type (`CheckedFunction`) and raises a `TypeError` naming the body's
        param when it cannot. True: the compiled `Function` itself, which trusts its
        inputs — the caller guarantees arrays of exactly the param types (a
        consumer's thunk, fed by its linker); anything else may crash.
    """
    # keyed by the rewriter too: it depends on the default mode and on `is_rewritten`
    key = ("function", linker, body_rewriter(body, linker))
    fn = body.cache.get(key)
    if fn is None:
        fn = _compile(body, linker)
        body.cache[key] = fn
        compile_count[(id(body), linker)] += 1
    if trust_input:
        return fn
    return body.cached(("checked function", fn), lambda: CheckedFunction(fn, body))


class CheckedFunction:
    """A compiled body that converts its arguments to the param types first (see `compiled_function`)."""

    def __init__(self, function: Function, body: Body):
        self.function = function
        self.param_types = tuple(body.param_types)

    @property
    def maker(self) -> Any:
        """The compiled function's maker (its graph is ``maker.fgraph``)."""
        return self.function.maker

    def __call__(self, *args: Any) -> Any:
        if len(args) != len(self.param_types):
            raise TypeError(f"compiled body takes {len(self.param_types)} arguments ({list(self.param_types)}), got {len(args)}")
        converted = []
        for i, (value, t) in enumerate(zip(args, self.param_types, strict=True)):
            try:
                converted.append(t.filter(value, strict=False, allow_downcast=None))
            except (TypeError, ValueError) as e:
                what = f"{type(value).__name__} of shape {getattr(value, 'shape', '?')}"
                raise TypeError(f"compiled body: argument {i} ({what}) does not fit param {i} of type {t}: {e}") from e
        return self.function(*converted)


def pipeline_passes() -> tuple[str, ...]:
    """The ``optdb`` passes a rewritten body went through before it was compiled.

    Every pass positioned before ``innergraph_fold``, and elemwise fusion, which
    ``innergraph_fusion`` applied to each folded body.
    """
    from pytensor.compile.mode import optdb

    fold = optdb.__position__.get("innergraph_fold", 48.5)
    earlier = sorted(name for name, pos in optdb.__position__.items() if pos < fold)
    return (*earlier, "elemwise_fusion")


def skips_pipeline_passes(body: Body) -> bool:
    """Whether `body_rewriter` leaves `pipeline_passes` out for ``body``: rewritten, and no hidden fold.

    Caches of rewriters (one per linker and answer) must key on this, not on `is_rewritten`.
    """
    return is_rewritten(body) and not has_hidden_fold(body)


def body_rewriter(body: Body, linker: str) -> Any:
    """The graph rewriter a body is compiled with: the default mode's, queried once.

    Kept while the default mode and the registered rewrites stay the same
    (`innergraph.core.compat.queried_once`). A rewritten body (`is_rewritten`) leaves out
    `pipeline_passes`, unless it holds a hidden fold (`innergraph.core.hidden_folds`).
    """
    from pytensor.compile.mode import Mode, get_default_mode


    query = get_default_mode().provided_optimizer
    rewritten = skips_pipeline_passes(body)

    def rewriter() -> Any:
        mode = Mode(linker=linker, optimizer=query)
        return mode.excluding(*pipeline_passes()).optimizer if rewritten else mode.optimizer

    return queried_once(query, (linker, rewritten), rewriter)


def _compile(body: Body, linker: str) -> Function:
    import pytensor
    from pytensor.compile.mode import Mode

    inputs = [t(name=f"p{i}") for i, t in enumerate(body.param_types)]
    outputs = instantiate(body, inputs)
    mode = Mode(linker=linker, optimizer=body_rewriter(body, linker))
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
