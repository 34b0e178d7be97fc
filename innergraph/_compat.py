"""Every PyTensor internal innergraph depends on that may move between versions.

innergraph targets PyTensor 3.0.x and keeps to APIs that also exist in 2.38.x
(the version PyMC 5.28 pins) where it can. Anything version-specific is imported
or adapted here, and only here.

3.0 renamed ``Op.L_op``/``Op.R_op`` to ``Op.pullback``/``Op.pushforward`` (the old
names dispatch to the new ones) and moved ``Function`` to
``pytensor.compile.executor``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar, cast

import pytensor
from pytensor.graph.basic import Variable
from pytensor.graph.op import Op

__all__ = [
    "Function",
    "HAS_PULLBACK",
    "InplaceGraphOptimizer",
    "PYTENSOR_VERSION",
    "infer_output_shapes",
    "inner_graph_outputs",
    "param_connection_rows",
    "pullback",
    "pushforward",
    "queried_once",
    "scope_safe_fusion",
    "with_legacy_gradient_names",
]

PYTENSOR_VERSION: tuple[int, ...] = tuple(
    int(p) for p in pytensor.__version__.split("+")[0].split(".")[:3] if p.isdigit()
)

#: Whether ``Op.pullback``/``Op.pushforward`` are the methods to implement (3.0+).
HAS_PULLBACK = hasattr(Op, "pullback")

try:  # 3.0
    from pytensor.compile.executor import Function
except ImportError:  # 2.38
    from pytensor.compile.function.types import Function  # type: ignore[no-redef]


try:  # 3.0: the in-place passes of Elemwise and Blockwise share a base with the Op class they rewrite
    from pytensor.tensor.rewriting.elemwise import InplaceGraphOptimizer
except ImportError:  # 2.38
    InplaceGraphOptimizer = None  # type: ignore[assignment,misc]


_OpClass = TypeVar("_OpClass", bound=type[Op])


def with_legacy_gradient_names(cls: _OpClass) -> _OpClass:
    """On PyTensor < 3.0, expose ``pullback``/``pushforward`` as ``L_op``/``R_op``."""
    if HAS_PULLBACK:
        return cls

    def R_op(self: Any, inputs: Sequence[Variable], eval_points: Sequence[Variable | None]) -> list[Variable]:
        from pytensor.gradient import disconnected_type

        tangents = [disconnected_type() if e is None else e for e in eval_points]
        return self.pushforward(inputs, self.make_node(*inputs).outputs, tangents)

    setattr(cls, "L_op", cls.pullback)  # noqa: B010
    setattr(cls, "R_op", R_op)  # noqa: B010
    return cls


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

    fn = getattr(gradient, "pullback", None)
    kwargs: dict[str, Any] = dict(disconnected_inputs="ignore", return_disconnected="disconnected")
    if fn is not None:
        return list(fn(list(outputs), list(wrt), cotangents=list(cotangents), **kwargs))
    return list(gradient.Lop(list(outputs), list(wrt), list(cotangents), **kwargs))


def pushforward(
    outputs: Sequence[Variable], wrt: Sequence[Variable], tangents: Sequence[Variable]
) -> list[Variable]:
    """Jacobian-vector products; outputs that depend on no ``wrt`` are zeros."""
    from pytensor import gradient

    fn = getattr(gradient, "pushforward", None)
    kwargs: dict[str, Any] = dict(disconnected_outputs="ignore", return_disconnected="zero")
    if fn is not None:
        return list(fn(list(outputs), list(wrt), tangents=list(tangents), **kwargs))
    return list(gradient.Rop(list(outputs), list(wrt), list(tangents), **kwargs))


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
