"""A body compiled once as its own unit and called by reference under Numba.

PyTensor's Numba Scan calls its step body, the converted inner graph, as a jitted
function; its `OpFromGraph` is its inner graph's function; innergraph's generated loops,
calls and conditionals wrote their bodies' code inline. Numba links such a body's code
into its caller's LLVM module and optimises it again there, and the outer function, which
calls the caller, links and optimises it once more. The body is compiled in every process
whose caller is not in the disk cache: the body itself is never cached.

Here the body is compiled once, as its own unit, cached under its own key, and the caller
calls it through a pointer: no caller's module holds its code.

Terms
-----
body function
    The converted inner graph (PyTensor's ``scan_inner_func`` of a Scan, the function of an
    `OpFromGraph`'s graph, or innergraph's `innergraph.backends.numba.numba_body` of a
    body), registered with PyTensor's cache locator under innergraph's key of the graph
    (`BODY`): cached once per machine, shared by every caller and every model whose body
    is the same graph with the same types.
token
    A hash of the body function's key: what the caller's code names the body by. The
    code holds the token, never an address, so the caller stays cacheable.
stub
    The function the caller calls in place of the body: one line,
    ``return call_by_reference(TOKEN, (a0, ..., an))``.
call by reference
    `call_by_reference`, a Numba intrinsic. Its code keeps the body's address in a
    private global of the caller's module, filled on the first call by asking this
    process (`body_address`, called through Python's C API with the token and the
    argument types pickled into the module's constants, as Numba's object mode calls
    Python, without compiling an object-mode function), and calls the body's native
    function through it with Numba's own calling convention: arguments, returned
    values, reference counts and exceptions pass as they would in a linked call.

node by reference
    A node of the final function's graph (the function PyTensor's thunk calls) of a
    function with a loop, whose converted function is compiled once as its own unit
    (`NODE`) and called through a `reference_intrinsic`: an intrinsic of its own per
    token, whose call Numba writes into the final function's code, so no stub is compiled
    (`outer_node_by_reference`). The final function's module then holds its own code only,
    and compiling it optimises none of its nodes' code again.

A body of fewer than `MIN_NODES` nodes stays linked: there the caller's re-optimisation
costs little and inlining can pay (``design/numba-linking.md``, "Bodies by reference"); so
does a body of scalar nodes only (`computes_arrays`), whose work costs less than the call.
A node of the final function's graph goes by reference whatever its size, when it computes
an array: it runs once per call of the function, not once per step
(``design/numba-linking.md``, "The final function's nodes by reference").
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from hashlib import sha256
from typing import Any

from llvmlite import ir
from numba.core import cgutils, types, typing
from numba.core.registry import CPUDispatcher
from numba.extending import intrinsic
from pytensor import config
from pytensor.link.numba.cache import compile_numba_function_src
from pytensor.link.numba.dispatch import basic as numba_basic

from innergraph.backends.numba_once import cached_itself, direct_key, stable_closure

__all__ = [
    "BODY",
    "FORMAT",
    "MIN_NODES",
    "NODE",
    "OUTER_NODES",
    "body_address",
    "by_reference",
    "call_by_reference",
    "called_by_reference",
    "capture_body",
    "captured_bodies",
    "computes_arrays",
    "large_enough",
    "outer_node_by_reference",
    "outer_nodes",
    "reference_intrinsic",
    "referenced_key",
    "stable_types",
]

#: The suffix of a body function's own cache entry.
BODY = "_innergraph_body"

#: The suffix of the own cache entry of a node the final function calls by reference (`outer_node_by_reference`).
NODE = "_innergraph_node"

#: The suffix a caller's key gets when its body is called by reference (its code differs from PyTensor's).
REFERENCED = "_innergraph_by_reference"

#: The version of the code `call_by_reference` generates, raised when it changes: a caller compiled by an earlier
#: version (whose code a cached caller holds) is then never served to this one. 2: the stub is named
#: ``body_by_reference`` (calls and conditionals call bodies by reference too).
FORMAT = 2

#: The least number of nodes a body has to be called by reference (measured: ``design/numba-linking.md``).
MIN_NODES = 8

# token -> body function. Weak: a caller's stub holds its body function, so it lives as long as any caller can run.
_BODIES: weakref.WeakValueDictionary[str, Any] = weakref.WeakValueDictionary()

# token -> the intrinsic calling that body (`reference_intrinsic`); weak: a caller's conversion holds it, and it its body
_INTRINSICS: weakref.WeakValueDictionary[str, Any] = weakref.WeakValueDictionary()

# ids of the nodes of the final function's graph being converted (`outer_nodes`)
_OUTER: ContextVar[frozenset[int]] = ContextVar("innergraph_outer_nodes", default=frozenset())

#: Whether the final function calls its nodes by reference (`outer_node_by_reference`; read at each conversion).
OUTER_NODES = True

#: The most inputs a node called by reference has (its arguments pass as one tuple).
MAX_ARGUMENTS = 250

# id(inner graph) -> (body function, key), for the conversions of a Scan or an OpFromGraph under way
_CAPTURED: ContextVar[dict[int, tuple[Any, str | None]] | None] = ContextVar("innergraph_captured_bodies", default=None)


def called_by_reference(graph: Any) -> bool:
    """Whether ``graph``'s body is called by reference: `MIN_NODES` nodes or more, and some array work (`computes_arrays`)."""
    return large_enough(len(graph.apply_nodes), computes_arrays(graph.apply_nodes))


def computes_arrays(nodes: Iterable[Any]) -> bool:
    """Whether one of ``nodes`` computes an array (an output of one dimension or more).

    A body of scalar nodes only costs less than a call through a pointer: PyTensor's Scan
    over eight GARCH recursions (eight fused scalar ``Elemwise``) ran 20% slower per call
    with its step called by reference (``design/numba-linking.md``, "Scalar bodies stay
    linked"), so such a body stays linked, whatever its size.
    """
    return any(getattr(out.type, "ndim", 0) > 0 for node in nodes for out in node.outputs)


def large_enough(n_nodes: int, arrays: bool) -> bool:
    """Whether a body of ``n_nodes`` converted nodes is called by reference: `MIN_NODES` (read at each call) or more, and ``arrays`` (`computes_arrays`)."""
    return n_nodes >= MIN_NODES and arrays


@contextmanager
def captured_bodies() -> Iterator[dict[int, tuple[Any, str | None]]]:
    """Within the block, `capture_body` records each converted graph by id (one dict per block: nested loops nest)."""
    bodies: dict[int, tuple[Any, str | None]] = {}
    reset = _CAPTURED.set(bodies)
    try:
        yield bodies
    finally:
        _CAPTURED.reset(reset)


def capture_body(graph: Any, fn: Any, key: str | None) -> None:
    """Record ``graph``'s conversion for the innermost `captured_bodies` block, if any."""
    bodies = _CAPTURED.get()
    if bodies is not None:
        bodies[id(graph)] = (fn, key)


def _folded(body: Any, argtypes: tuple[Any, ...]) -> tuple[Any, tuple[Any, ...]]:
    """``body``'s Python signature, and ``argtypes`` as its native function takes them.

    Numba folds a call's argument types to the function's parameters as its caller's
    lowering does: the arguments of ``*args`` as one tuple, each parameter left out as an
    ``omitted`` default (``Dispatcher._compiler.fold_argument_types``).
    """
    pysig, folded = body._compiler.fold_argument_types(argtypes, {})
    return pysig, tuple(folded)


def _compiled(token: str, argtypes: tuple[Any, ...]) -> Any:
    """Numba's compile result of body ``token`` for ``argtypes``: compiled, or loaded from the cache, once."""
    body = _BODIES.get(token)
    if body is None:
        raise RuntimeError(
            f"innergraph: a compiled function calls the body {token} by reference, but no body of that token was converted "
            "in this process (a function compiled with innergraph loaded from Numba's cache without its conversion)"
        )
    _, folded = _folded(body, argtypes)
    body.compile(folded)
    return body.overloads[folded]


def body_address(token: str, argtypes: tuple[Any, ...]) -> int:
    """The address of the native function of body ``token`` for ``argtypes`` (`_compiled`)."""
    result = _compiled(token, argtypes)
    return int(result.library.get_pointer_to_function(result.fndesc.llvm_func_name))


def _fetch_address(context: Any, builder: Any, token: str, argtypes: tuple[Any, ...]) -> Any:
    """Code calling `body_address` under the GIL; on an exception, the caller returns it (as object mode would)."""
    pyapi = context.get_python_api(builder)
    gil = pyapi.gil_ensure()
    # pickled into the module's constants: a cached caller holds the token and the types, not an address
    function = pyapi.unserialize(pyapi.serialize_object(body_address))
    arguments = [pyapi.unserialize(pyapi.serialize_object(value)) for value in (token, argtypes)]
    result = pyapi.call_function_objargs(function, arguments)
    for obj in (function, *arguments):
        pyapi.decref(obj)
    with builder.if_then(cgutils.is_null(builder, result), likely=False):
        pyapi.gil_release(gil)
        context.call_conv.return_exc(builder)
    address = pyapi.long_as_voidptr(result)
    pyapi.decref(result)
    pyapi.gil_release(gil)
    return address


def _call_code(context: Any, builder: Any, token: str, argtypes: tuple[Any, ...], restype: Any, values: list[Any]) -> Any:
    """Code calling body ``token`` through the address kept in a private global of ``builder``'s module (module docstring)."""
    name = f"_innergraph_body_{token}_{sha256(str(argtypes).encode()).hexdigest()[:16]}"
    pointer = ir.PointerType(ir.IntType(8))
    slot = cgutils.add_global_variable(builder.module, pointer, name)
    slot.linkage = "private"
    slot.initializer = pointer(None)
    slot.align = 64
    loaded = builder.load_atomic(slot, "acquire", 64)
    address = cgutils.alloca_once_value(builder, loaded)
    with builder.if_then(builder.icmp_unsigned("==", loaded, pointer(None)), likely=False):
        fetched = builder.bitcast(_fetch_address(context, builder, token, argtypes), pointer)
        builder.store_atomic(fetched, slot, "release", 64)
        builder.store(fetched, address)
    pysig, folded = _folded(_BODIES[token], argtypes)
    if folded != argtypes:  # as Numba's lowering folds the arguments of a call
        values = typing.fold_arguments(
            pysig, values, {},
            lambda index, param, value: value,
            lambda index, param, default: context.get_constant_generic(builder, folded[index], default),
            lambda index, param, values: cgutils.make_anonymous_struct(builder, values),
        )
    function_type = context.call_conv.get_function_type(restype, folded)
    callee = builder.bitcast(builder.load(address), function_type.as_pointer())
    status, result = context.call_conv.call_function(builder, callee, restype, folded, values)
    with cgutils.if_unlikely(builder, status.is_error):
        context.call_conv.return_status_propagate(builder, status)
    return result


@intrinsic(prefer_literal=True)
def call_by_reference(typingctx: Any, token_literal: Any, arguments: Any) -> Any:
    """``body(*arguments)`` for the body registered as ``token``, called through a pointer (module docstring)."""
    token = token_literal.literal_value
    argtypes = tuple(arguments.types)
    restype = _compiled(token, argtypes).signature.return_type

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        values = cgutils.unpack_tuple(builder, args[1], len(argtypes))
        return _call_code(context, builder, token, argtypes, restype, values)

    return restype(token_literal, arguments), codegen


def reference_intrinsic(token: str) -> Any:
    """A Numba intrinsic calling body ``token`` by reference with the arguments it is given: no function of its own to compile.

    One per token and process: a caller names it as a global, as it would the body's
    dispatcher, and Numba writes the call into the caller's own code.
    """
    made = _INTRINSICS.get(token)
    if made is not None:
        return made

    def typer(typingctx: Any, *argtypes: Any) -> Any:
        restype = _compiled(token, argtypes).signature.return_type

        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            values = cgutils.unpack_tuple(builder, args[0], len(argtypes))
            return _call_code(context, builder, token, argtypes, restype, values)

        # Numba passes the arguments of a ``*args`` intrinsic as one tuple
        return restype(types.StarArgTuple.from_types(argtypes)), codegen

    typer.__name__ = f"by_reference_{token}"
    made = _INTRINSICS[token] = intrinsic(typer)
    return made


@contextmanager
def outer_nodes(nodes: Iterable[Any]) -> Iterator[None]:
    """Within the block, `outer_node_by_reference` calls ``nodes`` (the final function's graph's) by reference."""
    reset = _OUTER.set(frozenset(id(node) for node in nodes))
    try:
        yield
    finally:
        _OUTER.reset(reset)


def outer_node_by_reference(node: Any, converted: tuple[Any, str | None]) -> tuple[Any, str | None]:
    """``converted`` (a node's function and key), called by reference when ``node`` is a node of the final function's graph.

    Inside an `outer_nodes` block, a node of that graph whose function can be cached
    (a key, and a jitted function whose closure Numba keys alike in every process:
    `stable_closure`) and which computes an array (`computes_arrays`) is
    compiled once as its own unit and the final function calls it through a pointer
    (`reference_intrinsic`): the final function's LLVM module holds none of its code and
    is not optimised with it (``design/numba-linking.md``, "The final function's nodes by
    reference"). Every other node, and every node of a body, keeps ``converted``.
    """
    fn, key = converted
    if not OUTER_NODES or key is None or id(node) not in _OUTER.get() or type(fn) is not CPUDispatcher:
        return converted
    if len(node.inputs) > MAX_ARGUMENTS or not computes_arrays([node]) or not stable_closure(fn.py_func):
        return converted  # too many arguments, numbers only, or a unit that could not be cached: linked
    # PyTensor's key of a node's conversion need not name its input types, which its code reads (a Scan's storage)
    input_types = stable_types(v.type for v in node.inputs)
    if input_types is None:  # no description that another process repeats: nothing to name a unit by
        return converted
    token, body = _registered(fn, key, NODE, input_types)
    made = reference_intrinsic(token)
    made.body = body  # the body lives as long as the intrinsic, which a caller's conversion names
    # the caller's code names the token: its key holds it, so a cached caller never names a token this process lacks
    return made, referenced_key(f"{key}{NODE}_{token}")


def stable_types(types_: Iterable[Any]) -> str | None:
    """A description of PyTensor types that every process writes alike, or None where one has none.

    A type's ``repr`` names its class and parameters (``TensorType(float64, shape=(8,
    None))``), except for the types that keep ``object``'s, which is an address
    (``NoneTypeT``, the ``None`` of a ``SpecifyShape`` of an unknown length, and
    ``SliceType``): those are named by class, when they hold no attributes of their own.
    A description holding an address would give each process another token, so the
    final function naming it would miss the cache in every new process.
    """
    described = []
    for t in types_:
        cls = type(t)
        if cls.__repr__ is not object.__repr__:
            text = repr(t)
        elif getattr(t, "__dict__", None) == {}:
            text = f"{cls.__module__}.{cls.__qualname__}"
        else:
            return None
        if " at 0x" in text:  # a parameter printed as an address
            return None
        described.append(text)
    return f"({', '.join(described)})"


def _registered(fn: Any, key: str, kind: str = BODY, input_types: str = "") -> tuple[str, Any]:
    """The token of body ``fn`` (keyed ``key``, cached as ``kind``) and its body function, registered for `body_address`.

    The body function is ``fn`` compiled from the disk cache under its own key, or ``fn``
    where it cannot be cached. ``input_types`` joins the token where the code of ``fn``
    depends on more than ``key`` says.
    """
    token = sha256(f"{direct_key(key, kind)}{input_types}".encode()).hexdigest()[:32]
    body = _BODIES.get(token)
    if body is None:
        itself = cached_itself(fn, key, kind) if config.numba__cache else None
        body = _BODIES[token] = fn if itself is None else itself
    return token, body


def by_reference(fn: Any, key: str, n_params: int) -> Any:
    """A stub of ``n_params`` parameters that calls body ``fn`` (keyed ``key``) by reference; registers the body."""
    token, body = _registered(fn, key)
    params = [f"a{i}" for i in range(n_params)]
    packed = f"({', '.join(params)}{',' if n_params == 1 else ''})"
    src = f"def body_by_reference({', '.join(params)}):\n    return call_by_reference(TOKEN, {packed})\n"
    env = {"call_by_reference": call_by_reference, "TOKEN": token, "BODY": body, "__name__": __name__}
    stub = compile_numba_function_src(src, "body_by_reference", env)
    return numba_basic.numba_njit(stub)


def referenced_key(key: str) -> str:
    """The key of a caller whose body is called by reference, from its key with the body linked."""
    return sha256(f"{key}{REFERENCED}_format{FORMAT}".encode()).hexdigest()
