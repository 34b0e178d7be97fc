"""The two forms of innergraph (issue 25): monkey-patched PyTensor, and PyTensor built from ``patches/``.

On a patched PyTensor no monkey-patch may be applied: every patch target must be PyTensor's
own object and ``innergraph`` must be ``pytensor.innergraph`` (one copy of each class). On a
released PyTensor each monkey-patch record must be paired with its upstream edit in
`innergraph_patches.series`. ``INNERGRAPH_EXPECT_FORM`` (set by ``.ci/patched``) pins the
form, so a run in the wrong environment fails instead of checking the other branch.
"""

import copyreg
import importlib
import os
import sys

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.graph.fg import FunctionGraph
from pytensor.link.basic import Linker
from pytensor.scan.op import Scan as NativeScan

import innergraph
from innergraph.core import hooks
from innergraph_patches import series

PATCHED = hooks.patched_pytensor()

#: (owner module, attribute path, the module PyTensor defines it in) of objects monkey-patch records replace
TARGETS = [
    ("pytensor.link.basic", "Linker.schedule", "pytensor.link.basic"),
    ("pytensor.printing", "debugprint", "pytensor.printing"),
    ("pytensor", "dprint", "pytensor.printing"),
    ("pytensor.scan.op", "Scan.pullback", "pytensor.scan.op"),
]

#: how `innergraph_patches.series` names a record's owner
_OWNER_LABELS = {"pytensor.link.numba.dispatch.basic": "numba_basic", "pytensor.compile.debug.debugmode": "debugmode", "pytensor.printing": "printing"}


def _resolve(module, path):
    obj = importlib.import_module(module)
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


def test_the_expected_form_is_active():
    expected = os.environ.get("INNERGRAPH_EXPECT_FORM")
    form = innergraph.form()
    assert form in ("patched pytensor", "monkey-patched")
    assert form == ("patched pytensor" if PATCHED else "monkey-patched")
    if expected:
        assert form == expected
    level = os.environ.get("INNERGRAPH_EXPECT_SERIES_LEVEL")  # .ci/patched, patch by patch
    if level is not None:
        from innergraph.startup import upstream

        assert upstream.series_level() == int(level)


def _load_backends():
    """Compile once with Numba so that its on-demand patches (or registrations) are made."""
    x = pt.dvector("x")
    f = pytensor.function([x], innergraph.ifelse(x.sum() > 0, x + 1, x - 1), mode="NUMBA")
    np.testing.assert_allclose(f(np.array([1.0, 2.0])), [2.0, 3.0])
    np.testing.assert_allclose(f(np.array([-1.0, -2.0])), [-2.0, -3.0])
    importlib.import_module("innergraph.patching.debugmode")  # what a DebugMode link loads
    importlib.import_module("innergraph.backends.jax")  # what a JAX link loads




def test_no_monkey_patch_on_a_patched_pytensor_or_every_record_paired():
    _load_backends()
    if PATCHED:
        assert hooks.records().applied == () and hooks.records().late == ()
        assert innergraph is sys.modules["pytensor.innergraph"]
        assert innergraph.core.types is importlib.import_module("pytensor.innergraph.core.types")
        for module, path, defined_in in TARGETS:
            assert _resolve(module, path).__module__ == defined_in, path
        assert pytensor.dprint is pytensor.printing.debugprint
        assert FunctionGraph not in copyreg.dispatch_table
        from pytensor.link.numba.dispatch import basic as numba_basic

        for name in ("cache_key_for_constant", "numba_funcify_ensure_cache"):
            assert vars(numba_basic)[name].__module__ == "pytensor.link.numba.dispatch.basic", name
        assert Linker.schedule.__qualname__ == "Linker.schedule" and NativeScan.pullback.__qualname__ == "Scan.pullback"
        for dispatcher, cls, defined_in in _pytensors_dispatch():
            function = dispatcher.dispatch(cls)
            assert function.__module__ == defined_in and function.__name__ in _DELEGATED, (cls, function)
        assert all(not hooks.replaces_pytensors_own(p) for p in hooks.records().registered)
        assert "numba_funcify_and_cache_key[FunctionGraph]" in {_owner_name(p) for p in hooks.records().registered}
    else:
        records = [
            p for p in hooks.records().applied if not isinstance(p, hooks.DispatchPatch) or hooks.replaces_pytensors_own(p)
        ]
        replaced = {_owner_name(p) for p in records}
        assert "jax_funcify[Scan]" in replaced
        # PyTensor registers its graph conversion for AbstractFunctionGraph: innergraph's for FunctionGraph replaces nothing
        registrations = {_owner_name(p) for p in hooks.records().applied if isinstance(p, hooks.DispatchPatch)} - replaced
        assert "numba_funcify_and_cache_key[FunctionGraph]" in registrations
        paired = {edit.replaces for edit in series.EDITS if edit.replaces}
        assert replaced, "no monkey-patch applied on a released PyTensor"
        assert replaced <= paired, f"monkey-patches with no upstream edit in innergraph_patches/series.py: {replaced - paired}"
        # the hooks the edits call exist, with the names the series gives them
        for edit in series.EDITS:
            if isinstance(edit, series.Delegate):
                delegate = importlib.import_module(edit.module.replace("pytensor.innergraph", "innergraph"))
                assert callable(getattr(delegate, edit.replacement)), edit


#: the names of PyTensor's conversions the series makes delegate to innergraph
_DELEGATED = {e.name for e in series.EDITS if isinstance(e, series.Delegate)}


def _pytensors_dispatch():
    """(dispatcher, PyTensor's class, module of PyTensor's conversion) whose registered function the library replaces on a released PyTensor."""
    from pytensor.link.jax.dispatch import jax_funcify

    return [(jax_funcify, NativeScan, "pytensor.link.jax.dispatch.scan")]


def test_the_series_readme_lists_every_record_and_its_upstream_form():
    """``patches/README.md``'s table of records names each record innergraph applies (here, or would apply on a released PyTensor)."""
    from innergraph_patches.build import REPOSITORY

    _load_backends()
    importlib.import_module("innergraph.backends.jax_generated")  # its registrations (a JAX link loads it)
    readme = (REPOSITORY / "patches" / "README.md").read_text()
    table = readme[readme.index("| record in the library") : readme.index("## Tested patch by patch")]
    records = hooks.records().applied if not PATCHED else hooks.records().registered
    ours = [
        p
        for p in records
        if not isinstance(p, hooks.DispatchPatch) or p.cls.__module__.split(".")[0] in ("pytensor", "innergraph")
    ]
    assert ours
    for record in ours:
        assert f"`{_owner_name(record)}`" in table, f"patches/README.in: no row for the record {_owner_name(record)}"


def _owner_name(patch):
    """``"Owner.name"`` of a record, as `series.Edit.replaces` spells it (``"dispatcher[Class]"`` for a re-registration)."""
    from innergraph.patching.on_import import ImportHook

    if isinstance(patch, ImportHook):
        return "sys.meta_path[ImportHook]"
    if isinstance(patch, hooks.DispatchPatch):
        return f"{patch.dispatcher.__name__}[{patch.cls.__name__}]"
    if isinstance(patch, hooks.ItemPatch):
        return f"copyreg.dispatch_table[{patch.key.__name__}]"
    if patch.owner is pytensor and patch.name == "dprint":
        return "printing.debugprint"  # pytensor.dprint is pytensor.printing.debugprint: one edit
    owner = patch.owner
    label = _OWNER_LABELS.get(owner.__name__, owner.__name__) if isinstance(owner, type(sys)) else owner.__name__
    return f"{label}.{patch.name}"


def test_hooks_are_off_while_uninstalled_in_either_form():
    x = pt.dvector("x")
    graph = innergraph.call(lambda u: pt.tanh(u) * 2, x)
    with innergraph.uninstalled():
        assert innergraph.form() == "not installed"
        assert not innergraph.installed()
    assert innergraph.installed()
    f = pytensor.function([x], graph)
    np.testing.assert_allclose(f(np.array([0.5, -1.0])), np.tanh([0.5, -1.0]) * 2)
    assert "Bodies:" in pytensor.dprint(f, file="str")



def test_the_replacements_reach_pytensors_own_conversion_and_delegates_follow_install():
    """The library's one-conversion registration calls PyTensor's graph conversion; on a patched PyTensor a delegate calls innergraph only while installed."""
    from pytensor.graph.fg import AbstractFunctionGraph
    from pytensor.link.numba.dispatch import basic as numba_basic_module
    from pytensor.link.numba.dispatch.basic import numba_funcify_and_cache_key

    import innergraph.backends.numba as backend

    # Both forms: a registration for FunctionGraph; the conversion registered for AbstractFunctionGraph (the
    # frozen inner graphs) records them for the Scan's body by reference, and is PyTensor's once uninstalled
    # PyTensor's own registration: a delegate from the series' patch 4 on (whose body is the base), even on a
    # PyTensor carrying only patches 1-4, which innergraph still monkey-patches; the function itself on a release
    own = numba_basic_module.numba_funcify_FunctionGraph
    base = hooks.original(numba_basic_module, "numba_funcify_FunctionGraph")
    delegates = own is not base
    assert backend._fgraph_funcify is base and (delegates or not PATCHED)
    registered = numba_funcify_and_cache_key.registry[AbstractFunctionGraph]
    if PATCHED:
        assert registered is own
        assert hooks.hook("pytensor.innergraph.backends.numba", "funcify_other_fgraph", base) is backend.funcify_other_fgraph
    else:
        assert registered is backend.funcify_other_fgraph
    assert numba_funcify_and_cache_key.dispatch(FunctionGraph) is backend.funcify_fgraph_as_one_conversion
    with innergraph.uninstalled():
        assert numba_funcify_and_cache_key.dispatch(FunctionGraph) is own
        assert numba_funcify_and_cache_key.registry[AbstractFunctionGraph] is own
        if delegates:
            assert hooks.hook("pytensor.innergraph.backends.numba", "funcify_other_fgraph", base) is base
    assert numba_funcify_and_cache_key.dispatch(FunctionGraph) is backend.funcify_fgraph_as_one_conversion


@pytest.mark.skipif(not PATCHED, reason="a patched PyTensor's delegates: a released PyTensor has none (its own "
                    "function is the one a record replaced: tests/test_patching.py)")
def test_on_a_patched_pytensor_the_delegates_call_innergraph_only_while_installed():
    from pytensor.link.numba.dispatch import basic as numba_basic_module

    import innergraph.backends.numba as backend

    key_base = hooks.original(numba_basic_module, "cache_key_for_constant")
    assert key_base is getattr(numba_basic_module, "_cache_key_for_constant_base")  # what patch 4 adds
    assert hooks.hook("pytensor.innergraph.backends.numba", "cache_key_for_constant", key_base) is backend.cache_key_for_constant
    with innergraph.uninstalled():
        assert hooks.hook("pytensor.innergraph.backends.numba", "cache_key_for_constant", key_base) is key_base
