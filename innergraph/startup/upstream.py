"""``import innergraph`` on a patched PyTensor: one copy of every class, PyTensor's.

Terms
-----
patched PyTensor
    PyTensor built from the upstream series in ``patches/`` (`innergraph_patches`): it
    ships innergraph's modules as ``pytensor.innergraph.*`` and calls their hooks from
    its own files.
alias
    ``innergraph.X`` resolving to the module object ``pytensor.innergraph.X`` (the same
    object in ``sys.modules`` under both names), so ``isinstance``, dispatch registries
    and rewrite databases see one class, one registry and one registration.

partial series
    A PyTensor carrying the first *k* < 5 patches of the series (how ``.ci/patched``
    tests the series patch by patch, `innergraph_patches.verify`). `series_level` counts
    the leading patches whose modules are all in ``pytensor/innergraph/``. Only the last
    patch makes ``import pytensor`` import ``pytensor.innergraph`` (which registers its
    rewrites: PyTensor *enables* its copy); before it the copy is inert code, so ``import
    innergraph`` monkey-patches exactly as on a released PyTensor, from the library's own
    files (`patched_pytensor` is false). A PyTensor that enables a copy lacking modules
    (patched from another version of the series) can be neither monkey-patched (a second
    registration) nor aliased (a half package): `refuse_partial_series` raises
    `ImportError` naming what is missing.

`alias_upstream` replaces the ``innergraph`` package being imported by
``pytensor.innergraph`` and installs `UpstreamFinder` first in ``sys.meta_path``:
a module the series ships is aliased; a library-only module (the series generator,
benchmarks, the test kit: `innergraph_patches.series.LIBRARY_ONLY`) is loaded from this
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

from innergraph.startup.shipped import SERIES_ORDER, SHIPPED

__all__ = ["UpstreamFinder", "alias_upstream", "missing_modules", "patched_pytensor", "refuse_partial_series", "series_level"]

PACKAGE = "innergraph"
UPSTREAM = "pytensor.innergraph"
_LIBRARY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # innergraph/ (this module is innergraph/startup/upstream.py)


def _upstream_folder() -> str | None:
    """``pytensor/innergraph`` of the installed PyTensor, or None on a released PyTensor."""
    spec = importlib.util.find_spec(UPSTREAM)
    if spec is None or not spec.submodule_search_locations:
        return None
    return list(spec.submodule_search_locations)[0]


def missing_modules(folder: str | None, upto: int | None = None) -> list[str]:
    """The modules of the series' first ``upto`` patches (default: all) absent from ``folder`` (``pytensor/innergraph``)."""
    slugs = SERIES_ORDER if upto is None else SERIES_ORDER[:upto]
    wanted = [shipped_as(module) for slug in slugs for module in SHIPPED[slug]]
    if folder is None:
        return wanted
    return [path for path in wanted if not os.path.isfile(os.path.join(folder, path))]


def shipped_as(module: str) -> str:
    """A library module's path inside ``pytensor/innergraph`` (``innergraph_pickle`` ships as ``_pickle.py``)."""
    return "_pickle.py" if module.startswith("innergraph_pickle/") else module


def series_level(folder: str | None = None) -> int:
    """How many leading patches of the series the installed PyTensor (or ``folder``) carries: 0 (released) to 5."""
    folder = folder if folder is not None else _upstream_folder()
    if folder is None:
        return 0
    level = 0
    while level < len(SERIES_ORDER) and not missing_modules(folder, level + 1):
        level += 1
    return level


def patched_pytensor() -> bool:
    """Whether the installed PyTensor carries the whole series (then ``innergraph`` is aliased to it)."""
    return series_level() == len(SERIES_ORDER)


def refuse_partial_series() -> None:
    """Raise `ImportError` if PyTensor enables a copy of innergraph that lacks a part of the series.

    PyTensor enables its copy with the series' last patch (``import pytensor`` imports
    ``pytensor.innergraph``, which registers its rewrites): one that enables a copy
    lacking modules can be neither monkey-patched (a second registration) nor aliased
    (a half package). A copy PyTensor does not enable is inert, whatever it holds, and
    innergraph monkey-patches as on a released PyTensor.
    """
    folder = _upstream_folder()
    if folder is None or UPSTREAM + ".rewriting.db" not in sys.modules:
        return
    missing = missing_modules(folder)
    if not missing:
        return
    shown = ", ".join(missing[:4]) + (f" and {len(missing) - 4} more" if len(missing) > 4 else "")
    raise ImportError(
        f"innergraph: the installed PyTensor ({folder}) carries patches 1-{series_level(folder)} of innergraph's "
        f"{len(SERIES_ORDER)}-patch upstream series and enables that partial copy on import; it lacks {shown}. "
        "innergraph cannot run on it (monkey-patching would register a second copy of its rewrites, aliasing "
        "would alias a half package): install PyTensor with the whole series (patches/) or a released PyTensor."
    )


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
    """``from innergraph import testing``: a library-only package, which ``pytensor.innergraph`` does not ship.

    ``from package import name`` looks for ``<package.__name__>.name``, that is
    ``pytensor.innergraph.testing``; this module ``__getattr__`` of the package answers
    with the library's ``innergraph.testing`` instead.
    """
    if name.startswith("__") or not os.path.exists(os.path.join(_LIBRARY, name)) and not os.path.exists(os.path.join(_LIBRARY, name + ".py")):
        raise AttributeError(f"module {UPSTREAM!r} has no attribute {name!r}")
    return importlib.import_module(f"{PACKAGE}.{name}")
