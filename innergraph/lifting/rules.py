"""Lift PyTensor's own control-flow nodes into the in-graph form, and lower them back.

Terms
-----
lift
    Replace a native node (PyTensor's Scan, IfElse or OpFromGraph) by an
    in-graph consumer reading a function variable whose body is a private
    copy of the native inner graph. Native inner graphs are built over
    ``NominalVariable(i, t)`` inputs already (``construct_nominal_fgraph``), so the
    copy is the body as it is.
lower
    Replace an in-graph consumer by the native node it stands for. The native Op
    is built once per body (`Body.cache`), so consumers that share a merged body
    share one native Op — and one compilation.

Both are rule tables keyed by Op class (`LIFTERS`, `LOWERERS`, with the passes
applying them, live in `innergraph.protocol.conversion`, which knows no consumer; this
module registers the rules of innergraph's own and re-exports it): a new consumer
family registers its rules next to its Op, no central function changes.
`PIPELINE_LIFTS` / `PIPELINE_LOWERS` say which rules the rewrite pipeline applies
by itself: Scan is lifted and lowered around PyTensor's Scan passes. An in-graph
IfElse is never lowered by the pipeline (it would lose its laziness), nor a call
(it would lose its shared, compiled-once body); PyTensor's own IfElse and
OpFromGraph are lifted by their own passes only where the in-graph form changes
what runs (`innergraph.rewriting.lift_ifelse`, `innergraph.rewriting.lift_ofg`),
and a linker that cannot run a consumer gets it lowered just before linking
(`innergraph.lifting.handover`). `lift`/`lower` convert on request, and `ifelse`, `call`
and `op_from_graph` build the in-graph forms directly.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytensor.tensor as pt
from pytensor.compile.builders import OpFromGraph
from pytensor.compile.mode import Mode
from pytensor.graph.basic import Variable
from pytensor.conditional.op import IfElse as NativeIfElse
from pytensor.conditional.op import ifelse as native_ifelse
from pytensor.scan.op import Scan as NativeScan

from innergraph.core.compat import inner_graph_outputs
from innergraph.core.build import inner_graph
from innergraph.protocol.conversion import (
    LIFTERS,
    LOWERERS,
    PIPELINE_LIFTS,
    PIPELINE_LOWERS,
    Rule,
    compiling_mode,
    lift,
    lift_graph,
    lifted_bodies,
    lower,
    lower_graph,
)
from innergraph.core.fold import fold_scope
from innergraph.core.graph import InnerGraph, body_of, param
from innergraph.core.hidden_folds import has_hidden_fold
from innergraph.core.instantiate import instantiate
from innergraph.ops.call import Call
from innergraph.ops.ifelse import IfElse, ifelse
from innergraph.ops.scan import Scan, native_scan
from innergraph.core.types import InnerGraphType

__all__ = [
    "LIFTERS",
    "LOWERERS",
    "PIPELINE_LIFTS",
    "PIPELINE_LOWERS",
    "Rule",
    "lift",
    "lift_graph",
    "lower",
    "lower_graph",
]


def _lift_scan(op: Any, inputs: Sequence[Variable]) -> list[Variable] | None:
    """The in-graph Scan of a native one, or None for one innergraph leaves native.

    Left native: every Scan when the mode being compiled excludes PyTensor's Scan
    rewrites (the ``scan`` tag: `_scan_rewrites_excluded`), a Scan whose inner graph
    holds in-place Ops (`_compiled_in_place`), and one whose own mode rewrites its
    inner graph otherwise than the mode being compiled (`_rewritten_by_its_own_mode`).

    Equal native Ops (PyTensor compares their inner graphs) get one function: K
    loops over one step function cost one lift, not K lifts that MergeOptimizer
    then merges node by node.
    """
    native: NativeScan = op
    if _scan_rewrites_excluded() or _compiled_in_place(native) or _rewritten_by_its_own_mode(native):
        return None
    memo = lifted_bodies.get()
    function = memo.get(native) if memo is not None else None
    if function is None:
        body = lift_graph(inner_graph_outputs(native))
        param_types = [v.type for v in native.inner_inputs]
        assert all(v is param(i, t) for i, (v, t) in enumerate(zip(native.inner_inputs, param_types))), (
            f"{native}: PyTensor's Scan no longer builds its inner graph over NominalVariable(i) inputs"
        )
        function_type = InnerGraphType(param_types, [o.type for o in body])
        function = InnerGraph(function_type).make_node(*body).outputs[0]
        if memo is not None:
            memo[native] = function
    return Scan.like(native).make_node(function, *inputs).outputs


def _scan_rewrites_excluded() -> bool:
    """Whether the mode being compiled excludes PyTensor's Scan rewrites (``mode.excluding("scan")``).

    innergraph's rewrites of a lifted loop stand in for PyTensor's Scan rewrites (they
    answer to their finer tags too, `innergraph.rewriting.simplify.CONSUMER_REWRITES`):
    a user who turns all of those off gets the Scans as vanilla PyTensor leaves them.
    """
    optimizer = getattr(compiling_mode(), "provided_optimizer", None)
    return "scan" in getattr(optimizer, "exclude", ())


def _compiled_in_place(native: NativeScan) -> bool:
    """Whether PyTensor already compiled ``native``'s inner graph, rewriting it in place.

    A Scan compiles its own inner `FunctionGraph` (``Scan.fn``, what the VM linkers'
    thunks call), so after one compilation that graph can hold in-place Ops, which no
    Scan may be built around. Such a Scan is left native, as vanilla leaves it: it
    comes from a graph compiled before (PyMC's AR reuses its Scan between the
    initial-point function and ``eval``), and lifting it would make a body of in-place
    nodes that the lowering cannot turn back into a Scan.
    """
    return any(node.op.destroy_map for node in native.fgraph.apply_nodes)


def _rewritten_by_its_own_mode(native: NativeScan) -> bool:
    """Whether ``native`` names a mode whose rewrites differ from those of the mode being compiled.

    PyTensor compiles a Scan's inner graph with the Scan's own mode
    (``pytensor.scan(..., mode=...)``); a lifted body is rewritten with the outer
    graph, by the compiled mode's rewriter. A user who gave the loop a mode of its
    own — ``get_default_mode().excluding(...)`` to keep a rewrite off it,
    ``optimizer=None``, ``FAST_COMPILE`` — gets vanilla's inner graph: such a Scan
    stays native. Modes are compared by what their rewriter query includes,
    requires and excludes (the optimizer they were given, before their linker's
    own additions: innergraph compiles a body for the outer linker anyway); a mode
    given as a rewriter object rather than a query is taken as different. No mode
    (PyTensor's default, what PyMC's and pymc-extras' loops use) and innergraph's
    own lowered modes (`LoweredScanMode`) are not a mode of the user's.
    """
    mode = native.mode
    if mode is None or isinstance(mode, LoweredScanMode):
        return False
    own = _rewriter_query(mode)
    return own is None or own != _rewriter_query(compiling_mode())


def _rewriter_query(mode: Any) -> tuple[Any, ...] | None:
    """What ``mode``'s rewriter query includes, requires and excludes, and its cutoff; None for a rewriter that is not a query."""
    from pytensor.compile.mode import get_mode
    from pytensor.graph.rewriting.db import RewriteDatabaseQuery

    try:
        optimizer = _rewriter_of(get_mode(mode))
    except Exception:  # an unknown mode name
        return None
    if not isinstance(optimizer, RewriteDatabaseQuery) or optimizer.subquery or optimizer.extra_rewrites:
        return None
    return frozenset(optimizer.include), frozenset(optimizer.require), frozenset(optimizer.exclude), optimizer.position_cutoff


def _lower_scan(op: Any, inputs: Sequence[Variable]) -> list[Variable]:
    consumer: Scan = op
    body = body_of(inputs[0])
    mode = consumer.mode
    if mode in (None, "FAST_RUN"):
        compiling = compiling_mode()
        # a plain Mode: the lowered Scan carries it without the passes the body went through; a
        # debugging mode (DebugMode) rewrites the inner graph itself, as it does vanilla's, and so
        # does a mode whose rewriter is no query (it cannot leave passes out: `_excludes`)
        plain = type(compiling) is Mode and _excludes(compiling)
        mode = already_rewritten(compiling, refold=has_hidden_fold(body)) if plain else None
    else:
        mode = already_rewritten(mode, refold=has_hidden_fold(body))
    lowered = Scan(consumer.layout, **{**consumer.flags(), "mode": mode})
    return native_scan(body, lowered).make_node(*inputs[1:]).outputs


_already_rewritten: dict[Any, tuple[Any, Any]] = {}

#: innergraph's passes that lift, rewrite and lower loops: a lowered body's nested loops went through them already.
_ROUND_TRIP = ("innergraph_lift", "innergraph_branch", "innergraph_simplify", "innergraph_lower")


def _rewriter_of(mode: Any) -> Any:
    """``mode``'s rewriter as given: a query, a rewriter object, or the predefined one a name (or None) stands for."""
    from pytensor.compile.mode import predefined_optimizers

    optimizer = mode.provided_optimizer
    if isinstance(optimizer, str) or optimizer is None:  # a name, as `Mode.excluding` reads it
        optimizer = predefined_optimizers.get(optimizer)
    return optimizer


def _excludes(mode: Any) -> bool:
    """Whether ``mode``'s rewriter can leave passes out (a query), as `already_rewritten` asks of it.

    A rewriter object is not: an in-graph call's body compiled at run time under the
    ``py`` linker (`innergraph.protocol.runtime`) is rewritten by the default mode's
    rewriter, queried once.
    """
    return hasattr(_rewriter_of(mode), "excluding")


def already_rewritten(mode: Any, *, refold: bool = False) -> Any:
    """``mode`` for the inner graph of a lowered body: without canonicalize, stabilize and the round trip.

    PyTensor rewrites a Scan's inner graph with the mode compiling the graph (its
    ``scan_inner_graph`` pass, 100), or with the Scan's own ``mode`` when it has one.
    A lowered body was rewritten with the outer graph by that very mode up to the
    lowering (canonicalize and stabilize reached its nodes, and its nested loops were
    lifted, simplified and lowered with it), so the lowered Scan carries the mode
    being compiled (``mode``) without those passes: the rest (specialize, fusion, the
    backend's in-place decisions) runs as vanilla runs it, the user's exclusions
    included. ``refold=True`` (a body with a hidden fold, `innergraph.core.hidden_folds`:
    the shared graph kept it from being rewritten as it would be alone) keeps
    canonicalize, which folds the node and runs the algebra the folded constant
    unlocks; stabilize and the round trip stay out. ``"FAST_COMPILE"`` is kept as it
    is. One Mode object per query, linker and ``refold``, so the lowered Scans of one
    body share one native Op.
    """
    from pytensor.compile.mode import get_mode

    if mode == "FAST_COMPILE":
        return mode
    base = get_mode(mode)
    query = _rewriter_query(base)
    linker = type(base.provided_linker) if not isinstance(base.provided_linker, str) else base.provided_linker
    key: tuple[Any, ...] = (type(base), query, linker, refold)
    if query is None:  # a rewriter object, not a query: by identity
        key = (id(base), refold)
    cached = _already_rewritten.get(key)
    if cached is None or (query is None and cached[0] is not base):
        made = base.excluding("stabilize", *_ROUND_TRIP) if refold else base.excluding("canonicalize", "stabilize", *_ROUND_TRIP)
        if type(made) is Mode:  # a subclass (a debugging mode, say) is kept as it is
            made = LoweredScanMode(linker=_inner_linker(base), optimizer=made.provided_optimizer)
        cached = _already_rewritten[key] = (base, made)
    return cached[1]


def _inner_linker(base: Mode) -> Any:
    """The linker PyTensor's own runtime links a lowered Scan's inner function with.

    A Scan without a mode of its own links it with PyTensor's VM (``"vm"``, C thunks
    where a compiler is configured; ``"cvm"`` for a C thunk); one with a mode, with
    that mode's linker. Under the ``py`` linker the compiled mode's own linker would
    run the inner function node by node in Python (a trivial loop's steady call 1.9x
    vanilla's): the VM, as vanilla. The JIT backends convert the Scan themselves and
    never link its inner function.
    """
    from pytensor.link.basic import PerformLinker

    return "vm" if isinstance(base.linker, PerformLinker) else "cvm"


class LoweredScanMode(Mode):
    """The mode of a lowered Scan (`already_rewritten`): a `Mode`, told apart from a user's.

    A Scan whose mode is of this class was lowered by innergraph, so lifting it again is
    no change of the user's loop (`_rewritten_by_its_own_mode`). A pickled one is a
    plain `Mode`, so a pickled function loads without innergraph.
    """

    def __reduce__(self) -> tuple[Any, ...]:
        return (Mode, (self.provided_linker, self.provided_optimizer))


def _lift_ifelse(op: Any, inputs: Sequence[Variable]) -> list[Variable]:
    n = op.n_outs
    return _as_list(ifelse(inputs[0], list(inputs[1 : 1 + n]), list(inputs[1 + n :])))


def _lower_ifelse(op: Any, inputs: Sequence[Variable]) -> list[Variable]:
    consumer: IfElse = op
    cond, then_fn, else_fn, then_args, else_args = consumer.split(inputs)
    return _as_list(native_ifelse(cond, instantiate(then_fn, then_args), instantiate(else_fn, else_args)))


def _lift_ofg(op: Any, inputs: Sequence[Variable]) -> list[Variable] | None:
    """Lift an `OpFromGraph` — the exact class only, and not an in-place one.

    Subclasses (AllocDiag, Einsum, random-variable Ops, ...) stand for Ops with a
    fixed signature that rewrites match on by class, so they stay native. Gradient
    overrides become function inputs of the `Call`; an override that reads
    variables other than its arguments is not lifted.
    """
    native: OpFromGraph = op
    if type(native) is not OpFromGraph or native.destroy_map:
        return None
    body = lift_graph(inner_graph_outputs(native))
    param_types = [v.type for v in native.inner_inputs]
    function = InnerGraph(InnerGraphType(param_types, [o.type for o in body])).make_node(*body).outputs[0]
    functions: list[Variable] = [function]
    ins, outs = list(native.input_types), list(native.output_types)
    overrides = (  # (override, how to apply it, types of its last argument group, reads outputs)
        (native.pullback_overrides, native.pullback, outs, True),
        (native.pushforward_overrides, native.pushforward, ins, False),
    )
    patterns: list[tuple[str, ...] | None] = []
    for override, apply, last_types, reads_outputs in overrides:
        if override is None:
            patterns.append(None)
            continue
        made = _override_function(apply, ins, outs, last_types, reads_outputs)
        if made is None:
            return None
        functions.append(made[0])
        patterns.append(made[1])
    pattern = native._connection_pattern
    connection = tuple(tuple(bool(c) for c in row) for row in pattern) if pattern is not None else None
    return Call(patterns[0], patterns[1], connection).make_node(*functions, *inputs).outputs


def _override_function(
    make: Callable[..., Sequence[Variable]],
    in_types: list[Any],
    out_types: list[Any],
    last_types: list[Any],
    reads_outputs: bool,
) -> tuple[Variable, tuple[str, ...]] | None:
    """A gradient override as a function of ``(args, [outputs], (co)tangents)``, and its pattern."""
    from pytensor.gradient import DisconnectedType
    from pytensor.graph.null_type import NullType

    xs, ys, zs = [t() for t in in_types], [t() for t in out_types], [t() for t in last_types]
    results = list(make(xs, ys, zs))
    pattern = tuple(
        "d" if isinstance(r.type, DisconnectedType) else "n" if isinstance(r.type, NullType) else "c" for r in results
    )
    connected = [r for r, mark in zip(results, pattern, strict=True) if mark == "c"]
    closure = inner_graph(lift_graph(connected) if connected else [pt.constant(0.0)], [*xs, *(ys if reads_outputs else []), *zs])
    if closure.captured:
        return None
    return closure.function, pattern


def _lower_call(op: Any, inputs: Sequence[Variable]) -> list[Variable]:
    consumer: Call = op
    function, pb, pf, args = consumer.split(inputs)
    body = body_of(function)
    xs = [t() for t in body.param_types]
    kwargs: dict[str, Any] = {}
    if pb is not None:
        kwargs["pullback"] = lambda i, o, g: consumer._overridden_pullback(pb, i, o, g)
    if pf is not None:
        outputs_like = [t() for t in body.type.output_types]
        kwargs["pushforward"] = lambda i, t: consumer._overridden_pushforward(pf, i, t, outputs_like)
    if consumer.connection is not None:
        kwargs["connection_pattern"] = [list(row) for row in consumer.connection]
    native = OpFromGraph(xs, fold_scope(instantiate(body, xs)), **kwargs)
    return _as_list(native(*args, return_list=True))


def _as_list(value: Variable | Sequence[Variable]) -> list[Variable]:
    return [value] if isinstance(value, Variable) else list(value)


LIFTERS[NativeScan] = _lift_scan
LOWERERS[Scan] = _lower_scan
LIFTERS[NativeIfElse] = _lift_ifelse
LOWERERS[IfElse] = _lower_ifelse
LIFTERS[OpFromGraph] = _lift_ofg
LOWERERS[Call] = _lower_call
PIPELINE_LIFTS.add(NativeScan)
PIPELINE_LOWERS.add(Scan)
