"""Apply and remove innergraph's patches to PyTensor.

One module per PyTensor area patched (`linker`, `printing`, `pickling`, `gradient`); each
exposes ``patches()``, a list of `Patch` (or `ItemPatch`) records. Parts of PyTensor that load on demand
(its Numba dispatchers) are patched when they load (`apply_late`, a
`DispatchPatch`), and unpatched by `uninstall` like the others. `install` is idempotent and `uninstall`
puts back the very objects it replaced, so PyTensor is restored exactly.
The rewrites innergraph registers in PyTensor's database are installed and
removed together with the patches (see `innergraph.rewriting.db`).

Two forms
---------
monkey-patched
    PyTensor as released: `install` applies the `Patch` records above.
patched pytensor
    A PyTensor built from the upstream series (``patches/``, `innergraph_patches`): its own
    files call the same hook functions these records install (each record's upstream edit,
    `innergraph_patches.series.EDITS`), so `install` applies *no* record. It registers the
    rewrites and turns the hooks on (`installed`); `uninstall` turns them off again, which
    is how PyTensor behaves without innergraph. `form` says which form is active.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache
from typing import Any

__all__ = [
    "DispatchPatch",
    "ItemPatch",
    "Patch",
    "apply_late",
    "form",
    "hook",
    "install",
    "installed",
    "original",
    "patched_pytensor",
    "replaces_pytensors_own",
    "uninstall",
    "uninstalled",
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
    """Whether the imported PyTensor carries the whole upstream series (this module is then ``pytensor.innergraph.patching``).

    The library also runs on a PyTensor carrying only the series' first, inert patches,
    and monkey-patches it as a released one.
    """
    upstream = __name__.startswith("pytensor.")
    from innergraph.patching.upstream import patched_pytensor as whole_series  # library only

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
    import importlib

    return getattr(importlib.import_module(module), name)


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


def install() -> None:
    """Apply every patch and register innergraph's rewrites (idempotent).

    On a patched PyTensor no patch is applied: the rewrites are registered and the
    hooks PyTensor's own files call are turned on.
    """
    if installed():
        return
    if patched_pytensor():
        from innergraph.rewriting import db as registry

        _active[0] = True
        for registration in _registered:
            registration.apply()
        registry.register_all()
        from innergraph.patching.on_import import load_imported

        load_imported()  # a dispatch module imported while innergraph was off (`dispatch_loaded`)
        return
    from innergraph.patching import gradient, linker, pickling, printing
    from innergraph.rewriting import db

    for module in (linker, printing, pickling, gradient):
        for patch in module.patches():
            patch.apply()
            _applied.append(patch)
    for late in _late:
        late.apply()
        _applied.append(late)
    db.register_all()


def uninstall() -> None:
    """Restore PyTensor exactly as it was before `install`."""
    from innergraph.rewriting import db

    while _applied:
        _applied.pop().revert()
    if _active[0]:
        _active[0] = False
        for registration in reversed(_registered):
            registration.revert()
    db.unregister_all()
    from innergraph.core.interning import clear_body_cache

    clear_body_cache()  # interned bodies were compiled by the rewrites just removed


@contextmanager
def uninstalled() -> Iterator[None]:
    """PyTensor exactly as without innergraph for the block; reinstalled after if it was installed.

    ``mode.excluding("innergraph")`` leaves innergraph's patches in place and reaches
    only the outer graph (a native Scan or OpFromGraph compiles its inner graph with
    its own mode). Comparing with vanilla PyTensor means compiling, and for a native
    OpFromGraph first calling, the reference inside this block.

    Innergraph's table of interned bodies (`innergraph.core.interning`), which `uninstall`
    clears, is back as it was after the block when innergraph is installed again.

    Examples
    --------
    >>> with innergraph.uninstalled():
    ...     reference = pytensor.function(inputs, outputs)
    """
    from innergraph.core.interning import table_kept

    was = installed()
    with table_kept():
        uninstall()
        try:
            yield
        finally:
            if was:
                install()
