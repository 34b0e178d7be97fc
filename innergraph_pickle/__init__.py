"""Load innergraph's objects from a pickle without installing innergraph.

``import innergraph`` is a user's request: it patches PyTensor and registers
innergraph's rewrites (`innergraph.install`). Loading a pickle is not: a process
that unpickles a compiled function holding innergraph's consumers or folded
bodies needs innergraph's *classes*, but must keep compiling everything else
exactly as before.

Python runs a package's ``__init__`` before importing any of its submodules, so
a pickle that names ``innergraph.ops.call.Call`` would install innergraph. Hence
innergraph's picklable classes never pickle by their own module's name: they
pickle as a call of `new` (an instance) or `call` (a constructor function) of
*this* top-level module, with the module and the name as arguments (`reduce`).
`new` and `call` import the module with the ``innergraph`` package present but
its ``__init__`` not run — a placeholder package, removed again afterwards — so
the loading process gets the classes and nothing is installed. Importing
innergraph's modules has no effect on PyTensor beyond registering backend
implementations of innergraph's own classes (`BACKENDS`), which a loaded
function needs to run under that backend.

A later ``import innergraph`` in the same process runs the package for real (it
is not in ``sys.modules``), reusing the modules already loaded, and installs.
"""

from __future__ import annotations

import copyreg
import importlib
import importlib.util
import sys
from typing import Any, SupportsIndex

__all__ = ["BACKENDS", "call", "new", "reduce"]

PACKAGE = "innergraph"

#: innergraph's backend modules, loaded with the first innergraph object of a pickle
#: when the backend's own package is installed and the module exists (a PyTensor with
#: only the first steps of the upstream path has none): ``(module, required top-level package)``.
BACKENDS: list[tuple[str, str]] = [("innergraph.backends.numba", "numba")]


def reduce(obj: Any, protocol: SupportsIndex = 2) -> str | tuple[Any, ...]:
    """``obj.__reduce_ex__``, naming this module instead of ``obj``'s class.

    Use as ``__reduce_ex__ = innergraph_pickle.reduce`` in an innergraph class: the
    state and the other reduce items are the default ones (protocol 2).
    """
    default = object.__reduce_ex__(obj, 2)
    assert isinstance(default, tuple) and default[0] is getattr(copyreg, "__newobj__"), f"{type(obj)}: no __newobj__"
    func, args, *rest = default
    cls = args[0]
    return (new, (cls.__module__, cls.__qualname__, *args[1:]), *rest)


def new(module: str, qualname: str, *args: Any) -> Any:
    """A new instance of ``module.qualname`` (its state is set by the unpickler)."""
    cls = _lookup(module, qualname)
    return cls.__new__(cls, *args)


def call(module: str, qualname: str, *args: Any) -> Any:
    """``module.qualname(*args)``: innergraph's reconstruction functions (a `Body` from its key)."""
    return _lookup(module, qualname)(*args)


def _lookup(module: str, qualname: str) -> Any:
    if not module.startswith(PACKAGE + "."):
        raise ValueError(f"innergraph_pickle only loads innergraph's modules, not {module!r}")
    obj: Any = _import(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


_backends_loaded = False


def _present(module: str) -> bool:
    """Whether ``module`` exists: PyTensor with only the upstream path's first steps has no backend modules yet."""
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # its package is missing
        return False


def _import(module: str) -> Any:
    global _backends_loaded
    if module in sys.modules and _backends_loaded:
        return sys.modules[module]
    placeholder = None
    if PACKAGE not in sys.modules:
        spec = importlib.util.find_spec(PACKAGE)
        assert spec is not None, "innergraph is not installed"
        placeholder = sys.modules[PACKAGE] = importlib.util.module_from_spec(spec)  # __init__ not run
    try:
        loaded = importlib.import_module(module)
        if not _backends_loaded:
            for backend, requires in BACKENDS:
                if importlib.util.find_spec(requires) is not None and _present(backend):
                    importlib.import_module(backend)
            _backends_loaded = True
        return loaded
    finally:
        if placeholder is not None and sys.modules.get(PACKAGE) is placeholder:
            del sys.modules[PACKAGE]
