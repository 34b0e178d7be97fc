"""Numba implementations of innergraph's consumers.

Numba is PyTensor 3.0's default backend (``linker=auto``). Importing this module
registers, with PyTensor's Numba dispatchers:

* ``numba_typify`` for `Body`: a folded function variable reaches the jitted code
  as ``None``; consumers read their body from the node at funcify time.
* (`Call`, the lazy `IfElse` and the loops get code generated from their step
  semantics, `innergraph.backends.numba_generated`, with their bodies' code inline:
  `numba_body_code` prepares a body and converts its nodes once per distinct
  `Body`, so merged bodies convert once; a body of ``MIN_NODES`` nodes or more is
  called by reference instead, `caller_code`);
* the in-graph `Scan`, delegating to PyTensor's own Numba Scan; PyTensor's Scan and
  `OpFromGraph` calling an inner graph of ``MIN_NODES`` nodes or more by reference
  (`funcify_scan_by_reference`, `funcify_ofg_by_reference`);
* for a `FunctionGraph`, its conversion as one `one_conversion`
  (`funcify_fgraph_as_one_conversion`), within which equal nodes of the outer
  graph, native Scans included, convert once (`numba_code.convert_once` in place of
  PyTensor's ``numba_funcify_ensure_cache``): patches that ``uninstall`` reverts.

The cache key of a consumer's function is derived from its bodies' own keys, so
Numba's on-disk cache can never confuse two different bodies.
"""


from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from hashlib import sha256
from typing import Any, NamedTuple

from numba.core.registry import CPUDispatcher
from pytensor.link.numba.dispatch import basic as numba_basic
from pytensor.link.numba.dispatch.basic import (
    numba_funcify_and_cache_key,
    numba_typify,
    register_funcify_and_cache_key,
    register_funcify_default_op_cache_key,
)
from pytensor.graph.fg import AbstractFunctionGraph, FunctionGraph
from pytensor.link.numba.cache import compile_numba_function_src
from pytensor.compile.builders import OpFromGraph
from pytensor.link.numba.dispatch import compile_ops as numba_compile_ops
from pytensor.link.numba.dispatch import scan as numba_scan
from pytensor.link.numba.linker import NumbaLinker
from pytensor.scan.op import Scan as NativeScan

from innergraph.backends.numba_code import (
    BodyCode,
    Converted,
    Rendering,
    body_code,
    check_arguments,
    code_key,
    convert_once,
    one_conversion,
    prepared_body,
)
from innergraph.backends.numba_reference import (
    by_reference,
    called_by_reference,
    capture_body,
    captured_bodies,
    large_enough,
    referenced_key,
)
from innergraph.backends import numba_literals  # noqa: F401  (registers ord of a one-character literal)
from innergraph.backends import numba_gc  # noqa: F401  (defers full collections while Numba compiles)
from innergraph.backends import numba_messages  # noqa: F401  (registers SpecifyShape's and Split's conversions)
from innergraph.backends import numba_slices  # noqa: F401  (registers the conversions of Alloc of a 0-d value and of 1-d sorts)
from innergraph.backends.numba_rows import rows_key, scan_rows_by_loop
from innergraph.core.dispatch import register_conversion_dispatch
from innergraph.core.hooks import DispatchPatch, Patch, apply_late, original
from innergraph.rewriting.lift import was_lifted
from innergraph.ops.link_argument import LinkArgument
from innergraph.ops.scan import Scan, backend_native_scan
from innergraph.protocol.runtime import body_value, compile_count
from innergraph.core.types import Body

__all__ = ["ReferencedCode", "caller_code", "funcify_fgraph_as_one_conversion", "funcify_ofg_by_reference", "jitted", "numba_body", "numba_body_code"]

_fgraph_funcify = original(numba_basic, "numba_funcify_FunctionGraph")


def funcify_fgraph_as_one_conversion(fgraph: FunctionGraph, node: Any = None, *args: Any, **kwargs: Any) -> Converted:
    """PyTensor's Numba conversion of a `FunctionGraph`, as `one_conversion`.

    The bodies its consumers inline then share the conversion of their equal
    nodes (three ``Sum`` nodes of three branch bodies convert once), and so do
    the graph's own nodes when innergraph's pipeline rewrote it (`convert_once`).
    Nested graphs (a ``Composite``'s, a Scan's) belong to the outer conversion.
    Other graphs PyTensor's function converts (a ``FrozenFunctionGraph``) are
    converted as PyTensor converts them.
    """
    if args:  # more positional arguments than the node: PyTensor's call
        return _fgraph_funcify(fgraph, node, *args, **kwargs)
    if not isinstance(fgraph, FunctionGraph):
        return _fgraph_funcify(fgraph, node=node, **kwargs)
    with one_conversion(outer_nodes=was_lifted(fgraph)):
        fn, key = _fgraph_funcify(fgraph, node=node, **kwargs)
    capture_body(fgraph, fn, key)
    return fn, key


apply_late(DispatchPatch(numba_funcify_and_cache_key, FunctionGraph, funcify_fgraph_as_one_conversion))


def funcify_other_fgraph(fgraph: AbstractFunctionGraph, node: Any = None, *args: Any, **kwargs: Any) -> Converted:
    """PyTensor's conversion of another graph (a Scan's or an OpFromGraph's inner graph), recorded for `funcify_scan_by_reference` and `funcify_ofg_by_reference`."""
    fn, key = _fgraph_funcify(fgraph, node, *args, **kwargs)
    capture_body(fgraph, fn, key)
    return fn, key


apply_late(DispatchPatch(numba_funcify_and_cache_key, AbstractFunctionGraph, funcify_other_fgraph))

_scan_funcify = original(numba_scan, "numba_funcify_Scan")


class _Referable(NamedTuple):
    """PyTensor's function for a node whose inner graph can be called by reference, and that graph's function."""

    fn: Any  # a numba CPUDispatcher (numba has no type stubs)
    key: str
    body: Any
    body_key: str


def _referable_body(fgraph: AbstractFunctionGraph, convert: Callable[[], Converted]) -> tuple[Converted, _Referable | None]:
    """PyTensor's conversion ``convert()`` of a node holding ``fgraph``, and what calling ``fgraph`` by reference needs.

    The second is None where the node keeps PyTensor's conversion: no key (code run in
    Python, mocked), or a graph under ``MIN_NODES`` nodes (`called_by_reference`).
    """
    with captured_bodies() as bodies:
        fn, key = convert()
    body, body_key = bodies.get(id(fgraph), (None, None))
    if key is None or body_key is None or not isinstance(fn, CPUDispatcher) or not called_by_reference(fgraph):
        return (fn, key), None
    return (fn, key), _Referable(fn, key, body, body_key)


def funcify_scan_by_reference(op: NativeScan, node: Any = None, **kwargs: Any) -> Converted:
    """PyTensor's Numba Scan, its array rows stored by a loop, calling a step body of ``MIN_NODES`` nodes or more by reference.

    The body function is compiled once as its own unit and cached under its own key
    (`innergraph.backends.numba_reference`); the loop's code and key name it, so
    neither the loop's LLVM module nor the outer function's holds its code. A loop
    PyTensor converts otherwise (no key, another PyTensor's code) keeps its body. Every
    loop's source is compiled with its row stores written as loops
    (`innergraph.backends.numba_rows`), which spares Numba its string formatting code.
    """
    with scan_rows_by_loop():
        (fn, key), referable = _referable_body(op.fgraph, lambda: _scan_funcify(op, node, **kwargs))
    converted = (fn, None if key is None else rows_key(key))
    if referable is None:
        return converted
    env = referable.fn.py_func.__globals__
    if env.get("scan_inner_func") is not referable.body:
        return converted
    # the globals are the loop's own: PyTensor builds them for this function alone
    env["scan_inner_func"] = by_reference(referable.body, referable.body_key, len(op.fgraph.inputs))
    return referable.fn, referenced_key(rows_key(referable.key))


apply_late(DispatchPatch(numba_funcify_and_cache_key, NativeScan, funcify_scan_by_reference))

_ofg_funcify = original(numba_compile_ops, "numba_funcify_OpFromGraph")


def funcify_ofg_by_reference(op: OpFromGraph, node: Any = None, ofg_memo: dict[Any, Converted] | None = None, **kwargs: Any) -> Converted:
    """PyTensor's Numba `OpFromGraph`, calling an inner graph of ``MIN_NODES`` nodes or more by reference.

    PyTensor's conversion of an `OpFromGraph` node is its inner graph's function, which
    every caller links and optimises again. Here that function is compiled once as its own
    unit, cached under its own key, and the node's function is a stub that calls it by
    reference (`innergraph.backends.numba_reference`), as `funcify_scan_by_reference` does
    for a loop's step. This is for the `OpFromGraph` nodes innergraph leaves to PyTensor
    (those it lifts into in-graph calls run innergraph's generated code, `caller_code`). A
    smaller graph, or one PyTensor converts otherwise (no key, code run in Python), keeps
    PyTensor's conversion.
    """
    if ofg_memo is not None and op in ofg_memo:
        return ofg_memo[op]
    converted, referable = _referable_body(op.fgraph, lambda: _ofg_funcify(op, node, ofg_memo=ofg_memo, **kwargs))
    if referable is None or referable.body is not referable.fn:
        return converted
    converted = (by_reference(referable.body, referable.body_key, len(op.fgraph.inputs)), referenced_key(referable.key))
    if ofg_memo is not None:
        ofg_memo[op] = converted
    return converted


apply_late(DispatchPatch(numba_funcify_and_cache_key, OpFromGraph, funcify_ofg_by_reference))
# PyTensor's conversion of a FunctionGraph converts each node through this module-level
# function: within one conversion, equal nodes of the outer graph convert once too.
apply_late(Patch(numba_basic, "numba_funcify_ensure_cache", convert_once))

_original_cache_key_for_constant = original(numba_basic, "cache_key_for_constant")


def cache_key_for_constant(data: Any) -> str:
    """PyTensor's cache key of a constant; for a folded `Body`, the key of its Numba code.

    PyTensor keys a constant by the hash of its pickle. A body's pickle is no function
    of its value: pickle records which equal objects are one object, and a body loaded
    from innergraph's store of rewritten graphs shares its strings, tuples and dtypes
    differently from the same body rewritten in the process, so its callers' functions
    were compiled again (design/rewritten-graphs.md, "Folded bodies"). A body is keyed
    instead by what its code is made of: `numba_body_code`'s key, composed, as
    PyTensor composes a function graph's, of its nodes' own cache keys, wiring and
    constants. A body with a node that has no cache key (vanilla caches no function
    holding such a node either) gets a key unique to it in this process: the function
    is compiled, never taken from or mistaken for another one in the disk cache.
    """
    if not isinstance(data, Body):
        return str(_original_cache_key_for_constant(data))
    key = numba_body_code(data).key  # converted once per body: its callers' conversions take the same code
    return f"body {key}" if key is not None else f"uncacheable body {uuid.uuid4().hex}"


apply_late(Patch(numba_basic, "cache_key_for_constant", cache_key_for_constant))


def _numba_dispatches() -> tuple[Any, ...]:
    from pytensor.link.numba.dispatch.basic import numba_funcify

    return (numba_funcify_and_cache_key, numba_funcify)


# The consumers this module implements run under Numba: said, not discovered from the
# linker's bytecode (`innergraph.core.dispatch`), so no Python version's bytecode can hide it.
register_conversion_dispatch(NumbaLinker, _numba_dispatches)


@register_funcify_default_op_cache_key(LinkArgument)
def _funcify_link_argument(op: LinkArgument, node: Any = None, **kwargs: Any) -> Any:
    """The identity: where the linker does not pass a `LinkArgument` (a loop body), its value is the constant's."""

    @numba_basic.numba_njit
    def link_argument(value: Any) -> Any:
        return value

    return link_argument


@numba_typify.register(Body)
def _typify_body(data: Body, **kwargs: Any) -> None:
    return None



def numba_body_code(body: Body, mutable: frozenset[int] = frozenset()) -> BodyCode:
    """The body's `BodyCode`: prepared and its nodes converted, once per `Body` and ``mutable`` (cached).

    ``mutable``: the params the code may overwrite (`prepared_body`).
    """

    def make() -> BodyCode:
        compile_count[(id(body), "numba")] += 1
        return body_code(prepared_body(body, "numba", mutable))

    # keyed by what else the code depends on: an interned body outlives a change of the default mode
    return body.cached(("numba", mutable, code_key(body)), make)


def jitted(
    name: str, params: Sequence[str], lines: Sequence[str], env: dict[str, Any], keys: Sequence[str | None]
) -> Converted:
    """``def name(*params): *lines``, jitted, keyed by its source and the keys of the code it inlines."""
    src = f"def {name}({', '.join(params)}):\n" + "".join(f"    {line}\n" for line in lines)
    # a module name in the globals: Numba pickles a cached function's environment by its
    # globals' __name__ and imports that module to load it; without one, no other process
    # could load the entry (design/numba-linking.md, "An environment Numba can load")
    fn = compile_numba_function_src(src, name, {**env, "__name__": __name__})
    key = None if None in keys else sha256(f"({src}, {tuple(keys)})".encode()).hexdigest()
    return numba_basic.numba_njit(fn), key


def _names(prefix: str, n: int) -> list[str]:
    return [f"{prefix}{i}" for i in range(n)]


def _returning(name: str, code: BodyCode, args: list[str], leading: Sequence[str] = ()) -> Converted:
    """A jitted ``name(*leading, *args)`` that computes the body inline and returns its outputs."""
    inline = code.render("b_", args)
    return jitted(name, [*leading, *args], [*inline.lines, f"return {inline.returned()}"], inline.env, [code.key])


def numba_body(body: Body) -> Converted:
    """The body as a jitted function of its params, and its cache key (cached).

    The consumers of this module inline a body's code instead (`numba_body_code`);
    this function is for consumers that need the body as a function value.
    """

    def make() -> Converted:
        code = numba_body_code(body)
        return _returning("innergraph_body", code, _names("a", code.n_params))

    return body.cached(("numba_function", code_key(body)), make)


@dataclass(frozen=True)
class ReferencedCode:
    """A body a generated function calls by reference: rendered as one call of a stub, not inline.

    Renders like `BodyCode` (``render(prefix, args)``), so a generated loop, call or
    conditional writes either. ``stub`` calls the body function, compiled once as its own
    unit (`innergraph.backends.numba_reference`); ``key`` says so (`referenced_key`).
    """

    n_params: int
    n_outputs: int
    stub: Any
    key: str

    def render(self, prefix: str, args: Sequence[str]) -> Rendering:
        """One assignment: the body's outputs, named ``<prefix>o<k>``, from a call of the stub on ``args``."""
        check_arguments(self.n_params, args)
        outputs = [f"{prefix}o{k}" for k in range(self.n_outputs)]
        target = outputs[0] if self.n_outputs == 1 else ", ".join(outputs)
        return Rendering([f"{target} = {prefix}ref({', '.join(args)})"], outputs, {f"{prefix}ref": self.stub})


def caller_code(body: Body, mutable: frozenset[int] = frozenset()) -> BodyCode | ReferencedCode:
    """What a generated function writes for ``body``: its code inline, or a call by reference.

    A body of `MIN_NODES` converted nodes or more that computes an array and whose code can
    be cached is called by reference, as a loop's step of that size is
    (``design/numba-linking.md``, "Bodies by reference"); it then gets no overwritable params
    (``mutable``): the body function copies what it writes. A smaller body, or one of scalar
    nodes only, is inlined, where the caller's optimiser pays.
    """
    code = numba_body_code(body, mutable)
    if not large_enough(len(code.functions), code.computes_arrays) or code.key is None:
        return code
    fn, key = numba_body(body)
    if key is None:
        return code

    def make() -> ReferencedCode:
        return ReferencedCode(code.n_params, len(code.outputs), by_reference(fn, key, code.n_params), referenced_key(key))

    return body.cached(("numba_reference", code_key(body)), make)


@register_funcify_and_cache_key(Scan)
def numba_funcify_scan(op: Scan, node: Any = None, **kwargs: Any) -> Converted:
    """Delegate to PyTensor's Numba Scan, its inner graph rewritten for Numba (`backend_native_scan`).

    The conversion is kept on the body, per op and outer input types (the in-place
    decisions depend on them) and Numba's fastmath setting.
    """
    from pytensor import config

    body = body_value(node.inputs[0])
    outer = node.inputs[1:]
    # Op equality ignores the mode and strict flags; the key holds the op, so its mode stays alive and its id cannot be reused.
    key = ("numba_scan", op, id(op.mode), op.strict, tuple(v.type for v in outer), bool(config.numba__fastmath))

    def convert() -> Converted:
        native = backend_native_scan(body, op, outer, NumbaLinker())
        compile_count[(id(body), "numba")] += 1
        return numba_funcify_and_cache_key(native, node=native.make_node(*outer), **kwargs)

    inner, inner_key = body.cached(key, convert)
    n_args = len(node.inputs) - 1
    args = _names("a", n_args)
    lines = [f"return inner({', '.join(args)})"]
    return jitted("innergraph_scan", ["function0", *args], lines, {"inner": inner}, [inner_key])
