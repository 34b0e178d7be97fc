"""Numba implementations of innergraph's consumers.

Numba is PyTensor 3.0's default backend (``linker=auto``). Importing this module
registers, with PyTensor's Numba dispatchers:

* ``numba_typify`` for `Body`: a folded function variable reaches the jitted code
  as ``None``; consumers read their body from the node at funcify time.
* ``numba_funcify_and_cache_key`` for `Call`: the body is funcified once per
  distinct `Body` (merged bodies compile once) and the call jumps into it;
* the same for the in-graph `Scan`, delegating to PyTensor's own Numba Scan;
* a lazy `IfElse`: both branch bodies are jitted, exactly one runs per call;
* for PyTensor's own Scan, a memo in front of its conversion
  (`funcify_native_scan_once`), applied as a patch that ``uninstall`` reverts.

The cache key of a call is derived from its body's own Numba cache key, so
Numba's on-disk cache can never confuse two different bodies.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from hashlib import sha256
from typing import Any

from pytensor.compile.aliasing import add_supervisor_to_fgraph, insert_deepcopy
from pytensor.compile.io import In, Out
from pytensor.link.numba.dispatch.basic import (
    numba_funcify_and_cache_key,
    numba_njit,
    numba_typify,
    register_funcify_and_cache_key,
)
from pytensor.link.numba.cache import compile_numba_function_src
from pytensor.scan.op import Scan as NativeScan

from innergraph.fold import fold_inner_graphs
from innergraph.instantiate import private_fgraph
from innergraph.patching import DispatchPatch, apply_late
from innergraph.ops.call import Call
from innergraph.ops.ifelse import IfElse
from innergraph.ops.scan import Scan, build_native_scan, is_shared
from innergraph.ops.runtime import body_rewriter, body_value, compile_count
from innergraph.types import Body

__all__ = ["funcify_native_scan_once", "numba_body"]

_native_scan_funcify = numba_funcify_and_cache_key.dispatch(NativeScan)
_funcified: dict[int, dict[tuple[Any, ...], tuple[Callable[..., Any], str | None]]] = {}


def funcify_native_scan_once(op: NativeScan, node: Any = None, **kwargs: Any) -> tuple[Callable[..., Any], str | None]:
    """PyTensor's Numba conversion of a native Scan, done once per Op instance and node types.

    The Numba linker converts node by node, and PyTensor's conversion of a Scan
    rewrites its inner graph each time. Nodes that share one Op instance by
    innergraph's doing (lowering a merged body, ``innergraph_share``) share the
    result, so K loops over one body compile it once; other Scans (vanilla
    PyTensor's, e.g. under ``mode.excluding("innergraph")``) are converted as
    PyTensor converts them. The outer types are part of the key
    because the conversion takes in-place decisions from them.
    """
    if not is_shared(op):  # PyTensor's own nodes are converted exactly as without innergraph
        return _native_scan_funcify(op, node=node, **kwargs)
    key = (tuple(v.type for v in node.inputs), tuple(v.type for v in node.outputs))
    per_op = _funcified.get(id(op))
    if per_op is None:
        per_op = _funcified[id(op)] = {}
        weakref.finalize(op, _funcified.pop, id(op), None)
    if key not in per_op:
        per_op[key] = _native_scan_funcify(op, node=node, **kwargs)
    return per_op[key]


apply_late(DispatchPatch(numba_funcify_and_cache_key, NativeScan, funcify_native_scan_once))


@numba_typify.register(Body)
def _typify_body(data: Body, **kwargs: Any) -> None:
    return None


def _cached_in(body: Body, key: Any, make: Callable[[], tuple[Callable[..., Any], str | None]]) -> tuple[Callable[..., Any], str | None]:
    """``make()``, once per ``body`` and ``key``: consumers of one body share what it made."""
    cached = body.cache.get(key)
    if cached is None:
        cached = body.cache[key] = make()
    return cached


def numba_body(body: Body) -> tuple[Callable[..., Any], str | None]:
    """The body as a jitted function of its params, and its cache key (cached)."""
    return _cached_in(body, "numba", lambda: _counted(body, _funcify_body(body)))


def _counted(body: Body, compiled: tuple[Callable[..., Any], str | None]) -> tuple[Callable[..., Any], str | None]:
    compile_count[(id(body), "numba")] += 1
    return compiled


def _funcify_body(body: Body) -> tuple[Callable[..., Any], str | None]:
    fgraph = private_fgraph(body)
    input_specs = [In(x, borrow=True, mutable=False) for x in fgraph.inputs]
    add_supervisor_to_fgraph(fgraph=fgraph, input_specs=input_specs, accept_inplace=True)
    body_rewriter(body, "numba").rewrite(fgraph)
    fold_inner_graphs(fgraph)
    insert_deepcopy(fgraph, wrapped_inputs=input_specs, wrapped_outputs=[Out(o, borrow=False) for o in fgraph.outputs])
    return numba_funcify_and_cache_key(
        fgraph, squeeze_output=len(fgraph.outputs) == 1, fgraph_name="innergraph_body"
    )


def _skip_function_argument(
    name: str, n_args: int, inner: Callable[..., Any], inner_key: str | None, n_functions: int = 1
) -> tuple[Callable[..., Any], str | None]:
    """A jitted ``name(*functions, *args)`` that calls ``inner(*args)``."""
    args = ", ".join(f"a{i}" for i in range(n_args))
    functions = ", ".join(f"function{i}" for i in range(n_functions))
    src = f"def {name}({functions}, {args}):\n    return inner({args})\n"
    fn = compile_numba_function_src(src, name, {"inner": inner})
    key = None if inner_key is None else sha256(f"({src}, {inner_key})".encode()).hexdigest()
    return numba_njit(fn), key


@register_funcify_and_cache_key(Call)
def numba_funcify_call(op: Call, node: Any = None, **kwargs: Any) -> tuple[Callable[..., Any], str | None]:
    body = body_value(node.inputs[0])
    n_args = len(node.inputs) - op.n_functions
    return _cached_in(
        body,
        ("numba_call", n_args, op.n_functions),
        lambda: _skip_function_argument("innergraph_call", n_args, *numba_body(body), op.n_functions),
    )


@register_funcify_and_cache_key(Scan)
def numba_funcify_scan(op: Scan, node: Any = None, **kwargs: Any) -> tuple[Callable[..., Any], str | None]:
    """Delegate to PyTensor's Numba Scan, built once per body, op and outer input types.

    PyTensor's Numba Scan rewrites its inner graph in place with in-place decisions
    that depend on the node's outer types, so the native Op is shared only among
    nodes with the same outer input types.
    """
    body = body_value(node.inputs[0])
    key = ("numba_scan", op, tuple(v.type for v in node.inputs[1:]))

    def convert() -> tuple[Callable[..., Any], str | None]:
        native = build_native_scan(body, op)
        return _counted(body, numba_funcify_and_cache_key(native, node=native.make_node(*node.inputs[1:]), **kwargs))

    inner, inner_key = _cached_in(body, key, convert)
    return _skip_function_argument("innergraph_scan", len(node.inputs) - 1, inner, inner_key)


@register_funcify_and_cache_key(IfElse)
def numba_funcify_ifelse(op: IfElse, node: Any = None, **kwargs: Any) -> tuple[Callable[..., Any], str | None]:
    _, then_fn, else_fn, then_args, else_args = op.split(node.inputs)
    then_body, else_body = body_value(then_fn), body_value(else_fn)
    key = ("numba_ifelse", else_body, len(then_args), len(else_args))
    return _cached_in(then_body, key, lambda: _lazy_ifelse(then_body, else_body, len(then_args), len(else_args)))


def _lazy_ifelse(then_body: Body, else_body: Body, n_then: int, n_else: int) -> tuple[Callable[..., Any], str | None]:
    """A jitted ``(cond, then_function, else_function, *then_args, *else_args)`` that runs one body."""
    then_inner, then_key = numba_body(then_body)
    else_inner, else_key = numba_body(else_body)
    a = ", ".join(f"a{i}" for i in range(n_then))
    b = ", ".join(f"b{i}" for i in range(n_else))
    params = ", ".join(p for p in ("cond, then_function, else_function", a, b) if p)
    src = (
        f"def innergraph_ifelse({params}):\n"
        f"    if cond:\n        return then_inner({a})\n"
        f"    else:\n        return else_inner({b})\n"
    )
    fn = compile_numba_function_src(src, "innergraph_ifelse", {"then_inner": then_inner, "else_inner": else_inner})
    keys = (then_key, else_key)
    key = None if None in keys else sha256(f"({src}, {keys})".encode()).hexdigest()
    return numba_njit(fn), key
