"""The records that patch PyTensor, and whether innergraph is installed.

Terms
-----
record
    A `Patch` (replace an attribute of a module or class), a `DispatchPatch` (register
    a function with a single-dispatch function) or an `ItemPatch` (set a mapping's
    item). `apply` and `revert` put back the very object replaced.
installed
    The records applied by `innergraph.patching.install` (monkey-patched form), or the
    hooks a patched PyTensor calls turned on (`activate`). Every layer asks `installed`;
    only `innergraph.patching` installs.
late record
    A patch of a part of PyTensor that loads on demand (its Numba and JAX dispatch):
    registered with `apply_late` by the module that needs it, applied now if installed
    and by every later install.

This module imports nothing of innergraph outside ``innergraph.startup``: the backends
and the rewrites read it, the installation (``innergraph.patching``) drives it.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from innergraph.startup.upstream import patched_pytensor as whole_series  # library only

__all__ = [
    "BASE_SUFFIX",
    "DispatchPatch",
    "ItemPatch",
    "Patch",
    "Records",
    "activate",
    "apply",
    "call_hook",
    "apply_late",
    "apply_pending",
    "deactivate",
    "form",
    "hook",
    "installed",
    "original",
    "patched_pytensor",
    "records",
    "replaces_pytensors_own",
    "revert_all",
]


@dataclass
class Patch:
    """Replace attribute ``name`` of ``owner`` (a module or a class) by ``replacement``."""

    owner: Any
    name: str
    replacement: Any
    original: Any = field(default=None, init=False)

    def apply(self) -> None:
        self.original = vars(self.owner)[self.name]
        setattr(self.owner, self.name, self.replacement)

    def revert(self) -> None:
        setattr(self.owner, self.name, self.original)


@dataclass
class DispatchPatch:
    """Register ``replacement`` for ``cls`` with the single-dispatch function ``dispatcher``."""

    dispatcher: Any
    cls: type
    replacement: Any
    original: Any = field(default=None, init=False)
    #: whether PyTensor defines ``cls`` and registered a function of its own for exactly that class
    #: (read when the record is made, before innergraph registers anything for it)
    pytensors_own: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        module = self.cls.__module__
        defined_by_pytensor = module.split(".")[0] == "pytensor" and not module.startswith("pytensor.innergraph.")
        self.pytensors_own = defined_by_pytensor and self.cls in self.dispatcher.registry

    def apply(self) -> None:
        self.original = self.dispatcher.dispatch(self.cls)
        self.dispatcher.register(self.cls, self.replacement)

    def revert(self) -> None:
        self.dispatcher.register(self.cls, self.original)


@dataclass
class ItemPatch:
    """Set ``mapping[key]`` to ``replacement`` (for ``copyreg.dispatch_table``: how a class pickles)."""

    mapping: Any
    key: Any
    replacement: Any
    had: bool = field(default=False, init=False)
    original: Any = field(default=None, init=False)

    def apply(self) -> None:
        self.had, self.original = self.key in self.mapping, self.mapping.get(self.key)
        self.mapping[self.key] = self.replacement

    def revert(self) -> None:
        if self.had:
            self.mapping[self.key] = self.original
        else:
            del self.mapping[self.key]


_applied: list[Patch | DispatchPatch | ItemPatch] = []
_late: list[Patch | DispatchPatch | ItemPatch] = []  # patches of on-demand parts, once those have loaded
_registered: list[DispatchPatch] = []  # patched PyTensor: dispatch registrations of the backends
_active = [False]  # patched PyTensor: whether the hooks its files call are on

#: The suffix of the name under which a patched PyTensor keeps a function the series
#: delegates to innergraph (``cache_key_for_constant`` -> ``_cache_key_for_constant_base``).
BASE_SUFFIX = "_base"


@cache
def patched_pytensor() -> bool:
    """Whether the imported PyTensor carries the whole upstream series (this module is then ``pytensor.innergraph.core.hooks``).

    The library also runs on a PyTensor carrying only the series' first, inert patches,
    and monkey-patches it as a released one.
    """
    upstream = __name__.startswith("pytensor.")
    upstream = upstream or whole_series()  # library only
    return upstream


def form() -> str:
    """Which form of innergraph is active: ``"patched pytensor"``, ``"monkey-patched"`` or ``"not installed"``."""
    if not installed():
        return "not installed"
    return "patched pytensor" if patched_pytensor() else "monkey-patched"


def original(owner: Any, name: str) -> Any:
    """PyTensor's own ``owner.name``, which a `Patch` record replaces (or a patched PyTensor delegates).

    A patched PyTensor keeps it as ``_<name>_base`` (its ``name`` calls innergraph's
    replacement through `hook`); released PyTensor as ``name``, read before any patch.
    """
    members = vars(owner)
    base = members.get(f"_{name}{BASE_SUFFIX}")
    return base if base is not None else members[name]


def hook(module: str, name: str, base: Any) -> Any:
    """What a function of a patched PyTensor that delegates to innergraph calls: ``module.name`` if installed, else ``base``."""
    if not installed():
        return base
    return getattr(importlib.import_module(module), name)


def call_hook(module: str, name: str, default: Any, *args: Any) -> Any:
    """What a patched PyTensor's file calls where it hands over to innergraph: ``module.name(*args)`` if installed, else ``default``.

    The hook's module is imported only while innergraph is installed. So a PyTensor
    carrying part of the upstream series, whose files already call the hooks
    (``innergraph.patching``) but which lacks the layers those import, runs as released.
    """
    if not installed():
        return default
    return getattr(importlib.import_module(module), name)(*args)


def apply_late(patch: Patch | DispatchPatch) -> None:
    """Patch a part of PyTensor that loads on demand (Numba): now if installed, and on every `install`.

    On a patched PyTensor a `Patch` record is not applied (the series made it a direct
    edit), nor is a `DispatchPatch` that replaces the conversion PyTensor registers for
    one of its own classes (`replaces_pytensors_own`: the series made PyTensor's function
    delegate to the same replacement); any other `DispatchPatch` (innergraph's consumers,
    a contributor's, a subclass PyTensor registers nothing for) is a registration with
    PyTensor's dispatcher, as PyTensor's own backend modules register theirs, made while
    installed.
    """
    if patched_pytensor():
        if isinstance(patch, DispatchPatch) and not replaces_pytensors_own(patch):
            _registered.append(patch)
            if installed():
                patch.apply()
        return
    _late.append(patch)
    if _applied:
        patch.apply()
        _applied.append(patch)


def replaces_pytensors_own(patch: DispatchPatch) -> bool:
    """Whether ``patch`` replaces a function PyTensor registered for one of its own classes (JAX's ``Scan``).

    A record for a class of PyTensor's that PyTensor's dispatcher reaches only through
    a base class adds a registration and replaces nothing: ``FunctionGraph`` under
    Numba, whose conversion PyTensor registers for ``AbstractFunctionGraph`` (the base
    of the frozen inner graphs too). Such a record, like one for innergraph's own Ops,
    is a registration on a patched PyTensor, made while installed.
    """
    return patch.pytensors_own


def installed() -> bool:
    """Whether innergraph is active: its patches applied, or the hooks of a patched PyTensor on."""
    return bool(_applied) or _active[0]


@dataclass(frozen=True)
class Records:
    """The records at one moment: ``applied`` (in order), ``late`` (by `apply_late`), ``registered`` (patched PyTensor's registrations)."""

    applied: tuple[Patch | DispatchPatch | ItemPatch, ...]
    late: tuple[Patch | DispatchPatch | ItemPatch, ...]
    registered: tuple[DispatchPatch, ...]


def records() -> Records:
    """The records, for inspection (tests of the installation)."""
    return Records(tuple(_applied), tuple(_late), tuple(_registered))


def apply(patch: Patch | DispatchPatch | ItemPatch) -> None:
    """Apply ``patch`` and record it for `revert_all` (monkey-patched form)."""
    patch.apply()
    _applied.append(patch)


def apply_pending() -> None:
    """Apply every late record registered so far (`apply_late`), recording each."""
    for late in _late:
        apply(late)


def revert_all() -> None:
    """Revert every applied record, last first; turn a patched PyTensor's hooks off."""
    while _applied:
        _applied.pop().revert()
    deactivate()


def activate() -> None:
    """Patched PyTensor: turn the hooks its files call on, and make the backends' registrations."""
    _active[0] = True
    for registration in _registered:
        registration.apply()


def deactivate() -> None:
    """Patched PyTensor: turn the hooks off and undo the backends' registrations (no-op when off)."""
    if _active[0]:
        _active[0] = False
        for registration in reversed(_registered):
            registration.revert()
