"""A body as straight-line Python source that a consumer's Numba function inlines.

Terms
-----
prepared body
    The body's private `FunctionGraph` after the default mode's late passes (the
    in-place decisions, taken on the body alone), with nested consumers folded and
    outputs copied where they alias a param or each other: what PyTensor does to
    an outer graph before it converts it.
body code (`BodyCode`)
    The prepared body's nodes, each converted by PyTensor's own Numba dispatch
    (`numba_funcify_ensure_cache`, exactly as PyTensor's `fgraph_to_python` converts
    the nodes of a function), and the order and wiring of their calls. Made once
    per `Body`.
rendering
    The body code written as assignments under a name prefix, with the consumer's
    own argument names in place of the params (`BodyCode.render`). A lazy
    conditional renders both branches into one function, one under ``if`` and one
    under ``else``; a call renders its body into its own function. Neither needs a
    function of the body in between, so a consumer costs one generated function,
    not one per body plus one to dispatch to them.
conversion
    One Numba conversion of an outer function's graph (`one_conversion`). Within
    it, nodes of different bodies that apply an equal Op to inputs of the same
    types (and the same constants) are converted once: the conversion reads
    nothing else of a node, which is also what PyTensor's own cache keys assume.
    The late passes are looked up once per conversion too.

The cache key of a body code combines its nodes' keys with where they read their
inputs, as PyTensor keys a converted `FunctionGraph`, so Numba's on-disk cache can
never confuse two different bodies.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from hashlib import sha256
from typing import Any

from pytensor.compile.aliasing import add_supervisor_to_fgraph, insert_deepcopy
from pytensor.compile.io import In, Out
from pytensor.graph.basic import Apply, Constant, Variable
from pytensor.graph.fg import FunctionGraph
from pytensor.link.numba.dispatch.basic import cache_key_for_constant, numba_typify

from innergraph.backends.numba_once import compiled_once
from innergraph.backends.numba_reference import computes_arrays, outer_node_by_reference
from innergraph.core.errors import FreeVariableError
from innergraph.core.fold import fold_inner_graphs
from innergraph.core.instantiate import is_large_constant, private_fgraph
from innergraph.protocol.runtime import body_rewriter, skips_pipeline_passes
from innergraph.rewriting.tracks import skipping_untracked
from innergraph.core.types import Body

# The conversion of a node `convert_once` shares: PyTensor's, with the converted function cached itself
numba_funcify_ensure_cache = compiled_once

__all__ = [
    "BodyCode",
    "Converted",
    "Rendering",
    "aliasing",
    "body_code",
    "check_arguments",
    "convert_once",
    "code_key",
    "one_conversion",
    "prepared_body",
]

#: A slot names where a value lives: ``p<i>`` a param, ``c<k>`` a constant, ``v<j>`` a node output.
Slot = str

#: What PyTensor's conversion of a node gives: the jitted function and its cache key.
Converted = tuple[Callable[..., Any], str | None]


@dataclass
class _Conversion:
    """What bodies share within one conversion: converted nodes, and their late passes per kind of body."""

    nodes: dict[tuple[Any, ...], Converted] = field(default_factory=dict)
    late_passes: dict[tuple[str, bool], Any] = field(default_factory=dict)
    outer_nodes: bool = False  # whether `convert_once` shares the outer graph's equal nodes too


_current: ContextVar[_Conversion | None] = ContextVar("innergraph_numba_conversion", default=None)


@contextmanager
def one_conversion(outer_nodes: bool = False) -> Iterator[None]:
    """A conversion: within the block, bodies share the conversion of equal nodes and their late passes.

    `body_code` converts equal nodes of different bodies once, and `prepared_body`
    looks up the late passes once per linker and kind of body (the rewrite database
    does not change while a function is converted). With ``outer_nodes``,
    `convert_once` shares the conversion of equal nodes outside bodies too. Nested
    blocks belong to the outermost one.
    """
    if _current.get() is not None:
        yield
        return
    token = _current.set(_Conversion(outer_nodes=outer_nodes))
    try:
        yield
    finally:
        _current.reset(token)


def _convert(node: Apply, storage_map: dict[Variable, list[Any]], constant_keys: dict[Variable, str]) -> Converted:
    """PyTensor's Numba conversion of ``node``, shared with equal nodes in the current conversion."""
    conversion = _current.get()
    if conversion is None:
        return numba_funcify_ensure_cache(node.op, node=node, storage_map=storage_map)
    signature = (
        node.op,
        aliasing(node),
        tuple(v.type for v in node.inputs),
        tuple(v.type for v in node.outputs),
        tuple(constant_keys.get(v) for v in node.inputs),
    )
    converted = conversion.nodes.get(signature)
    if converted is None:
        converted = numba_funcify_ensure_cache(node.op, node=node, storage_map=storage_map)
        conversion.nodes[signature] = converted
    return converted


#: What ``fgraph_to_python`` and PyTensor's conversion of a graph hand every node's conversion
#: about the graph being converted (its storage lists, its name generator, the memo of its
#: `OpFromGraph` conversions): no node's conversion result depends on them.
_GRAPH_WIDE = frozenset({"input_storage", "output_storage", "unique_name", "storage_map", "ofg_memo"})


def convert_once(op: Any, node: Apply | None = None, *args: Any, **kwargs: Any) -> Converted:
    """PyTensor's ``numba_funcify_ensure_cache`` of a node of any graph, once per equal node in a conversion (`_convert_shared`).

    A node of the final function's graph may then be called by reference
    (`innergraph.backends.numba_reference.outer_node_by_reference`); what equal nodes
    share is the conversion, never the reference.
    """
    converted = _convert_shared(op, node, *args, **kwargs)
    return converted if node is None else outer_node_by_reference(node, converted)


def _convert_shared(op: Any, node: Apply | None = None, *args: Any, **kwargs: Any) -> Converted:
    """PyTensor's ``numba_funcify_ensure_cache`` of a node of any graph, once per equal node in a conversion.

    It takes every call the function it replaces takes (``(op, node=None, **kwargs)``
    on PyTensor 3.3.8, ``(op, *args, **kwargs)`` on 3.3.6), so a caller passing the
    node by position gets what PyTensor gives; a call with more positional arguments
    is PyTensor's, unshared. What
    `body_code` does for the nodes of bodies, for the nodes PyTensor's own
    ``fgraph_to_python`` converts (the outer function's, a native Scan's inner
    graph's): K loops over one body leave K equal Scans and K equal nodes around them
    (a sequence's first rows, its length), and a push-out out of a shared body K equal
    calls. Nodes are equal when they apply an equal Op with the same ``destroy_map``
    and ``view_map`` to inputs of equal types, the same constants (`_constant_key`) and
    the same inputs repeated (`aliasing`),
    with the same extra arguments besides the graph-wide ones (`_GRAPH_WIDE`). A
    native Scan is such a node too: since PyTensor 3.3 its conversion reads only its
    (frozen, already rewritten) inner graph, its layout, its maps and the node's
    types. Outside a conversion of a graph innergraph's pipeline rewrote
    (``one_conversion(outer_nodes=True)``: a graph compiled without innergraph's
    rewrites converts exactly as PyTensor converts it), or when that signature is not
    hashable, a node is converted as PyTensor converts it.
    """
    conversion = _current.get()
    if args:  # more positional arguments than the node: PyTensor's call, unshared
        return numba_funcify_ensure_cache(op, node, *args, **kwargs)
    if conversion is None or not conversion.outer_nodes or node is None:
        return numba_funcify_ensure_cache(op, node=node, **kwargs)  # by name, as PyTensor passes it on
    try:
        signature = (
            op,
            tuple((k, tuple(v)) for k, v in sorted(op.destroy_map.items())),
            tuple((k, tuple(v)) for k, v in sorted(op.view_map.items())),
            aliasing(node),
            tuple(v.type for v in node.inputs),
            tuple(v.type for v in node.outputs),
            tuple(_constant_key(v) for v in node.inputs),  # equal values
            tuple(sorted((k, v) for k, v in kwargs.items() if k not in _GRAPH_WIDE)),
        )
        converted = conversion.nodes.get(signature)
    except TypeError:  # an unhashable extra argument: convert as PyTensor does
        return numba_funcify_ensure_cache(op, node=node, **kwargs)
    if converted is None:
        converted = numba_funcify_ensure_cache(op, node=node, **kwargs)
        conversion.nodes[signature] = converted
    return converted


def aliasing(node: Apply) -> tuple[int, ...]:
    """Which inputs of ``node`` are one variable: per input, the position of its first occurrence.

    A conversion may read it: innergraph's generated consumers find a param's argument at
    the first input that is that variable (`innergraph.backends.numba_generated._wiring`),
    so ``Call(body, a, a)`` compiles to code with one argument read twice. Two nodes that
    differ only in it are not equal: sharing the code of ``Call(body, ones, ones)`` with
    ``Call(body, x, ones)`` computed ``body(x, x)``.
    """
    first: dict[Variable, int] = {}
    return tuple(first.setdefault(v, i) for i, v in enumerate(node.inputs))


def _constant_key(var: Variable) -> Any:
    """What `convert_once` compares of a node input: a small constant's value, a large constant itself, else nothing.

    A large constant (`innergraph.core.instantiate.LARGE_CONSTANT`) is compared by
    identity: hashing its value (PyTensor's constant signature sums the array and
    masks its NaNs, anew for every signature) cost about 0.15 ms per 500 x 500
    constant and node, and after merging equal constants of a graph are one
    variable anyway. Two nodes reading equal large constants that are different
    variables are converted separately, as PyTensor converts them.
    """
    if not isinstance(var, Constant):
        return None
    return ("same", var) if is_large_constant(var) else var.signature()


def _late_passes(body: Body, linker: str) -> Any:
    """`body_rewriter`, walking passes guarded by their tracks; once per kind of body in a conversion.

    The kinds are `body_rewriter`'s own (`skips_pipeline_passes`): a rewritten body with
    a hidden fold gets the whole rewriter whatever body came first.
    """
    return _rewriters(body, linker)[1]


def code_key(body: Body, linker: str = "numba") -> tuple[Any, bool]:
    """What besides ``body`` its code depends on, for cache keys: the late passes' rewriter, Numba's fastmath.

    The rewriter is `body_rewriter`'s object, the same while the default mode, the
    registered rewrites and the kind of body stay the same
    (`innergraph.core.compat.queried_once`); ``config.numba__fastmath`` is read by every
    node's conversion (PyTensor keys its own cache with it too). A body interned
    across compilations (`innergraph.core.interning`) can meet a change of either.
    """
    from pytensor import config

    return _rewriters(body, linker)[0], bool(config.numba__fastmath)


def _rewriters(body: Body, linker: str) -> tuple[Any, Any]:
    conversion = _current.get()
    if conversion is None:
        rewriter = body_rewriter(body, linker)
        return rewriter, skipping_untracked(rewriter)
    key = (linker, skips_pipeline_passes(body))
    found = conversion.late_passes.get(key)
    if found is None:
        rewriter = body_rewriter(body, linker)
        found = conversion.late_passes[key] = (rewriter, skipping_untracked(rewriter))
    return found


@dataclass(frozen=True)
class Rendering:
    """A body code written out: ``lines`` compute the ``outputs`` expressions; ``env`` is what they read."""

    lines: list[str]
    outputs: list[str]
    env: dict[str, Any]

    def returned(self) -> str:
        """The expression a function returning the body's outputs returns (a bare value for one output)."""
        return self.outputs[0] if len(self.outputs) == 1 else f"({', '.join(self.outputs)},)"


def check_arguments(n_params: int, args: Sequence[str]) -> None:
    """Refuse a rendering of a body of ``n_params`` params on another number of arguments."""
    if len(args) != n_params:
        raise ValueError(f"body code takes {n_params} arguments, got {len(args)}: {list(args)}")


@dataclass(frozen=True)
class BodyCode:
    """A prepared body's converted nodes and how their calls are wired.

    Attributes
    ----------
    n_params
        How many params the body reads (the arguments a rendering takes).
    functions
        The jitted function of each node, in execution order.
    steps
        Per node: the slots its outputs are assigned to and the slots it reads.
    constants
        The typified value of each constant slot ``c<k>``.
    outputs
        The slot of each body output.
    key
        Numba cache key of the code, or ``None`` when a node cannot be cached.
    computes_arrays
        Whether a node computes an array (`innergraph.backends.numba_reference.computes_arrays`).
    """

    n_params: int
    functions: tuple[Callable[..., Any], ...]
    steps: tuple[tuple[tuple[Slot, ...], tuple[Slot, ...]], ...]
    constants: tuple[Any, ...]
    outputs: tuple[Slot, ...]
    key: str | None
    computes_arrays: bool

    def render(self, prefix: str, args: Sequence[str]) -> Rendering:
        """Assignments computing the body from the variables named ``args``, local names starting with ``prefix``."""
        check_arguments(self.n_params, args)

        def name(slot: Slot) -> str:
            return args[int(slot[1:])] if slot[0] == "p" else prefix + slot

        lines = [
            f"{', '.join(map(name, outs))} = {prefix}f{i}({', '.join(map(name, ins))})"
            for i, (outs, ins) in enumerate(self.steps)
        ]
        env = {f"{prefix}f{i}": fn for i, fn in enumerate(self.functions)}
        env.update((f"{prefix}c{k}", value) for k, value in enumerate(self.constants))
        return Rendering(lines, [name(slot) for slot in self.outputs], env)


def prepared_body(body: Body, linker: str = "numba", mutable: frozenset[int] = frozenset()) -> FunctionGraph:
    """A private `FunctionGraph` of ``body`` prepared as PyTensor prepares a function's graph.

    The params are borrowed and immutable (the supervisor keeps in-place rewrites
    off them) except those in ``mutable``, which the body may overwrite (a loop's
    own copy of a carried value); the mode's rewriter for ``linker`` runs
    (`body_rewriter`; its walking passes only where the body has a node they track), nested
    consumers are folded, and outputs that alias a param or another output are copied.
    """
    fgraph = private_fgraph(body)
    input_specs = [In(x, borrow=True, mutable=i in mutable) for i, x in enumerate(fgraph.inputs)]
    add_supervisor_to_fgraph(fgraph=fgraph, input_specs=input_specs, accept_inplace=True)
    _late_passes(body, linker).rewrite(fgraph)
    fold_inner_graphs(fgraph)
    insert_deepcopy(fgraph, wrapped_inputs=input_specs, wrapped_outputs=[Out(o, borrow=False) for o in fgraph.outputs])
    return fgraph


def body_code(fgraph: FunctionGraph) -> BodyCode:
    """Convert the nodes of a prepared body (`prepared_body`) and record their wiring."""
    slots: dict[Variable, Slot] = {p: f"p{i}" for i, p in enumerate(fgraph.inputs)}
    storage_map: dict[Variable, list[Any]] = {}
    constant_keys: dict[Variable, str] = {}
    constants: list[Any] = []
    keys: list[Any] = []

    def slot(var: Variable) -> Slot:
        found = slots.get(var)
        if found is not None:
            return found
        if not isinstance(var, Constant):  # a closed body reads nothing else
            raise FreeVariableError(f"Numba body code: {var} is neither a param, a constant nor computed in the body")
        storage_map[var] = [var.data]
        found = slots[var] = f"c{len(constants)}"
        constants.append(numba_typify(var.data, variable=var, storage=storage_map[var]))
        constant_keys[var] = cache_key_for_constant(var.data)
        keys.append(("constant", constant_keys[var]))
        return found

    functions: list[Callable[..., Any]] = []
    steps: list[tuple[tuple[Slot, ...], tuple[Slot, ...]]] = []
    cacheable = True
    for node in fgraph.toposort():
        ins = tuple(slot(v) for v in node.inputs)
        fn, key = _convert(node, storage_map, constant_keys)
        cacheable = cacheable and key is not None
        outs = tuple(f"v{len(slots) + j}" for j in range(len(node.outputs)))
        slots.update(zip(node.outputs, outs, strict=True))
        functions.append(fn)
        steps.append((outs, ins))
        keys.append((outs, ins, key))
    outputs = tuple(slot(o) for o in fgraph.outputs)
    key = sha256(f"(BodyCode, {len(fgraph.inputs)}, {keys}, {outputs})".encode()).hexdigest() if cacheable else None
    arrays = computes_arrays(fgraph.apply_nodes)
    return BodyCode(len(fgraph.inputs), tuple(functions), tuple(steps), tuple(constants), outputs, key, arrays)
