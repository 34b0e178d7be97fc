# mypy: disable-error-code="override"
# (this file's Ops and linkers declare make_node with the arguments they take, as PyTensor's own do)
"""The patches: exact uninstall, the schedule, hidden nodes never run, pickling, printing."""

import pickle

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.compile.mode import Mode, optdb
from pytensor.graph.basic import Apply, NominalVariable
from pytensor.graph.fg import FunctionGraph
from pytensor.graph.op import Op
from pytensor.link.basic import Linker, PerformLinker
from pytensor.link.vm import VMLinker
from pytensor.scan.op import Scan as NativeScan

import innergraph
from innergraph import InnerGraph, inner_graph
from innergraph.patching import gradient as gradient_patch
from innergraph.patching import linker as linker_patch
from innergraph.patching import printing as printing_patch
from typed import call

LINKERS = ["py", "cvm", "vm", "c|py", "numba"]


class Boom(Op):
    """An Op that fails the test if it is ever executed."""

    __props__ = ()

    def make_node(self, v):
        return Apply(self, [v], [v.type()])

    def perform(self, node, inputs, outputs):
        raise AssertionError("a hidden node was executed by the outer function")


class ParamCount(Op):
    """A consumer that reads its function's signature but never runs the body."""

    __props__ = ()

    def make_node(self, function):
        return Apply(self, [function], [pt.lscalar()])

    def perform(self, node, inputs, outputs):
        outputs[0][0] = np.array(len(node.inputs[0].type.param_types), dtype="int64")


def patched_state():
    return (
        vars(Linker)["schedule"],
        pytensor.printing.debugprint,
        pytensor.dprint,
        "innergraph_fold" in optdb._names,
        vars(NativeScan)["pullback"],
    )


@pytest.mark.monkey_patch_only
def test_uninstall_restores_pytensor_exactly_and_install_is_idempotent():
    assert patched_state() == (linker_patch.schedule, printing_patch.debugprint, printing_patch.debugprint, True, gradient_patch.pullback)
    from innergraph.rewriting import db

    assert len(db.registered()) == 23  # 17 graph passes in optdb, 6 node rewriters in canonicalize/specialize
    innergraph.uninstall()
    try:
        assert patched_state() == (
            linker_patch._original_schedule,
            printing_patch._original_debugprint,
            printing_patch._original_debugprint,
            False,
            gradient_patch._original,
        )
        from innergraph.rewriting import db

        names = [name for name, *_ in db._REWRITES]
        local = [(name, where) for name, _, where, _ in db._LOCAL_REWRITES]
        assert len(names) == 17 and len(local) == 6 and db.registered() == []
        assert not any(name in optdb.__db__ for name in names)
        assert not any(name in optdb[where].__db__ or name in optdb[where]._names for name, where in local)
        assert not any("innergraph" in optdb[where].__db__ for _, where in local)
        assert not any(isinstance(r, db.FunctionRewriter) for r in optdb.query("+minimum_compile").data)
    finally:
        innergraph.install()
        innergraph.install()
    assert patched_state() == (linker_patch.schedule, printing_patch.debugprint, printing_patch.debugprint, True, gradient_patch.pullback)
    from innergraph.rewriting import db

    assert len(db.registered()) == 23


def program():
    x = pt.dvector("x")
    f = inner_graph(lambda u: Boom().make_node(u).outputs[0] * 2, [pt.dvector]).function
    return x, ParamCount()(f) + x.sum()


@pytest.mark.parametrize("linker", LINKERS)
def test_hidden_nodes_get_no_storage_and_never_run(linker):
    x, out = program()
    fn = pytensor.function([x], out, mode=Mode(linker=linker, optimizer="fast_run"))
    assert fn([1.0, 2.0]) == 4.0
    schedule = fn.maker.linker.schedule(fn.maker.fgraph)
    assert any(isinstance(n.op, ParamCount) for n in schedule)
    assert not any(isinstance(n.op, Boom | InnerGraph) for n in schedule)
    # Storage exists for the variables of scheduled nodes (and the map, where the linker keeps one).
    storage = {v for n in schedule for v in (*n.inputs, *n.outputs)}
    storage |= set(getattr(fn.vm, "storage_map", {}))
    for var in storage:
        assert not isinstance(var, NominalVariable)
        assert var.owner is None or not isinstance(var.owner.op, Boom | InnerGraph)


@pytest.mark.parametrize("make_linker", [PerformLinker, lambda: VMLinker(use_cloop=True)], ids=["py", "cvm"])
def test_schedule_folds_bodies_out_of_an_unrewritten_graph(make_linker):
    x, out = program()
    fg = FunctionGraph([x], [out], clone=True)
    assert any(isinstance(n.op, Boom) for n in fg.apply_nodes)
    linker = make_linker().accept(fg)
    order = linker.schedule(fg)
    assert not any(isinstance(n.op, Boom | InnerGraph) for n in order)
    assert not any(isinstance(n.op, Boom | InnerGraph) for n in fg.apply_nodes)
    thunk, inputs, outputs = linker.make_thunk()
    inputs[0].storage[0] = np.array([1.0, 2.0])
    thunk()
    assert outputs[0].storage[0] == 4.0


def test_compiled_function_with_bodies_pickles():
    x, a = pt.dvector("x"), pt.dscalar("a")
    fn = pytensor.function([x, a], call(lambda u: pt.exp(u) * a, x), mode=Mode(linker="cvm", optimizer="fast_run"))
    clone = pickle.loads(pickle.dumps(fn))
    np.testing.assert_allclose(clone([0.0, 1.0], 2.0), fn([0.0, 1.0], 2.0))


def test_dprint_shows_each_folded_body_once_with_named_params():
    x, y = pt.dvector("x"), pt.dvector("y")
    body = lambda u: pt.tanh(u) * 3  # noqa: E731
    fn = pytensor.function([x, y], [call(body, x), call(body, y)], mode=Mode(linker="py", optimizer="fast_run"))
    text = str(pytensor.dprint(fn, file="str"))
    assert text.count("Bodies:") == 1
    assert text.count("\nBody [id") == 1
    assert "p0: Vector(float64" in text
    assert "tanh" in text.lower()


def test_dprint_fills_the_callers_empty_used_ids_as_pytensors_does():
    """PyTensor's `get_node_by_id` passes an empty dict and reads the ids from it (rel-3.3.0's test_get_var_by_id)."""
    from pytensor.printing import get_node_by_id

    x, y = pt.dvector("x"), pt.dvector("y")
    out = call(lambda u, v: u * v, x, y) + x
    ids: dict = {}
    pytensor.dprint(out, file="str", used_ids=ids)
    with innergraph.uninstalled():
        vanilla: dict = {}
        pytensor.dprint(out, file="str", used_ids=vanilla)
    assert len(vanilla) > 3 and all(ids.get(k) == label for k, label in vanilla.items())  # the Bodies section adds its own
    assert get_node_by_id(out, ids[y].removeprefix("[id ").removesuffix("]")) is y


def test_dprint_of_an_unfolded_function_prints_the_body_inline():
    text = pytensor.dprint(inner_graph(lambda u: pt.tanh(u), [pt.dvector]).function, file="str")
    assert "InnerGraph" in text and "Tanh" in text and "Bodies:" not in text


def test_dprint_of_a_built_call_lists_its_folded_body():
    x = pt.dvector("x")
    text = pytensor.dprint(call(lambda u: pt.tanh(u), x), file="str")
    assert "Body(1->1)" in text and "Bodies:" in text and "Tanh" in text


@pytest.mark.monkey_patch_only  # a patched PyTensor delegates instead (tests/test_upstream_form.py)
@pytest.mark.parametrize(
    "dispatched, patched, original",
    [
        ("pytensor.graph.fg.FunctionGraph", "funcify_fgraph_as_one_conversion", "_fgraph_funcify"),  # one conversion
    ],
)
def test_the_numba_dispatch_patches_are_reverted_by_uninstall(dispatched, patched, original):
    import importlib

    import innergraph.backends.numba as backend  # loads PyTensor's Numba dispatchers and patches them
    from pytensor.link.numba.dispatch.basic import numba_funcify_and_cache_key

    module, name = dispatched.rsplit(".", 1)
    cls = getattr(importlib.import_module(module), name)
    assert numba_funcify_and_cache_key.dispatch(cls) is getattr(backend, patched)
    innergraph.uninstall()
    try:
        assert numba_funcify_and_cache_key.dispatch(cls) is getattr(backend, original)
    finally:
        innergraph.install()
    assert numba_funcify_and_cache_key.dispatch(cls) is getattr(backend, patched)


def _accepts_every_call_of(replacement, original) -> list[str]:
    """What ``replacement`` cannot take of the calls ``original`` takes (positionally or by name); empty when all."""
    import inspect

    kinds = inspect.Parameter
    new = list(inspect.signature(replacement).parameters.values())
    var_positional = any(p.kind is kinds.VAR_POSITIONAL for p in new)
    var_keyword = any(p.kind is kinds.VAR_KEYWORD for p in new)
    positional = [p.name for p in new if p.kind in (kinds.POSITIONAL_ONLY, kinds.POSITIONAL_OR_KEYWORD)]
    by_name = {p.name for p in new if p.kind in (kinds.POSITIONAL_OR_KEYWORD, kinds.KEYWORD_ONLY)}
    problems = []
    for i, p in enumerate(inspect.signature(original).parameters.values()):
        if p.kind in (kinds.POSITIONAL_ONLY, kinds.POSITIONAL_OR_KEYWORD):
            if not (i < len(positional) and positional[i] == p.name or i >= len(positional) and var_positional):
                problems.append(f"positional {i} {p.name!r}")
        if p.kind in (kinds.POSITIONAL_OR_KEYWORD, kinds.KEYWORD_ONLY) and p.name not in by_name and not var_keyword:
            problems.append(f"keyword {p.name!r}")
        if p.kind is kinds.VAR_POSITIONAL and not var_positional:
            problems.append(f"*{p.name}")
        if p.kind is kinds.VAR_KEYWORD and not var_keyword:
            problems.append(f"**{p.name}")
    return problems


@pytest.mark.monkey_patch_only  # a patched PyTensor replaces nothing
def test_every_replacement_takes_every_call_its_original_takes():
    """Issue 37: ``numba_funcify_ensure_cache(op, node)`` called positionally, as PyTensor's test_funcify_dispatch_interop
    does, raised a TypeError because innergraph's replacement did not keep the original's signature."""
    import importlib

    from innergraph.core import hooks

    importlib.import_module("innergraph.backends.numba")  # what a Numba link loads (its records apply late)
    importlib.import_module("innergraph.backends.jax")
    checked, problems = 0, {}
    for record in hooks.records().applied:
        original = getattr(record, "original", None)
        # a registration for one of PyTensor's classes is called as PyTensor's function for it (or, for FunctionGraph
        # under Numba, for its base) is; one for innergraph's own Ops follows PyTensor's Op conversions, (op, node, **kwargs)
        if isinstance(record, hooks.DispatchPatch) and not record.cls.__module__.startswith("pytensor."):
            continue
        if not callable(original) or isinstance(original, type) or not callable(record.replacement):
            continue
        checked += 1
        missing = _accepts_every_call_of(record.replacement, original)
        if missing:
            problems[getattr(record, "name", None) or getattr(record, "cls", None)] = missing
    assert checked >= 5 and problems == {}, problems


def test_the_signature_check_sees_a_dropped_parameter():
    def original(op, node=None, **kwargs): ...
    def dropped(op, **kwargs): ...
    def renamed(op, fgraph=None, **kwargs): ...
    assert _accepts_every_call_of(original, original) == []
    assert _accepts_every_call_of(dropped, original) == ["positional 1 'node'"]
    assert _accepts_every_call_of(renamed, original) == ["positional 1 'node'"]  # by name it would reach **kwargs
