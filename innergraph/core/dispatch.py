"""Which Ops a linker can run: its conversion dispatch, found from the linker itself.

Terms
-----
thunk linker
    A linker that runs each node through ``op.make_thunk`` (``py``, ``c|py``, ``c``,
    ``vm``, ``cvm`` and their variants: PyTensor's `LocalLinker`, `CLinker`,
    `WrapLinker` and `DualLinker` families). It runs every Op that has a
    ``perform`` or a ``make_thunk``, innergraph's consumers included.
JIT linker
    A `JITLinker`: it converts the whole `FunctionGraph` with a *conversion
    dispatch* and compiles the result (Numba, JAX, PyTorch, MLX, any later one).
conversion dispatch
    The `functools.singledispatch` function a JIT linker converts Ops with
    (``jax_funcify``, ``pytorch_funcify``, ``mlx_funcify``; Numba has two,
    ``numba_funcify_and_cache_key`` and the legacy ``numba_funcify``). It is what
    decides whether an Op can run: an Op runs when the dispatch has an
    implementation registered *for its class*, or for a subclass of the family it
    belongs to — a generic fallback registered for `Op` or `object` does not count.

How a linker's dispatch is found (`conversion_dispatches`), in order:

1. an explicit declaration, `register_conversion_dispatch(linker_class, get)`,
   inherited by subclasses: for a linker whose conversion cannot be discovered;
2. discovery: the singledispatch functions that implement `FunctionGraph` (the
   conversion starts from the whole graph) among the objects that the linker's
   ``fgraph_convert`` names — module globals and names it imports inside its body
   (``from pytensor.link.jax.dispatch import jax_funcify``, PyTensor's convention
   for optional backends) — directly, or through a plain function it calls (Numba's
   ``numba_funcify_ensure_cache``). Importing those names is what the linker does
   anyway when it converts its first graph.

When neither finds a dispatch, it cannot be determined: `runs` answers ``False``
(correctness first: the caller then hands over PyTensor's native Ops).

Which of innergraph's modules load on a linker's first link (`ON_DEMAND`,
`load_on_demand`): the backends, and the DebugMode patch. They are named, not
imported, so that importing innergraph imports no Numba or JAX; the patched
``Linker.schedule`` (`innergraph.patching.linker`) loads them.
"""

from __future__ import annotations

import dis
import importlib
import importlib.util
import inspect
import sys
import types
from collections.abc import Callable, Iterator
from typing import Any
from weakref import WeakKeyDictionary

from pytensor.graph.fg import FunctionGraph
from pytensor.graph.op import Op
from pytensor.link.basic import JITLinker, Linker, LocalLinker, WrapLinker
from pytensor.link.c.basic import CLinker, DualLinker

__all__ = [
    "BACKEND_LINKERS",
    "ON_DEMAND",
    "compiling_for_numba",
    "conversion_dispatches",
    "implements",
    "linker_being_compiled",
    "load_on_demand",
    "load_on_link",
    "register_conversion_dispatch",
    "runs",
]

#: Linker families that run nodes through ``op.make_thunk`` (a `JITLinker` is checked first).
THUNK_LINKERS: tuple[type, ...] = (LocalLinker, CLinker, WrapLinker, DualLinker)

_declared: dict[type, Callable[[], tuple[Any, ...]]] = {}
_discovered: WeakKeyDictionary[type, tuple[Any, ...]] = WeakKeyDictionary()


def register_conversion_dispatch(linker_class: type[Linker], get: Callable[[], Any]) -> None:
    """Declare the conversion dispatch of ``linker_class`` (and its subclasses).

    Parameters
    ----------
    linker_class
        A `JITLinker` subclass whose ``fgraph_convert`` does not name its dispatch
        in a way `conversion_dispatches` discovers.
    get
        Called when the dispatch is first needed (so an optional backend is imported
        only when it is used); returns the singledispatch function, or a tuple of
        them when the linker may use any of several.
    """
    if not (isinstance(linker_class, type) and issubclass(linker_class, JITLinker)):
        raise TypeError(f"register_conversion_dispatch: {linker_class!r} is not a JITLinker subclass")

    def declared() -> tuple[Any, ...]:
        found = get()
        return tuple(found) if isinstance(found, tuple | list) else (found,)

    _declared[linker_class] = declared


def conversion_dispatches(linker: Linker) -> tuple[Any, ...]:
    """The conversion dispatch(es) of a JIT linker; ``()`` when they cannot be determined."""
    cls = type(linker)
    for klass in cls.__mro__:
        if klass in _declared:
            return _declared[klass]()
    if cls not in _discovered:
        _discovered[cls] = _discover(cls)
    return _discovered[cls]


def implements(dispatch: Any, op_class: type, family: type = Op) -> bool:
    """Whether ``dispatch`` has an implementation registered for ``op_class``.

    The implementation it resolves to must be registered for ``op_class`` or for one
    of its bases that is a subclass of ``family`` (the consumer family: a
    registration for innergraph's `Call` counts for a subclass of `Call`, one for
    `Op` never counts).
    """
    chosen = dispatch.dispatch(op_class)
    registry = dispatch.registry
    return any(
        k in registry and registry[k] is chosen
        for k in op_class.__mro__
        if issubclass(k, family) and k is not Op
    )


def runs(linker: Linker, op_class: type, family: type = Op) -> bool:
    """Whether ``linker`` can run nodes of ``op_class`` as they are.

    A thunk linker runs them (through ``make_thunk``); a JIT linker when every
    conversion dispatch it may use `implements` the class; any other linker, or a
    JIT linker whose dispatch cannot be determined, does not.
    """
    if isinstance(linker, JITLinker):
        dispatches = conversion_dispatches(linker)
        return bool(dispatches) and all(implements(d, op_class, family) for d in dispatches)
    return isinstance(linker, THUNK_LINKERS)


def _discover(linker_class: type) -> tuple[Any, ...]:
    convert = getattr(linker_class, "fgraph_convert", None)
    if not isinstance(convert, types.FunctionType) or getattr(convert, "__isabstractmethod__", False):
        return ()
    found: dict[int, Any] = {}
    for obj in _named(convert, depth=2):
        if _is_singledispatch(obj) and _converts_graphs(obj):
            found.setdefault(id(obj), obj)
    return tuple(found.values())


def _is_singledispatch(obj: Any) -> bool:
    return callable(obj) and hasattr(obj, "registry") and hasattr(obj, "dispatch") and hasattr(obj, "register")


def _converts_graphs(dispatch: Any) -> bool:
    return bool(dispatch.dispatch(FunctionGraph) is not dispatch.dispatch(object))


def _named(function: types.FunctionType, depth: int) -> Iterator[Any]:
    """The objects ``function`` names (globals and imports), and those its plain callees name."""
    for obj in _names_in(function.__code__, function.__globals__):
        yield obj
        callee = inspect.unwrap(obj) if callable(obj) else None
        if depth > 1 and isinstance(callee, types.FunctionType) and not _is_singledispatch(obj):
            yield from _named(callee, depth - 1)


def _names_in(code: types.CodeType, namespace: dict[str, Any]) -> Iterator[Any]:
    module = None
    previous: list[Any] = []
    for instruction in dis.get_instructions(code):
        if instruction.opname == "LOAD_GLOBAL" and instruction.argval in namespace:
            yield namespace[instruction.argval]
        elif instruction.opname == "IMPORT_NAME":
            level = previous[-2] if len(previous) >= 2 and isinstance(previous[-2], int) else 0
            module = _import(str(instruction.argval), level, namespace.get("__package__"))
        elif instruction.opname == "IMPORT_FROM" and module is not None:
            value = getattr(module, str(instruction.argval), None)
            if value is not None:
                yield value
        previous.append(instruction.argval)
    for const in code.co_consts:  # nested functions (PyTorch's conversion_func_register)
        if isinstance(const, types.CodeType):
            yield from _names_in(const, namespace)


def _import(name: str, level: int, package: str | None) -> Any:
    try:
        absolute = importlib.util.resolve_name("." * level + name, package) if level else name
        return importlib.import_module(absolute)
    except Exception:  # a backend that is not installed: that linker cannot run anything
        return None


def linker_being_compiled(fgraph: FunctionGraph | None = None) -> Linker | None:
    """The linker of the mode compiling ``fgraph``; None for an unknown mode.

    PyTensor's ``get_active_mode``: the mode whose rewriter is running on ``fgraph``
    (every `Mode`, `DebugMode` included, stamps it on the graph it rewrites), else
    the default mode. Pass the graph being rewritten whenever there is one.
    """
    from pytensor.graph.rewriting.basic import get_active_mode

    try:
        return get_active_mode(fgraph).linker
    except Exception:  # an unknown mode name
        return None


def compiling_for_numba(fgraph: FunctionGraph | None = None) -> bool:
    """Whether the mode compiling ``fgraph`` (default: the mode being compiled) links with PyTensor's Numba linker."""
    from pytensor.link.numba.linker import NumbaLinker

    return isinstance(linker_being_compiled(fgraph), NumbaLinker)


#: (module and class name of a linker, innergraph module to import on its first link), in
#: the order registered (`load_on_link`: the installation registers the backends and the
#: DebugMode patch, `innergraph.consumer` the generated code). Matched by name so that no
#: linker module (and no JAX or Numba) is imported before use.
ON_DEMAND: tuple[tuple[str, str, str], ...] = ()

#: The JIT backends a module can ask to load with (`load_on_link`): their linker's module and class name.
BACKEND_LINKERS: dict[str, tuple[str, str]] = {
    "numba": ("pytensor.link.numba.linker", "NumbaLinker"),
    "jax": ("pytensor.link.jax.linker", "JAXLinker"),
}


def load_on_link(backend_linker: tuple[str, str], module: str) -> None:
    """Import ``module`` on the first link with the linker named ``backend_linker`` (its module and class name).

    Recorded once per process (`ON_DEMAND`); `innergraph.consumer.load_on_link` is the public form.
    """
    global ON_DEMAND
    entry = (*backend_linker, module)
    if entry not in ON_DEMAND:
        ON_DEMAND = (*ON_DEMAND, entry)


def load_on_demand(linker_class: type) -> None:
    """Import the innergraph modules `ON_DEMAND` names for ``linker_class`` or a base class of it."""
    bases = {(c.__module__, c.__qualname__) for c in linker_class.__mro__}
    for module, name, needed in ON_DEMAND:
        if (module, name) in bases and needed not in sys.modules and _exists(needed):
            importlib.import_module(needed)


def _exists(module: str) -> bool:
    """Whether ``module`` is there: a PyTensor patched up to the rewrites has no backends yet (its consumers are handed over)."""
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # its package is missing
        return False
