"""Load innergraph's backend implementations when PyTensor's conversion dispatch loads, not only at a link.

The patched `Linker.schedule` (`innergraph.patching.linker`) loads innergraph's JAX
implementations on a JAX linker's first link. Code that converts a graph *without a
linker* never reaches it: PyMC's ``pymc.sampling.jax.get_jaxified_graph`` (used by
pymc-extras' statespace models and PyMC's JAX samplers) rewrites a `FunctionGraph` with
the JAX mode's rewriter and calls ``jax_funcify`` on it directly. The rewrites leave
innergraph's consumers in the graph (an in-graph ``IfElse`` inside a lowered Scan's
body), and ``jax_funcify`` raised ``NotImplementedError`` for them.

This module's `ImportHook` (a `sys.meta_path` finder, installed and removed with the
other patches) makes the import of a *dispatch module* (`DISPATCH_MODULES`) also load
what the patched schedule loads for that backend's linker (the modules
`innergraph.core.dispatch.ON_DEMAND` lists for it, through `load_on_demand`); when the
dispatch module was imported before ``install``, ``install`` loads them itself.

On a PyTensor patched with the series (``patches/``) no record is applied: the dispatch
module itself calls `dispatch_loaded` at its end (the hook's upstream form), and
``install`` calls `load_imported`.

Terms
-----
dispatch module
    The PyTensor module that defines a backend's conversion dispatch
    (``pytensor.link.jax.dispatch`` defines ``jax_funcify``); whoever converts a graph
    for that backend imports it first.
backend modules
    The innergraph modules registering consumers' implementations with that dispatch
    (`innergraph.backends.jax`, `innergraph.backends.jax_generated`), listed in
    ``ON_DEMAND`` under the backend's linker.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any
from innergraph.core.hooks import installed
from innergraph.core import dispatch

__all__ = ["DISPATCH_MODULES", "ImportHook", "dispatch_loaded", "load_imported", "patches"]

#: (dispatch module, module and class name of the backend's linker): once the dispatch
#: module has loaded, the backend modules ``ON_DEMAND`` lists for that linker are loaded.
DISPATCH_MODULES: tuple[tuple[str, str, str], ...] = (
    ("pytensor.link.jax.dispatch", "pytensor.link.jax.linker", "JAXLinker"),
)


class _ThenLoad(importlib.abc.Loader):
    """A loader running ``loader``, then loading the backend modules of ``linker`` (module, class name)."""

    def __init__(self, loader: importlib.abc.Loader, linker: tuple[str, str]) -> None:
        self.loader = loader
        self.linker = linker

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.loader.exec_module(module)
        _load(self.linker)


@dataclass(eq=False)
class ImportHook(importlib.abc.MetaPathFinder):
    """A `sys.meta_path` finder loading a backend's modules after its dispatch module (a patch record)."""

    modules: tuple[tuple[str, str, str], ...] = DISPATCH_MODULES
    _busy: set[str] = field(default_factory=set, init=False)

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        linker = {dispatch: (module, name) for dispatch, module, name in self.modules}.get(fullname)
        if linker is None or fullname in self._busy:
            return None
        self._busy.add(fullname)  # the other finders find the module itself
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self._busy.discard(fullname)
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _ThenLoad(spec.loader, linker)
        return spec

    def apply(self) -> None:
        """Put the finder first on `sys.meta_path`; load the backends of dispatch modules already imported."""
        sys.meta_path.insert(0, self)
        load_imported(self.modules)

    def revert(self) -> None:
        """Take the finder off `sys.meta_path` (the backends' registrations are reverted as their own patches)."""
        if self in sys.meta_path:
            sys.meta_path.remove(self)


def load_imported(modules: tuple[tuple[str, str, str], ...] = DISPATCH_MODULES) -> None:
    """Load the backend modules of every dispatch module of ``modules`` already imported."""
    for dispatch_module, module, name in modules:
        if dispatch_module in sys.modules:
            _load((module, name))


def dispatch_loaded(dispatch: str) -> None:
    """What a patched PyTensor's dispatch module calls at its end: load its backend modules while innergraph is enabled.

    The upstream form of `ImportHook` (the series edits ``pytensor/link/jax/dispatch/__init__.py``);
    nothing while innergraph is not installed, or for a module `DISPATCH_MODULES` does not list.
    """
    linker = {name: (module, cls) for name, module, cls in DISPATCH_MODULES}.get(dispatch)
    if linker is not None and installed():
        _load(linker)


def _load(linker: tuple[str, str]) -> None:
    """Load the backend modules of ``linker`` (module, class name) not loaded yet; they register as they load.

    Nothing when one of them is being imported: the dispatch module then loads because
    a backend module imports it (the patched schedule's `load_on_demand` is loading them),
    and loading the others now would import them before the one they import is complete.
    """
    module, name = linker
    needed = [entry[2] for entry in dispatch.ON_DEMAND if entry[:2] == linker]
    if any(_initializing(sys.modules.get(backend)) for backend in needed):
        return
    dispatch.load_on_demand(getattr(importlib.import_module(module), name))


def _initializing(module: ModuleType | None) -> bool:
    """Whether ``module`` is being imported (its code has not finished running)."""
    return module is not None and bool(getattr(getattr(module, "__spec__", None), "_initializing", False))


def patches() -> list[Any]:
    """The import hook, as a patch record (`innergraph.patching.linker.patches` lists it first)."""
    return [ImportHook()]
