"""Apply and remove innergraph's patches to PyTensor.

One module per PyTensor area patched (`linker`, `printing`, `pickling`, `gradient`); each
exposes ``patches()``, a list of records (`innergraph.core.hooks`: `Patch`, `ItemPatch`).
Parts of PyTensor that load on demand (its Numba and JAX dispatchers) are patched when
they load (`innergraph.core.hooks.apply_late`, a `DispatchPatch`), and unpatched by
`uninstall` like the others. `install` is idempotent and `uninstall`
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

from innergraph.core import dispatch, hooks
from innergraph.core.hooks import form, installed, patched_pytensor
from innergraph.core.interning import clear_body_cache, table_kept
from innergraph.patching import gradient, linker, pickling, printing, rewritten
from innergraph.patching.on_import import load_imported
from innergraph.rewriting import db

__all__ = ["form", "install", "installed", "patched_pytensor", "uninstall", "uninstalled"]

# What a linker's first link loads (patching/linker.py's schedule calls `dispatch.load_on_demand`):
# the backends, the code generated from step semantics for every consumer declaring them
# (`Iterate`, `Branch`, `Once`), and the patch of DebugMode's check.
# (literal module names: the upstream series rewrites them to pytensor.innergraph's)
dispatch.load_on_link(dispatch.BACKEND_LINKERS["numba"], "innergraph.backends.numba")
dispatch.load_on_link(dispatch.BACKEND_LINKERS["numba"], "innergraph.backends.numba_generated")
dispatch.load_on_link(dispatch.BACKEND_LINKERS["numba"], "innergraph.backends.numba_link")
dispatch.load_on_link(dispatch.BACKEND_LINKERS["jax"], "innergraph.backends.jax")
dispatch.load_on_link(dispatch.BACKEND_LINKERS["jax"], "innergraph.backends.jax_generated")
dispatch.load_on_link(("pytensor.compile.debug.debugmode", "_Linker"), "innergraph.patching.debugmode")


def install() -> None:
    """Apply every patch and register innergraph's rewrites (idempotent).

    On a patched PyTensor no patch is applied: the rewrites are registered and the
    hooks PyTensor's own files call are turned on.
    """
    if installed():
        return
    if patched_pytensor():
        hooks.activate()
        db.register_all()
        load_imported()  # a dispatch module imported while innergraph was off (`dispatch_loaded`)
        return
    for module in (linker, printing, pickling, gradient, rewritten):
        for patch in module.patches():
            hooks.apply(patch)
    hooks.apply_pending()
    db.register_all()


def uninstall() -> None:
    """Restore PyTensor exactly as it was before `install`."""
    hooks.revert_all()
    db.unregister_all()
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
    was = installed()
    with table_kept():
        uninstall()
        try:
            yield
        finally:
            if was:
                install()
