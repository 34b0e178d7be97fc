"""Every PyTensor internal innergraph depends on that may move between versions.

innergraph targets PyTensor 3.3.x (``>=3.3.6``, `innergraph.startup.supported`). What is not
PyTensor's documented API, or may move within the 3.3 line, is imported or adapted
here, and only here: the database of rewrites as PyTensor keeps it, the frozen inner
graphs of its Ops, its gradient entry points with innergraph's conventions.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, cast

from pytensor.compile.executor import Function
from pytensor.graph.basic import Variable
from pytensor.tensor.rewriting.elemwise import InplaceGraphOptimizer  # the base of the in-place passes

__all__ = [
    "Function",
    "InplaceGraphOptimizer",
    "infer_output_shapes",
    "inner_graph_outputs",
    "param_connection_rows",
    "pullback",
    "pushforward",
    "queried_once",
    "scope_safe_fusion",
]

#: Queried rewriters: (id of what they were queried from, key, database state) -> (that object, rewriter).
_queried: dict[tuple[Any, ...], tuple[Any, Any]] = {}


def _optdb_state() -> tuple[int, ...]:
    """Changes when rewrites are registered or removed (``optdb`` and its sub-databases).

    Counted by registered names: a database's ``__db__`` maps names *and tags* to
    rewriters, and a query excluding a tag the database does not know adds an empty
    entry for it (a ``defaultdict``), so its length changes without any registration.
    """
    from pytensor.compile.mode import optdb

    top = optdb.__db__  # each registered name maps to the set of its one member
    return (len(optdb._names), *(len(getattr(member, "_names", ())) for name in optdb._names for member in top[name]))


def queried_once(source: Any, key: Any, query: Callable[[], Any], state: tuple[int, ...] | None = None) -> Any:
    """``query()``, run once per ``source`` object, ``key`` and state of the rewrite database.

    Querying PyTensor's rewrite database costs milliseconds, as much as rewriting or
    fusing a small body, so the rewriter is kept until a rewrite is registered or
    removed. ``source`` is kept with it, so a new object that reuses its id misses.
    ``state`` stands for the state of the databases the query reads, by default all
    of ``optdb`` (reading it costs about 0.1 ms in a compilation: a query that
    reads one database without sub-databases passes that one's state).
    """
    full_key = (id(source), key, _optdb_state() if state is None else state)
    cached = _queried.get(full_key)
    if cached is None or cached[0] is not source:
        cached = _queried[full_key] = (source, query())
    return cached[1]


def scope_safe_fusion() -> Any:
    """PyTensor's elemwise-fusion sequence without its backend-specific (C-only) members (queried once)."""
    from pytensor.compile.mode import optdb
    from pytensor.graph.rewriting.db import RewriteDatabaseQuery

    db = optdb["elemwise_fusion"]
    query = RewriteDatabaseQuery(include=["fusion"], exclude=["cxx_only"])
    # its members are rewriters, not databases: its own registrations are the state
    return queried_once(db, "scope_safe_fusion", lambda: db.query(query), state=(len(db.__db__),))


def pullback(
    outputs: Sequence[Variable], wrt: Sequence[Variable], cotangents: Sequence[Variable]
) -> list[Variable]:
    """Vector-Jacobian products, disconnected inputs returned as `DisconnectedType`.

    An output given twice gets the sum of its cotangents. An output that is itself one
    of ``wrt`` (a body returning a param) goes through a
    `view_op`: PyTensor takes a cotangent given for a ``wrt`` variable as its whole
    gradient, dropping what flows into it from the other outputs.
    """
    from pytensor import gradient
    from pytensor.compile.ops import view_op

    # PyTensor keys the cotangents by output: one given twice (a body returning one
    # variable as two outputs, as after merging) would count once. Sum them instead.
    summed: dict[Variable, Variable] = {}
    for o, g in zip(outputs, cotangents, strict=True):
        summed[o] = cast(Variable, cast(Any, summed[o]) + g) if o in summed else g
    outputs, cotangents = list(summed), list(summed.values())
    targets = set(wrt)
    outputs = [cast(Variable, view_op(o)) if o in targets else o for o in outputs]

    kwargs: dict[str, Any] = dict(disconnected_inputs="ignore", return_disconnected="disconnected")
    grads = gradient.pullback(list(outputs), list(wrt), cotangents=list(cotangents), **kwargs)
    return list(cast(Sequence[Variable], grads))


def pushforward(
    outputs: Sequence[Variable], wrt: Sequence[Variable], tangents: Sequence[Variable]
) -> list[Variable]:
    """Jacobian-vector products; outputs that depend on no ``wrt`` are zeros."""
    from pytensor import gradient

    kwargs: dict[str, Any] = dict(disconnected_outputs="ignore", return_disconnected="zero")
    jvps = gradient.pushforward(list(outputs), list(wrt), tangents=list(tangents), **kwargs)
    return list(cast(Sequence[Variable], jvps))


def param_connection_rows(param_types: Sequence[Any], outputs_of: Any) -> list[list[bool]]:
    """Which outputs each param is connected to, by PyTensor's own op connection patterns.

    ``outputs_of(inputs)`` builds the outputs from fresh inputs of ``param_types``.
    """
    from pytensor.graph.op import io_connection_pattern

    xs = [t() for t in param_types]
    return [list(row) for row in io_connection_pattern(xs, list(outputs_of(xs)))]


def infer_output_shapes(
    outputs: Sequence[Variable], inputs: Sequence[Variable], input_shapes: Sequence[Any]
) -> list[Any]:
    """Output shapes of a graph from its input shapes, without compiling it."""
    from pytensor.compile.builders import infer_shape

    return list(infer_shape(list(outputs), list(inputs), list(input_shapes)))


def inner_graph_outputs(op: Any, args: Sequence[Variable] | None = None) -> list[Variable]:
    """The outputs of a native inner-graph Op's graph, as new mutable nodes over ``args``.

    PyTensor 3.3 keeps the inner graph of a Scan, an `OpFromGraph` or a `Composite`
    frozen (``op.fgraph`` is a ``FrozenFunctionGraph`` of interned, immutable nodes
    rooted at ``NominalVariable(i, type)``, the very objects innergraph's params are).
    Without ``args`` each input is bound to itself: a private body that reads the
    params, which is what a lift needs. The Op is not touched.
    """
    fgraph = op.fgraph
    inputs = fgraph.inputs if args is None else args
    return list(fgraph.bind(dict(zip(fgraph.inputs, inputs, strict=True))))
