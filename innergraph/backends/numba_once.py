"""Each converted function compiled once under Numba, and cached itself.

PyTensor caches the function it converts an Op to (the *converted function*) by
compiling a second function, ``def op(*args): return converted(*args)``, registered
with its cache locator under the Op's key (``numba_funcify_ensure_cache``). Numba
compiles the converted function, then the wrapper, whose LLVM module links the
converted function's code and optimises it again. On a state-space model the wrappers
are a quarter of Numba's cold start (``design/benchmarks.md``, "Where Numba's time
goes": 53 s of 204 s on the structural model, 80 s of 267 s on VARMAX).

`compiled_once` registers the converted function itself with PyTensor's locator,
under the same key and a suffix of its own, so Numba compiles it once and finds it in
its disk cache next time. PyTensor's own entries (the wrappers) are left alone:
``innergraph.uninstall()`` finds vanilla's cache as it was. A converted function that
is not a plain jitted Python function gets PyTensor's wrapper, as without innergraph,
under a key of innergraph's (`WRAPPED`).

Every function innergraph caches this way (PyTensor's wrapper under `WRAPPED` too, and the
final function of `innergraph.backends.numba_link`) reads and writes its entry through
`GuardedCache`: an entry that cannot be read (truncated, overwritten, written by something
else) is removed with one warning and the function compiled again, where Numba would raise;
an index found damaged when the compiled function is saved (damaged since it was read) is
removed and written anew, with one warning.

Terms
-----
stable name
    Numba names a cache entry after the file its function was defined in; PyTensor
    writes generated source to a temporary file of a new name each time, so such a
    function's entry would never be found again. `named_stably` gives the function
    the file name ``<string>``, as PyTensor's own cached functions have.
"""

from __future__ import annotations

import types
import warnings
from pathlib import Path
from typing import Any

import numba
from numba.core.caching import FunctionCache
from numba.core.dispatcher import Dispatcher
from numba.core.registry import CPUDispatcher
import pytensor
from pytensor import config
from pytensor.graph.fg import AbstractFunctionGraph
from pytensor.link.numba.cache import CACHED_SRC_FUNCTIONS, compile_numba_function_src
from pytensor.link.numba.dispatch import basic as numba_basic
from pytensor.link.numba.dispatch.basic import numba_funcify_and_cache_key

from innergraph.core.hooks import original

__all__ = ["PACKAGE", "GuardedCache", "cached_itself", "compiled_once", "direct_key", "guarded", "named_stably", "stable_closure"]

_ensure_cache = original(numba_basic, "numba_funcify_ensure_cache")

#: The suffix of a converted function's own cache entry (PyTensor's wrapper is keyed ``{key}_fastmath{0|1}``).
DIRECT = "_innergraph_direct"

#: The suffix of PyTensor's wrapper where innergraph keeps it (a converted function that is no plain jitted
#: function): every entry innergraph writes has a name of its own, none of vanilla's is overwritten.
WRAPPED = "_innergraph_wrapped"

#: The version of what innergraph writes into its entries, raised when the code it caches under
#: an unchanged key changes. 2 (2026-11-28): generated functions' globals carry a module name
#: (`named_stably`); entries of format 1 could not be loaded by another process.
FORMAT = 2

#: The name innergraph is imported under: ``innergraph``, or ``pytensor.innergraph`` in a PyTensor that ships the
#: series (``patches/``). The code innergraph caches names its modules (a body's address, an exception class), and
#: Numba loads an entry's globals by module name: an entry of the other form would import a second copy of the
#: library, which a PyTensor that ships it may not even have. Each form keeps entries of its own.
PACKAGE = __name__.rpartition(".backends.")[0]


def direct_key(key: str, kind: str = DIRECT) -> str:
    """The key a function innergraph caches is registered under: PyTensor's ``key``, ``kind``, and what else its code depends on.

    PyTensor's keys name what an Op's conversion reads (its class, props, the graph), not
    the code PyTensor generates from it, and its locator stamps no version: an entry made
    by another PyTensor would be served. innergraph's entries carry PyTensor's version
    (Numba's index already refuses another Numba's), the fastmath setting, `FORMAT` and the
    name the library is imported under (`PACKAGE`).
    """
    return f"{key}{kind}_format{FORMAT}_{PACKAGE}_pytensor{pytensor.__version__}_fastmath{int(config.numba__fastmath)}"


def named_stably(py_func: Any) -> Any:
    """``py_func`` with the file name ``<string>`` (module docstring) and a module name Numba can import.

    Globals without ``__name__`` (what ``compile_numba_function_src`` builds, e.g. for
    PyTensor's ``cast_scalar_outputs``) are copied with one: Numba pickles a cached
    function's environment under its module's name and, in another process, imports
    that name; under None it fails (design/numba-linking.md, "An environment Numba can
    load").
    """
    code = py_func.__code__.replace(co_filename="<string>")
    env = py_func.__globals__ if "__name__" in py_func.__globals__ else {**py_func.__globals__, "__name__": __name__}
    stable = types.FunctionType(code, env, py_func.__name__, py_func.__defaults__, py_func.__closure__)
    stable.__source__ = getattr(py_func, "__source__", None)  # type: ignore[attr-defined]
    return stable


class GuardedCache(FunctionCache):
    """Numba's cache of one function, which removes an unreadable entry instead of raising (module docstring)."""

    def load_overload(self, sig: Any, target_context: Any) -> Any:
        try:
            return super().load_overload(sig, target_context)
        except Exception as exc:  # whatever an unreadable file raises (pickle, int(), EOF, OSError)
            removed = self.remove_entries()
            warnings.warn(
                f"innergraph: the Numba cache entry of {self._py_func.__name__} could not be read ({exc!r}); "
                f"removed {len(removed)} file(s) from {self._cache_path} and compiling it again",
                RuntimeWarning,
                stacklevel=2,
            )
            return None

    def save_overload(self, sig: Any, data: Any) -> None:
        """Numba's save; an index it cannot read (damaged since the load) is removed and the entry saved anew, with one warning.

        Numba reads the index again to add the new entry, and raises where it cannot. The
        function is compiled by then: a save that still fails leaves it uncached, with the
        same one warning, and never fails the compilation.
        """
        try:
            super().save_overload(sig, data)
            return
        except Exception as exc:  # an unreadable index (pickle, EOF), or a folder that cannot be written
            removed = self.remove_entries()
            try:
                super().save_overload(sig, data)
                outcome = "cached it anew"
            except Exception:
                outcome = "the function is compiled, not cached"
            warnings.warn(
                f"innergraph: the Numba cache entry of {self._py_func.__name__} could not be written ({exc!r}); "
                f"removed {len(removed)} file(s) from {self._cache_path}; {outcome}",
                RuntimeWarning,
                stacklevel=2,
            )

    def remove_entries(self) -> list[str]:
        """Delete this function's index and data files; their names."""
        cache_file, folder = self._cache_file, Path(self._cache_path)
        paths = [folder / cache_file._index_name, *folder.glob(cache_file._data_name_pattern.replace("{number:d}", "*"))]
        removed = []
        for path in paths:
            try:
                path.unlink()
                removed.append(path.name)
            except OSError:  # another process removed it first, or a folder this process cannot write
                pass
        return removed


def guarded(dispatcher: Any) -> Any:
    """``dispatcher``, caching on disk through a `GuardedCache`; anything else (what a mocked ``numba_njit`` returns) as it is.

    Numba's ``Dispatcher.enable_caching`` (what ``cache=True`` calls) with the guarded cache:
    pass a dispatcher made without ``cache=True``, or its cache object is built twice
    (30-70 us a dispatcher, some hundreds per model).
    """
    if isinstance(dispatcher, CPUDispatcher):
        dispatcher._cache = GuardedCache(dispatcher.py_func)  # type: ignore[attr-defined]
    return dispatcher


def stable_closure(py_func: Any) -> bool:
    """Whether Numba's cache index of ``py_func`` is keyed alike in every process.

    Numba keys a cached function's index by its bytecode and the pickle of its closure's
    cells. A cell holding a Numba dispatcher pickles with that dispatcher's per-process
    id, so the function would miss its own cache in every new process (PyTensor 3.3.6's
    ``Dot`` conversion closes over the dispatchers that cast its inputs). Such a
    function is cached as PyTensor caches it, through a wrapper that names it as a
    global, which the index does not read.
    """
    for cell in getattr(py_func, "__closure__", None) or ():
        try:
            content = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        for value in content if isinstance(content, (tuple, list)) else (content,):
            if isinstance(value, Dispatcher):
                return False
    return True


def cached_itself(fn: Any, key: str, kind: str = DIRECT) -> Any:
    """A dispatcher of ``fn``'s Python function with ``fn``'s options, cached under `direct_key` (``kind``).

    None if ``fn`` is no such dispatcher, or if its closure holds a dispatcher (`stable_closure`).
    """
    if type(fn) is not CPUDispatcher or not isinstance(fn.py_func, types.FunctionType) or not stable_closure(fn.py_func):
        return None
    stable = named_stably(fn.py_func)
    CACHED_SRC_FUNCTIONS[stable] = direct_key(key, kind)
    return guarded(numba.jit(stable, **fn.targetoptions))


def compiled_once(op: Any, node: Any = None, *args: Any, **kwargs: Any) -> tuple[Any, str | None]:
    """PyTensor's ``numba_funcify_ensure_cache``, the converted function cached itself (module docstring)."""
    if args:  # more positional arguments than the node: PyTensor's call, as it was made
        return _ensure_cache(op, node, *args, **kwargs)
    if not config.numba__cache:  # the node by name: 3.3.6's signature is (op, *args, **kwargs)
        return _ensure_cache(op, node=node, **kwargs)
    fn, key = numba_funcify_and_cache_key(op, node=node, **kwargs)
    if key is None:
        return fn, None
    itself = cached_itself(fn, key)
    if itself is not None:
        return itself, key
    graph = op if isinstance(op, AbstractFunctionGraph) else node
    if len(graph.inputs) > 1000:  # PyTensor's limit for its wrapper's *args
        return fn, key
    name = fn.__name__
    wrapper = compile_numba_function_src(
        src=f"def {name}(*args): return jitable_func(*args)",
        function_name=name,
        global_env=vars(numba_basic) | {"jitable_func": fn},
        cache_key=direct_key(key, WRAPPED),
    )
    return guarded(numba_basic.numba_njit(wrapper)), key
