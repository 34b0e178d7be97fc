"""JAX implementations of innergraph's consumers.

Importing this module (the patched linker schedule does, on the first JAX link)
registers with PyTensor's ``jax_funcify``, reversibly (`DispatchPatch`, removed by
``innergraph.uninstall``):

* (`Call`, `IfElse` and the loops: code generated from their step semantics,
  `innergraph.backends.jax_generated`, calling `jax_body`);
* the in-graph `Scan`: the native Scan built from its body, converted as below;
* PyTensor's own Scan: while loops, and mit-mots writing before their oldest input
  tap, run as `innergraph.backends.jax_loop.scan_as_loop` (PyTensor's conversion
  refuses the first and miscomputes the second); other Scans are PyTensor's
  ``lax.scan`` conversion, with each mit-mot's taps shifted so its oldest input tap
  is 0 (PyTensor normalizes a mit-mot's output taps by their own minimum, the
  runtime by the input taps').

and patches ``JAXLinker.jit_compile`` (`jit_compile`): a function holding a while
loop, or a Scan whose number of steps is symbolic, falls back to running eagerly
when ``jax.jit`` cannot trace it, e.g. because it cannot know the length of a trace
the loop returns (`DynamicTraceLength`) or of the buffer a Scan writes (the reverse
pass of a loop with a symbolic trip count: ``fori_loop(lo, hi, ...)``'s gradient).

Terms
-----
body function
    A `Body` as a JAX function of its params: a private `FunctionGraph` of the
    body, rewritten by the JAX mode's rewriter (the passes after the fold only, for a
    body the pipeline already rewrote), converted by PyTensor's ``jax_funcify``.
    Made once per `Body` (cached on it), so consumers of one merged body share it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from copy import copy
from typing import Any

from pytensor.graph.basic import Apply, Constant
from pytensor.graph.fg import AbstractFunctionGraph, FunctionGraph
from pytensor.link.jax.dispatch import jax_funcify
from pytensor.link.jax.dispatch import scan as jax_scan
from pytensor.link.jax.linker import JAXLinker
from pytensor.scan.op import Scan as NativeScan

from innergraph.backends.jax_loop import DynamicTraceLength, needs_loop, scan_as_loop
from innergraph.core.dispatch import register_conversion_dispatch
from innergraph.core.fold import fold_inner_graphs
from innergraph.core.graph import body_of, is_function, scope_toposort
from innergraph.core.instantiate import private_fgraph
from innergraph.protocol.runtime import body_value, compile_count, pipeline_passes
from innergraph.core.types import Body, is_rewritten
from innergraph.ops.scan import Scan, backend_native_scan
from innergraph.core.hooks import DispatchPatch, Patch, apply_late, original
from innergraph.rewriting.lift import was_lifted
from innergraph.core.compat import queried_once

__all__ = [
    "jax_body",
    "jax_funcify_native_scan",
    "jax_funcify_scan",
    "jit_compile",
    "shifted_mit_mot_taps",
]



def _body_rewriter(body: Body) -> Any:
    """The JAX mode's rewriter for a body, without the pipeline's passes if it went through them (queried once)."""
    from pytensor.compile.mode import Mode, get_mode


    query = get_mode("JAX").provided_optimizer
    rewritten = is_rewritten(body)

    def rewriter() -> Any:
        mode = Mode(linker="jax", optimizer=query)
        return mode.excluding(*pipeline_passes()).optimizer if rewritten else mode.optimizer

    return queried_once(query, ("jax", rewritten), rewriter)


def jax_body(body: Body) -> Callable[..., tuple[Any, ...]]:
    """The body function of ``body`` (module docstring): params in, a tuple of outputs out (cached)."""

    rewriter = _body_rewriter(body)

    def make() -> Callable[..., tuple[Any, ...]]:
        compile_count[(id(body), "jax")] += 1
        fgraph = private_fgraph(body)
        rewriter.rewrite(fgraph)
        fold_inner_graphs(fgraph)
        return jax_funcify(fgraph, fgraph_name="innergraph_body")

    return body.cached(("jax", rewriter), make)  # the rewriter depends on the default mode


def jax_funcify_scan(op: Scan, node: Apply, **kwargs: Any) -> Callable[..., Any]:
    """``(function, n_steps, *outer)`` -> the native Scan of its body, converted once per body, op and outer types."""
    body = body_value(node.inputs[0])
    key = ("jax_scan", op, id(op.mode), op.strict, tuple(v.type for v in node.inputs[1:]))  # as `native_scan` keys it

    def convert() -> Callable[..., Any]:
        from pytensor.compile.mode import get_mode

        outer = node.inputs[1:]
        native = backend_native_scan(body, op, outer, JAXLinker(), get_mode("JAX").provided_optimizer)
        compile_count[(id(body), "jax")] += 1
        return jax_funcify(native, node=native.make_node(*outer), **kwargs)

    inner = body.cached(key, convert)

    def scan(function: Any, *outer: Any) -> Any:
        return inner(*outer)

    return scan


_native_scan_funcify = original(jax_scan, "jax_funcify_Scan")  # a patched PyTensor delegates `jax_funcify_Scan` to us


def shifted_mit_mot_taps(op: NativeScan) -> NativeScan:
    """``op``, or a copy whose mit-mots' taps are shifted so each one's oldest input tap is 0.

    The runtime offsets a mit-mot's input and output taps by its oldest *input* tap,
    so shifting both by the same amount changes nothing at run time; PyTensor's JAX
    conversion offsets the output taps by their own oldest instead, which agrees
    once the input taps start at 0 and no output tap is older (`needs_loop`
    sends those elsewhere).
    """
    info = op.info
    shifts = [-min(taps) for taps in info.mit_mot_in_slices]
    if not any(shifts):
        return op
    shifted = copy(op)
    shifted.info = dataclasses.replace(
        info,
        mit_mot_in_slices=tuple(tuple(t + s for t in taps) for taps, s in zip(info.mit_mot_in_slices, shifts, strict=True)),
        mit_mot_out_slices=tuple(tuple(t + s for t in taps) for taps, s in zip(info.mit_mot_out_slices, shifts, strict=True)),
    )
    return shifted


def _native_inner(op: NativeScan, **kwargs: Any) -> Callable[..., Any]:
    """The Scan's inner graph as a JAX function (PyTensor's ``scan_inner_graph`` rewrote it for JAX already)."""
    return jax_funcify(op.fgraph, **kwargs)


def jax_funcify_native_scan(op: NativeScan, node: Apply | None = None, **kwargs: Any) -> Callable[..., Any]:
    """PyTensor's Scan under JAX: `scan_as_loop` where it must, else PyTensor's conversion with shifted mit-mot taps."""
    if node is not None and needs_loop(op):
        return scan_as_loop(op, node, _native_inner(op, **kwargs))
    return _native_scan_funcify(shifted_mit_mot_taps(op), node=node, **kwargs)


_original_jit_compile = original(JAXLinker, "jit_compile")


#: What tracing a function under ``jax.jit`` raises when a shape is only known at run time.
_TRACING_ERRORS = (DynamicTraceLength, IndexError, TypeError)


def jit_compile(self: JAXLinker, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``JAXLinker.jit_compile``; for a graph with a dynamic loop, falling back to eager when jit cannot run it.

    A while loop's traces are cut to the number of steps it ran, which ``jax.jit``
    cannot know (`DynamicTraceLength`); a Scan with a symbolic number of steps
    writes buffers of that length (allocated in the outer graph: the reverse pass
    of ``fori_loop`` with symbolic bounds, or of any such Scan). Shapes computed from
    them, or from values the outer graph did not fold to constants, make tracing
    under ``jit`` fail (``IndexError``, ``TypeError``). Then the function runs
    eagerly, op by op, with concrete shapes (each loop itself is still one compiled
    ``while_loop``/``scan``), from that call on; an error that is not about tracing
    is raised again by the eager run. So does any graph innergraph's pipeline rewrote
    (`was_lifted`): its rewrites can leave a shape-derived index where vanilla's graph
    had none (a loop simplified away leaves the ``IncSubtensor`` of its gradient, whose
    stop ``ScalarFromTensor(Shape_i(x))`` is a traced value under ``jit``), which must
    not make a function fail that vanilla runs. Other graphs get PyTensor's ``jit``
    unchanged.
    """
    jitted = _original_jit_compile(self, fn)
    if self.fgraph is None or not (was_lifted(self.fgraph) or _has_dynamic_loop(self.fgraph)):  # the set lookup first: the walk reads every body
        return jitted
    current = [jitted]

    def run(*args: Any) -> Any:
        if current[0] is jitted:
            try:
                return jitted(*args)
            except _TRACING_ERRORS:
                current[0] = fn
        return fn(*args)

    return run


def _has_dynamic_loop(fgraph: FunctionGraph) -> bool:
    return any(_is_dynamic(node) for node in _all_nodes(fgraph.apply_nodes))


def _is_dynamic(node: Apply) -> bool:
    """A while Scan, or a Scan whose number of steps is not a constant (its buffers' lengths are only known at run time)."""
    op = node.op
    if isinstance(op, NativeScan):
        return op.info.as_while or not isinstance(node.inputs[0], Constant)
    if isinstance(op, Scan):
        return op.layout.info.as_while or not isinstance(node.inputs[1], Constant)
    return False


def _all_nodes(nodes: Any) -> Iterator[Apply]:
    """``nodes``, and those of the bodies and native inner graphs they run, recursively."""
    for node in nodes:
        yield node
        for var in node.inputs:
            if is_function(var):
                yield from _all_nodes(scope_toposort(body_of(var).outputs))
        inner = getattr(node.op, "fgraph", None)
        if isinstance(inner, AbstractFunctionGraph):  # a native Op's inner graph (frozen since PyTensor 3.3)
            yield from _all_nodes(inner.apply_nodes)


for _cls, _funcify in (
    (Scan, jax_funcify_scan),
    (NativeScan, jax_funcify_native_scan),
):
    apply_late(DispatchPatch(jax_funcify, _cls, _funcify))
apply_late(Patch(JAXLinker, "jit_compile", jit_compile))
# said, not discovered from the linker's bytecode (`innergraph.core.dispatch`)
register_conversion_dispatch(JAXLinker, lambda: jax_funcify)
