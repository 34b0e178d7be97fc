"""Linking under Numba: a compiled function's code does not depend on the values of its constants.

PyTensor's Numba linker bakes every constant of a function's graph into the code it
compiles, and keys Numba's on-disk cache by those values. A PyMC user who changes one
prior's scale, or the observed data, gets a new key, so Numba compiles the function
again, and in doing so links the code of every function it calls (all of them from the
cache) into one LLVM module and optimises it again: 15-19 s on a state-space model whose
loops did not change (``design/benchmarks.md``, "Where Numba's time goes").

This module patches `NumbaLinker` so that the values stay out of the code:

outlined constant
    A constant of floating-point (or complex) dtype that the linked graph reads
    (`outlinable`). It becomes an extra parameter of the compiled function, and its
    value an extra argument the function is called with on every call: the code and
    the cache key depend on its type only. The constants kept baked are integers and
    booleans (indices, shapes, axes, counts: they decide code paths and Numba
    specialises on them), a constant that is itself an output of the function, and
    the constants inside loop bodies (the Scan's inner function is compiled as a
    unit; a body changes only when the model's loop does).
lifted scalar constant
    A floating-point constant inside the scalar graph of a fused elementwise node
    (``Elemwise(Composite)``, or a ``Composite`` on scalars): PyTensor's fusion
    moves the prior's numbers there (``-0.5 / sigma**2`` folded into one constant).
    `lift_scalar_constants` makes it an input of a new ``Composite`` and the node
    reads it as a broadcastable tensor constant, which is then outlined.
one compilation of the outer function
    PyTensor compiles a function's converted graph, then a wrapper that calls it (the
    final function, with its CPython entry point), and LLVM optimises the whole graph
    in both. `jit_compile` compiles the converted graph itself as the final function,
    cached under its own key, so its code is optimised once.

A graph without a loop keeps its numbers in its code, as vanilla compiles it (reading an
argument costs about 1 us per call, which a loop-free model's cheap recompile does not
repay: `innergraph.rewriting.link_arguments.has_loop`); it is compiled once all the same.

Nothing the user built changes: the linker converts a clone of its graph; the
function's inputs, outputs and storage are PyTensor's. The rule is by type, not by
value, so a changed value never changes the code (a value-based rule, such as baking
``1.0`` and outlining ``1.5``, would change it exactly when an edit crosses the line).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
from numba.core.registry import CPUDispatcher
from pytensor import config
from pytensor.graph.basic import Apply, Constant, Variable, clone_get_equiv
from pytensor.graph.traversal import io_toposort
from pytensor.graph.fg import FunctionGraph
from pytensor.link.numba.cache import CACHED_SRC_FUNCTIONS, compile_numba_function_src
from pytensor.link.numba.dispatch import basic as numba_basic
from pytensor.link.numba.dispatch.basic import numba_funcify_and_cache_key, numba_typify, register_funcify_and_cache_key
from pytensor.link.numba.linker import NumbaLinker
from pytensor.scalar.basic import Composite, ScalarConstant, ScalarType
from pytensor.tensor.elemwise import Elemwise
from pytensor.tensor.type import TensorType
from pytensor.tensor.variable import TensorConstant, TensorVariable

from innergraph.backends.numba_once import direct_key, guarded, named_stably
from innergraph.backends.numba_reference import outer_nodes
from innergraph.core.hooks import Patch, apply_late, installed, original
from innergraph.ops.link_argument import LinkArgument, PoolRead
from innergraph.rewriting.lift import mark_lifted, was_lifted
from innergraph.rewriting.link_arguments import has_loop, outlinable_dtype

__all__ = [
    "Outlined",
    "create_thunk_inputs",
    "fgraph_convert",
    "jit_compile",
    "lift_scalar_constants",
    "outlinable",
    "outline_constants_for_link",
]

_original_fgraph_convert = original(NumbaLinker, "fgraph_convert")
_original_create_thunk_inputs = original(NumbaLinker, "create_thunk_inputs")
_original_jit_compile = original(NumbaLinker, "jit_compile")

#: The suffix of the key a compiled function's final dispatcher is cached under (`direct_key`).
FINAL = "_innergraph_outlined_final"

#: The attribute of a linker that holds the values of its outlined constants (`fgraph_convert` sets it).
_VALUES = "innergraph_outlined_values"


def outlinable(variable: Variable, outputs: Sequence[Variable] = ()) -> bool:
    """Whether the linker passes ``variable`` as an argument rather than baking it in (module docstring)."""
    if not isinstance(variable, Constant) or any(variable is out for out in outputs):
        return False
    return isinstance(variable.type, TensorType | ScalarType) and outlinable_dtype(variable.type.dtype)


def _scalar_constants(composite: Composite) -> list[ScalarConstant]:
    """The float constants a ``Composite``'s scalar graph reads, in the order its nodes read them."""
    found: list[ScalarConstant] = []
    for node in composite.fgraph.toposort():
        for inp in node.inputs:
            if isinstance(inp, ScalarConstant) and outlinable_dtype(inp.type.dtype) and not any(inp is f for f in found):
                found.append(inp)
    return found


def _without_constants(composite: Composite, constants: list[ScalarConstant]) -> Composite:
    """``composite`` with ``constants`` as its last inputs."""
    inputs = [inp.type() for inp in composite.inputs]
    holes = [c.type() for c in constants]
    memo: dict[Variable, Variable] = dict(zip([*composite.inputs, *constants], inputs + holes, strict=True))
    for node in composite.fgraph.toposort():  # a frozen graph: applied anew, not cloned
        new = node.op.make_node(*(memo.get(i, i) for i in node.inputs))
        memo.update(zip(node.outputs, new.outputs, strict=True))
    return Composite(inputs + holes, [memo.get(o, o) for o in composite.outputs], name=composite.name)


def _lifted_node(node: Apply) -> Apply | None:
    """``node`` reading its scalar graph's float constants as inputs, or None if it has none."""
    elemwise = isinstance(node.op, Elemwise)
    composite = node.op.scalar_op if elemwise else node.op
    if not isinstance(composite, Composite):
        return None
    constants = _scalar_constants(composite)
    if not constants:
        return None
    op = _without_constants(composite, constants)
    if not elemwise:
        return op.make_node(*node.inputs, *(ScalarConstant(c.type, c.data) for c in constants))
    ndim = node.outputs[0].type.ndim
    tensors = [
        TensorConstant(TensorType(c.type.dtype, shape=(1,) * ndim), np.asarray(c.data, dtype=c.type.dtype).reshape((1,) * ndim))
        for c in constants
    ]
    return Elemwise(op, inplace_pattern=node.op.inplace_pattern).make_node(*node.inputs, *tensors)


def lift_scalar_constants(fgraph: FunctionGraph, order: list[Apply]) -> list[Apply]:
    """Replace, in ``fgraph`` (a private clone), each fused node's float constants by inputs; ``order`` updated."""
    replaced: dict[Apply, Apply] = {}
    for node in list(order):
        new = _lifted_node(node)
        if new is None:
            continue
        fgraph.replace_all(list(zip(node.outputs, new.outputs, strict=True)), reason="innergraph_lift_scalar_constants", import_missing=True)
        replaced[node] = new
    return [replaced.get(node, node) for node in order]


@dataclass
class Outlined:
    """A private clone of a linker's graph whose outlinable constants are inputs after the original ones.

    ``values``: the arguments for those inputs (as PyTensor would have baked them,
    `numba_typify`); ``order`` and ``storage_map``: the linker's, for the clone.
    """

    fgraph: FunctionGraph
    order: list[Apply]
    storage_map: dict[Variable, list[Any]]
    values: list[Any]


def _without_link_arguments(fgraph: FunctionGraph, order: list[Apply]) -> list[Apply]:
    """Each `LinkArgument` of ``fgraph`` replaced by its constant (which is then outlined); ``order`` without them."""
    kept = []
    for node in order:
        if isinstance(node.op, LinkArgument):
            fgraph.replace(node.outputs[0], node.inputs[0], reason="innergraph_outline_for_link", import_missing=True)
        else:
            kept.append(node)
    return kept


def _pooled(constant: Constant) -> bool:
    """Whether ``constant`` is one number, which goes into its dtype's pool (`outline_constants_for_link`)."""
    return bool(np.asarray(constant.data).size == 1)


def _read(pool: TensorVariable, start: int, constant: Constant) -> Variable:
    """The graph that reads the number ``constant`` from ``pool`` at ``start``: a scalar (`PoolRead`) or a view, nothing allocated per call."""
    if isinstance(constant.type, ScalarType):
        return PoolRead().make_node(pool, ScalarConstant(ScalarType("int64"), np.int64(start))).outputs[0]
    part = pool[start : start + 1]
    ndim = len(np.shape(constant.data))
    return part.dimshuffle(["x"] * (ndim - 1) + [0] if ndim else [])


def outline_constants_for_link(fgraph: FunctionGraph, order: Sequence[Apply], storage_map: dict[Variable, list[Any]]) -> Outlined:
    """Clone ``fgraph``, lift the fused nodes' float constants and turn every use of an outlinable constant into an argument.

    Every use: a constant two nodes read is two arguments, so that the code does not
    depend on which numbers of a graph are equal (merged into one constant). The single
    numbers of one dtype (scalars, 0-d and ``(1, ..., 1)`` tensors) are copied into that dtype's *pool*, one vector argument (an argument costs 0.1-0.4 us
    per call in Numba's dispatcher, and a PyMC model has dozens of numbers), and read
    from it by one `PoolRead` where a scalar is read (`link_float_constants` makes the numbers
    fused loops read scalars), as views (a slice, dimshuffled) where an array is. A larger constant is an argument of its
    own: passed as the array it is, it keeps its C layout, which a view of a pool would
    lose (Numba types a slice's reshape as of any layout, and a dot product of such
    arrays in a Kalman filter's loop ran about 3x slower in one run). The pools' reads come first in the
    returned order, the linker's order follows (it holds the in-place decisions).
    """
    equiv: dict[Any, Any] = clone_get_equiv(fgraph.inputs, fgraph.outputs, copy_inputs=True, copy_orphans=True)
    clone = FunctionGraph([equiv[i] for i in fgraph.inputs], [equiv[o] for o in fgraph.outputs], clone=False)
    if was_lifted(fgraph):
        mark_lifted(clone)
    new_order = _without_link_arguments(clone, [equiv[n] for n in order])
    new_order = lift_scalar_constants(clone, new_order)
    # every use its own argument (a pool slot, or an array argument): which numbers of a graph are
    # equal, and so one merged constant, must not be in the code (`LinkArgument.use`)
    uses = [(node, i, inp) for node in new_order for i, inp in enumerate(node.inputs)
            if isinstance(inp, Constant) and outlinable(inp, clone.outputs)]
    pools: dict[str, list[tuple[Apply, int, Constant]]] = {}
    values: list[Any] = []
    for node, i, c in uses:
        if _pooled(c):
            pools.setdefault(c.type.dtype, []).append((node, i, c))
            continue
        param = c.type()
        param.name = c.name
        clone.add_input(param)
        clone.change_node_input(node, i, param, reason="innergraph_outline_for_link")
        values.append(numba_typify(c.data, variable=c))
    reads: list[Apply] = []
    for dtype, group in pools.items():
        pool: TensorVariable = TensorType(dtype, shape=(len(group),))(name=f"outlined_{dtype}")
        clone.add_input(pool)
        values.append(np.array([np.asarray(c.data).item() for _, _, c in group], dtype=dtype))
        for start, (node, i, c) in enumerate(group):
            read = _read(pool, start, c)
            clone.change_node_input(node, i, read, reason="innergraph_outline_for_link", import_missing=True)
            reads.extend(n for n in io_toposort([pool], [read]) if n not in reads)
    storage = {equiv[v]: cell for v, cell in storage_map.items() if v in equiv and not isinstance(v, Constant)}
    return Outlined(clone, reads + new_order, storage, values)


@register_funcify_and_cache_key(PoolRead)
def numba_funcify_PoolRead(op: PoolRead, node: Apply | None = None, **kwargs: Any) -> tuple[Any, str]:
    """One number of a pool: ``pool[k]``, one compiled function for every position."""

    @numba_basic.numba_njit
    def pool_read(pool: Any, k: Any) -> Any:
        return pool[k]

    return pool_read, "innergraph.PoolRead.1"


def fgraph_convert(self: NumbaLinker, fgraph: FunctionGraph, **kwargs: Any) -> Any:
    """``NumbaLinker.fgraph_convert`` converting the outlined clone (module docstring); PyTensor's when not installed."""
    if not installed() or not isinstance(fgraph, FunctionGraph):
        return _original_fgraph_convert(self, fgraph, **kwargs)
    if not has_loop(fgraph):  # as vanilla converts it (`innergraph.rewriting.link_arguments`), compiled once
        setattr(self, _VALUES, [])
        return numba_funcify_and_cache_key(fgraph, **kwargs)
    order = kwargs.pop("order", None) or fgraph.toposort()
    outlined = outline_constants_for_link(fgraph, order, kwargs.pop("storage_map", None) or {})
    setattr(self, _VALUES, outlined.values)
    with outer_nodes(outlined.fgraph.apply_nodes):
        return numba_funcify_and_cache_key(outlined.fgraph, order=outlined.order, storage_map=outlined.storage_map, **kwargs)


def create_thunk_inputs(self: NumbaLinker, storage_map: dict[Variable, list[Any]]) -> list[Any]:
    """PyTensor's thunk inputs, then one cell per outlined constant holding its value."""
    cells = _original_create_thunk_inputs(self, storage_map)
    return [*cells, *([value] for value in getattr(self, _VALUES, ()))]


def jit_compile(self: NumbaLinker, fn_and_cache: tuple[Any, str | None]) -> Callable[..., Any]:
    """The converted graph compiled once, as the final function, cached under its own key.

    Only for what `fgraph_convert` returned (the converted graph itself); PyTensor's
    otherwise.
    """
    if not hasattr(self, _VALUES):
        return _original_jit_compile(self, fn_and_cache)
    fn, key = fn_and_cache
    if key is None or not config.numba__cache:  # PyTensor's own rule: no key or caching off, no cache
        final = numba_basic.numba_njit(fn.py_func, final_function=True)
    else:
        py_func = named_stably(fn.py_func)
        CACHED_SRC_FUNCTIONS[py_func] = direct_key(key, FINAL)
        final = guarded(numba_basic.numba_njit(py_func, final_function=True))
    values = getattr(self, _VALUES)
    graph = cast(FunctionGraph, self.fgraph)  # set by `accept` before PyTensor compiles anything
    return with_values_bound(final, len(graph.inputs), values) if values else final


class _Bound(CPUDispatcher):
    """The function PyTensor keeps as ``jit_fn``: its Numba signature takes the graph's inputs only.

    Called from Python with the outlined values appended (PyTensor's thunk) it calls the
    final function itself. Called with the graph's inputs only, from Numba code (nutpie
    calls a compiled function's ``vm.jit_fn`` from its own jitted functions) or from
    Python (as vanilla's ``jit_fn`` may be), it compiles its own Python function, which
    calls the final function with the values as globals (`with_values_bound`).
    """

    final: Any
    n_inputs: int

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if len(args) == self.n_inputs and not kwargs:
            return super().__call__(*args)
        return self.final(*args, **kwargs)


def final_function(jit_fn: Any) -> Any:
    """The final Numba function a thunk calls, given what PyTensor keeps as its ``jit_fn`` (a `_Bound` or it)."""
    return jit_fn.final if isinstance(jit_fn, _Bound) else jit_fn


def with_values_bound(final: Any, n_inputs: int, values: Sequence[Any]) -> Any:
    """``final`` for PyTensor's thunk, a function of the graph's ``n_inputs`` inputs for Numba code (`_Bound`).

    The values are globals of the Numba function, so Numba bakes them into its code, as
    PyTensor's own final function would; it is compiled only when something calls it with
    the graph's inputs, and not cached (its code depends on the values).
    """
    names = [f"i{k}" for k in range(n_inputs)]
    bound = [f"v{k}" for k in range(len(values))]
    src = f"def jit_fn({', '.join(names)}):\n    return final({', '.join(names + bound)})\n"
    env = {"final": final, "__name__": __name__, **dict(zip(bound, values, strict=True))}
    py_func = compile_numba_function_src(src, "jit_fn", env)
    options = {"nopython": True, "boundscheck": False, "fastmath": config.numba__fastmath, "no_cpython_wrapper": False}
    dispatcher = _Bound(py_func, locals={}, targetoptions=options)
    dispatcher.final, dispatcher.n_inputs = final, n_inputs
    return dispatcher


apply_late(Patch(NumbaLinker, "fgraph_convert", fgraph_convert))
apply_late(Patch(NumbaLinker, "create_thunk_inputs", create_thunk_inputs))
apply_late(Patch(NumbaLinker, "jit_compile", jit_compile))
