"""``import innergraph`` on a patched PyTensor: one copy of every class, PyTensor's.

Terms
-----
patched PyTensor
    PyTensor built from the upstream series in ``patches/`` (`innergraph.patches`): it
    ships innergraph's modules as ``pytensor.innergraph.*`` and calls their hooks from
    its own files.
alias
    ``innergraph.X`` resolving to the module object ``pytensor.innergraph.X`` (the same
    object in ``sys.modules`` under both names), so ``isinstance``, dispatch registries
    and rewrite databases see one class, one registry and one registration.

`alias_upstream` replaces the ``innergraph`` package being imported by
``pytensor.innergraph`` and installs `UpstreamFinder` first in ``sys.meta_path``:
a module the series ships is aliased; a library-only module (the series generator,
benchmarks, the test kit: `innergraph.patches.series.LIBRARY_ONLY`) is loaded from this
library's directory, and its own ``innergraph.*`` imports resolve to the aliases.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
from types import ModuleType
from typing import Any

__all__ = ["UpstreamFinder", "alias_upstream", "patched_pytensor"]

PACKAGE = "innergraph"
UPSTREAM = "pytensor.innergraph"
_LIBRARY = os.path.dirname(os.path.abspath(__file__))


def patched_pytensor() -> bool:
    """Whether the installed PyTensor carries the series (``pytensor.innergraph`` exists)."""
    return importlib.util.find_spec(UPSTREAM) is not None


class _AliasLoader(importlib.abc.Loader):
    """Loads ``innergraph.X`` as the already imported ``pytensor.innergraph.X``."""

    def __init__(self, target: str):
        self.target = target
        self.spec: Any = None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = importlib.import_module(self.target)
        self.spec = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        module.__spec__ = self.spec  # the import system set the alias's spec; keep PyTensor's


class UpstreamFinder(importlib.abc.MetaPathFinder):
    """``innergraph.X``: ``pytensor.innergraph.X`` if the series ships it, else this library's file."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith(PACKAGE + "."):
            return None
        rest = fullname[len(PACKAGE) + 1 :]
        upstream = f"{UPSTREAM}.{rest}"
        if upstream in sys.modules or _exists(upstream):
            loader = _AliasLoader(upstream)
            return importlib.machinery.ModuleSpec(fullname, loader, is_package=_is_package(upstream))
        folder = os.path.join(_LIBRARY, *rest.split(".")[:-1])
        return importlib.machinery.PathFinder.find_spec(fullname, [folder])


def _exists(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:  # its parent is library-only (``innergraph.testing``)
        return False


def _is_package(name: str) -> bool:
    spec = importlib.util.find_spec(name)
    return spec is not None and spec.submodule_search_locations is not None


def alias_upstream() -> ModuleType:
    """Make ``innergraph`` (and every ``innergraph.X``) PyTensor's ``pytensor.innergraph`` modules."""
    if not any(isinstance(f, UpstreamFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, UpstreamFinder())
    package = importlib.import_module(UPSTREAM)
    for name, module in list(sys.modules.items()):
        if name.startswith(UPSTREAM + ".") and module is not None:
            sys.modules[PACKAGE + name[len(UPSTREAM) :]] = module
    sys.modules[PACKAGE] = package
    if "__getattr__" not in vars(package):
        setattr(package, "__getattr__", _library_only_attribute)  # PEP 562: the package answers from-imports
    return package


def _library_only_attribute(name: str) -> ModuleType:
    """``from innergraph import cases``: a library-only module, which ``pytensor.innergraph`` does not ship.

    ``from package import name`` looks for ``<package.__name__>.name``, that is
    ``pytensor.innergraph.cases``; this module ``__getattr__`` of the package answers
    with the library's ``innergraph.cases`` instead.
    """
    if name.startswith("__") or not os.path.exists(os.path.join(_LIBRARY, name)) and not os.path.exists(os.path.join(_LIBRARY, name + ".py")):
        raise AttributeError(f"module {UPSTREAM!r} has no attribute {name!r}")
    return importlib.import_module(f"{PACKAGE}.{name}")
