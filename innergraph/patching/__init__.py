"""Apply and remove innergraph's patches to PyTensor.

One module per PyTensor area patched (`linker`, `printing`, `pickling`, `gradient`); each
exposes ``patches()``, a list of `Patch` (or `ItemPatch`) records. Parts of PyTensor that load on demand
(its Numba dispatchers) are patched when they load (`apply_late`, a
`DispatchPatch`), and unpatched by `uninstall` like the others. `install` is idempotent and `uninstall`
puts back the very objects it replaced, so PyTensor is restored exactly.
The rewrites innergraph registers in PyTensor's database are installed and
removed together with the patches (see `innergraph.rewriting.db`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

__all__ = ["DispatchPatch", "ItemPatch", "Patch", "apply_late", "install", "installed", "uninstall", "uninstalled"]


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


def apply_late(patch: Patch | DispatchPatch) -> None:
    """Patch a part of PyTensor that loads on demand (Numba): now if installed, and on every `install`."""
    _late.append(patch)
    if _applied:
        patch.apply()
        _applied.append(patch)


def installed() -> bool:
    """Whether innergraph's patches are currently applied."""
    return bool(_applied)


def install() -> None:
    """Apply every patch and register innergraph's rewrites (idempotent)."""
    if _applied:
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
    db.unregister_all()


@contextmanager
def uninstalled() -> Iterator[None]:
    """PyTensor exactly as without innergraph for the block; reinstalled after if it was installed.

    ``mode.excluding("innergraph")`` leaves innergraph's patches in place and reaches
    only the outer graph (a native Scan or OpFromGraph compiles its inner graph with
    its own mode). Comparing with vanilla PyTensor means compiling, and for a native
    OpFromGraph first calling, the reference inside this block.

    Examples
    --------
    >>> with innergraph.uninstalled():
    ...     reference = pytensor.function(inputs, outputs)
    """
    was = installed()
    uninstall()
    try:
        yield
    finally:
        if was:
            install()
