"""The store of rewritten graphs (`innergraph.patching.rewritten`): what it serves is what rewriting makes, and nothing stale.

Most tests compile twice in this process and let the second compilation read what
the first stored (`another_process` forgets which keys this process wrote, which it
otherwise never reads back). The tests of concurrency and of Numba's cache run fresh
processes on one store.
"""

import hashlib
import os
import textwrap
import warnings
from collections.abc import Callable, Iterator
from typing import Any
from pathlib import Path

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.compile.builders import OpFromGraph
from pytensor.compile.executor import Function
from pytensor.compile.maker import FunctionMaker
from pytensor.compile.mode import Mode, optdb
from pytensor.compile.sharedvalue import SharedVariable
from pytensor.graph.basic import Apply, Constant, equal_computations
from pytensor.graph.traversal import ancestors
from pytensor.graph.op import Op
from pytensor.graph.rewriting.basic import GraphRewriter, in2out, node_rewriter
from pytensor.graph.rewriting.db import RewriteDatabaseQuery

import typed
from children import result, spawn

import innergraph
from innergraph.core.hooks import original, patched_pytensor
from innergraph.patching import rewritten, rewritten_key, rewritten_store
from innergraph.rewriting.db import unregister

FAST_RUN_PY = Mode(linker="py", optimizer="fast_run")


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An empty store of this test's own, and counts from zero."""
    monkeypatch.setenv(rewritten_store.ENV, str(tmp_path))
    monkeypatch.setattr(rewritten, "_rewritten_here", set())
    monkeypatch.setattr(rewritten, "stats", dict.fromkeys(rewritten.stats, 0))
    yield tmp_path


def another_process() -> None:
    """Let this process read what it stored, as any other process would."""
    rewritten._rewritten_here.clear()


def served_after_warming(graph: Callable[[], tuple[pt.TensorVariable, pt.TensorVariable]], rounds: int = 3) -> Function:
    """``graph`` compiled again until the store serves it, at most ``rounds`` times; the caller compiled it first.

    The key covers the state of every loaded module of PyTensor's and innergraph's
    (`rewritten_key.module_state`) and the flags read so far, so a compilation that loads
    a module or reads a flag for the first time stores under a key the next one no
    longer computes, and a compilation that shows a warning stores nothing. How many
    compilations it takes depends on what ran before in the process: CI's shard of the
    oldest PyTensor (a CI run of 2026-12-02, beside the other lane's processes) missed
    on the one after the warm-up, which runs of the same shard on a quiet machine did
    not. Once nothing new is loaded and nothing warns, the next compilation must be
    served; ``rounds`` bounds the wait, so a store that never serves still fails.
    """
    for _ in range(rounds):
        another_process()
        hits = rewritten.stats["hit"]
        fn = compiled(graph())
        if rewritten.stats["hit"] > hits:
            return fn
    raise AssertionError(
        f"the store served none of {rounds} compilations of {graph.__name__} after the first: {rewritten.stats}"
        " (stored: what the store took; a compilation that showed a warning stores nothing)"
    )


def loop_graph(body_scale: float | np.number = 2.0, square: bool = True) -> tuple[pt.TensorVariable, pt.TensorVariable]:
    """A vector, and the sum of a loop over it whose step reads a constant (``body_scale``)."""
    xs = pt.dvector("xs")

    def step(x: pt.TensorVariable, acc: pt.TensorVariable) -> pt.TensorVariable:
        return acc + (x * x if square else x + x) * body_scale

    ys = pytensor.scan(step, sequences=[xs], outputs_info=[pt.constant(np.float64(0.0))], return_updates=False)
    return xs, pt.log1p(ys[-1] ** 2) + pt.exp(xs).sum() * 3.0


def compiled(graph: tuple[pt.TensorVariable, pt.TensorVariable], mode: Mode = FAST_RUN_PY) -> Function:
    xs, out = graph
    return pytensor.function([xs], out, mode=mode)


def entries(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.graph"))


VALUES = np.linspace(-0.5, 0.7, 6)


def test_a_second_compilation_takes_the_stored_graph_and_computes_the_same(store: Path) -> None:
    first = compiled(loop_graph())
    assert rewritten.stats["stored"] == 1 and len(entries(store)) == 1
    another_process()
    second = compiled(loop_graph())
    assert rewritten.stats["hit"] == 1
    assert equal_computations(
        second.maker.fgraph.outputs, first.maker.fgraph.outputs, in_xs=second.maker.fgraph.inputs, in_ys=first.maker.fgraph.inputs
    )
    assert [str(n.op) for n in second.maker.fgraph.toposort()] == [str(n.op) for n in first.maker.fgraph.toposort()]
    assert second(VALUES) == first(VALUES)
    with innergraph.uninstalled():
        reference = compiled(loop_graph())
    np.testing.assert_allclose(second(VALUES), reference(VALUES), rtol=1e-13)


def test_a_graph_this_process_rewrote_is_rewritten_again_without_the_rest_of_the_key_or_the_store(
    store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second compilation of one graph in one process: no full key, no read, no write, vanilla's numbers."""
    first = compiled(loop_graph())
    assert rewritten.stats["stored"] == 1
    full_keys: list[rewritten_key.GraphPart] = []
    real_full_key = rewritten_key.full_key

    def counted(part: rewritten_key.GraphPart, mode: Mode) -> str | None:
        full_keys.append(part)
        return real_full_key(part, mode)

    monkeypatch.setattr(rewritten_key, "full_key", counted)
    real_read = rewritten_store.read
    monkeypatch.setattr(rewritten_store, "read", lambda key: pytest.fail("the store was read for a graph this process rewrote"))
    again = compiled(loop_graph())
    monkeypatch.setattr(rewritten_store, "read", real_read)
    assert rewritten.stats == {"hit": 0, "miss": 1, "stored": 1, "again": 1, "uncached": 0}
    assert full_keys == []
    assert len(entries(store)) == 1
    assert equal_computations(
        again.maker.fgraph.outputs, first.maker.fgraph.outputs, in_xs=again.maker.fgraph.inputs, in_ys=first.maker.fgraph.inputs
    )
    with innergraph.uninstalled():
        reference = compiled(loop_graph())
    np.testing.assert_allclose(again(VALUES), reference(VALUES), rtol=1e-13)
    compiled(loop_graph(body_scale=3.0))  # another graph: its own key, looked up
    assert len(full_keys) == 1 and rewritten.stats["miss"] == 2


def test_a_hit_carries_what_the_rewriting_set_on_the_graph(store: Path) -> None:
    """The linker reads innergraph's mark that its pipeline rewrote the graph: without it a hit's Numba code differs."""

    def plain(fn: Function) -> dict[str, Any]:
        return {k: v for k, v in vars(fn.maker.fgraph).items() if isinstance(v, (bool, int, float, str))}

    first = compiled(loop_graph())
    another_process()
    second = compiled(loop_graph())
    assert rewritten.stats["hit"] == 1
    assert plain(second) == plain(first) and any(v is True for v in plain(first).values())


def test_a_query_of_every_rewrite_is_keyed_and_served(store: Path) -> None:
    """``RewriteDatabaseQuery(include=[None])``, PyTensor's own tests' mode: a None among the tags (it once failed the compilation)."""
    mode = Mode(linker="py", optimizer=RewriteDatabaseQuery(include=[None], exclude=["cxx_only", "BlasOpt"]))
    # A flag this query's rewrites read on first use (the BLAS flags) counts by its value once computed:
    # a process's first compilation and its later ones are keyed apart, alike in every process.
    compiled(loop_graph(body_scale=9.0), mode)
    first = compiled(loop_graph(), mode)
    another_process()
    second = compiled(loop_graph(), mode)
    assert rewritten.stats["stored"] == 2 and rewritten.stats["hit"] == 1
    assert second(VALUES) == first(VALUES)


def test_the_stored_graph_is_put_into_the_callers_function_graph(store: Path) -> None:
    compiled(loop_graph())
    another_process()
    xs, out = loop_graph()
    fn = pytensor.function([xs], out, mode=FAST_RUN_PY)
    assert rewritten.stats["hit"] == 1
    assert fn.maker.fgraph.inputs[0] is xs
    features = {type(f).__name__ for f in fn.maker.fgraph._features}
    assert "DestroyHandler" in features  # what the rewriting attached, attached again


def test_a_function_with_updates_and_shared_variables_runs_from_the_store(store: Path) -> None:
    def build() -> tuple[Function, SharedVariable]:
        state = pytensor.shared(np.ones(3), name="state")
        x = pt.dvector("x")
        return pytensor.function([x], (state * x).sum(), updates={state: state * 2 + x}, mode=FAST_RUN_PY), state

    first, state_1 = build()
    another_process()
    second, state_2 = build()
    assert rewritten.stats["hit"] == 1
    for _ in range(3):
        assert first(VALUES[:3]) == second(VALUES[:3])
    np.testing.assert_array_equal(state_1.get_value(), state_2.get_value())


@pytest.mark.parametrize(
    "edit",
    ["constant value", "constant dtype", "loop body", "config flag", "mode", "numba version", "pytensor version", "module knob"],
)
def test_anything_that_decides_the_rewriting_changes_the_key(
    store: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest, edit: str
) -> None:
    compiled(loop_graph())
    another_process()
    graph = loop_graph()
    mode = FAST_RUN_PY
    if edit == "constant value":
        graph = loop_graph(body_scale=2.5)
    elif edit == "constant dtype":
        graph = loop_graph(body_scale=np.int8(2))  # equal value, other dtype
    elif edit == "loop body":
        graph = loop_graph(square=False)  # x + x instead of x * x: the same types
    elif edit == "config flag":
        monkeypatch.setattr(pytensor.config, "optdb__max_use_ratio", 9.0)
    elif edit == "mode":
        mode = Mode(linker="vm", optimizer="fast_run")
    elif edit == "numba version":
        import importlib.metadata

        installed = importlib.metadata.version
        monkeypatch.setattr(importlib.metadata, "version", lambda name: installed(name) + (".other" if name == "numba" else ""))
        rewritten_key._version.cache_clear()  # what the process read of the installed versions, read again
        request.addfinalizer(rewritten_key._version.cache_clear)
    elif edit == "pytensor version":
        monkeypatch.setattr(pytensor, "__version__", pytensor.__version__ + ".other")
    else:
        from innergraph.rewriting import until_while

        monkeypatch.setattr(until_while, "ENV_FLAG", until_while.ENV_FLAG + "_OTHER")
    fn = compiled(graph, mode)
    assert rewritten.stats["hit"] == 0 and rewritten.stats["miss"] == 2
    with innergraph.uninstalled():
        reference = compiled(graph, mode)
    np.testing.assert_allclose(fn(VALUES), reference(VALUES), rtol=1e-13)


def test_a_rewrite_registered_later_is_applied_and_not_served_around(store: Path) -> None:
    """A new rewrite in the database changes the key; removed again, the first entry is served."""
    compiled(loop_graph())

    @node_rewriter([pt.exp])
    def exp_as_sinh_plus_cosh(fgraph: Any, node: Apply) -> list[Any]:
        return [pt.sinh(node.inputs[0]) + pt.cosh(node.inputs[0])]

    rewriter = in2out(exp_as_sinh_plus_cosh)
    optdb.register("test_rewritten_cache_exp", rewriter, "fast_run", position=0.5)
    try:
        another_process()
        fn = compiled(loop_graph())
        assert rewritten.stats["hit"] == 0
        assert "sinh" in pytensor.dprint(fn, file="str")
    finally:
        unregister(optdb, "test_rewritten_cache_exp", rewriter)
    another_process()
    fn = compiled(loop_graph())
    assert rewritten.stats["hit"] == 1
    assert "sinh" not in pytensor.dprint(fn, file="str")


@pytest.mark.parametrize("damage", ["truncated", "garbage", "payload that does not load", "a constant changed"])
def test_a_corrupted_entry_is_removed_with_one_warning_and_the_graph_rewritten(store: Path, damage: str) -> None:
    first = compiled(loop_graph())
    (entry,) = entries(store)
    data = entry.read_bytes()
    if damage == "truncated":
        entry.write_bytes(data[: len(data) // 2])
    elif damage == "garbage":
        entry.write_bytes(b"\x00" * 100)
    elif damage == "payload that does not load":
        payload = b"\x80\x05not a pickle"
        entry.write_bytes(rewritten_store.MAGIC + hashlib.sha256(payload).digest() + payload)
    else:  # a valid pickle of another graph: 3.0 became 4.0, the digest is the old one
        three, four = np.float64(3.0).tobytes(), np.float64(4.0).tobytes()
        assert data.count(three) >= 1
        entry.write_bytes(data.replace(three, four))
    another_process()
    with pytest.warns(RuntimeWarning, match="removed the rewritten-graph cache entry") as caught:
        fn = compiled(loop_graph())
    assert len([w for w in caught if "rewritten-graph" in str(w.message)]) == 1
    assert rewritten.stats["hit"] == 0
    assert fn(VALUES) == first(VALUES)
    (rewritten_entry,) = entries(store)  # written anew, whole
    assert rewritten_store.read(rewritten_entry.stem) is not None


def test_rewriting_that_warns_is_not_stored_so_the_warning_is_shown_again(store: Path) -> None:
    @node_rewriter([pt.exp])
    def warns(fgraph: Any, node: Apply) -> None:
        warnings.warn("test_rewritten_cache: a rewrite's warning", UserWarning)
        return None

    rewriter = in2out(warns)
    optdb.register("test_rewritten_cache_warns", rewriter, "fast_run", position=0.5)
    try:
        for _ in range(2):
            another_process()
            with pytest.warns(UserWarning, match="a rewrite's warning"):
                compiled(loop_graph())
    finally:
        unregister(optdb, "test_rewritten_cache_warns", rewriter)
    assert rewritten.stats["stored"] == 0 and entries(store) == []


class Applied(Op):
    """``fn`` applied to a vector: an Op whose prop is a lambda, which no name finds again."""

    __props__ = ("fn",)

    def __init__(self, fn: Any) -> None:
        self.fn = fn

    def make_node(self, *inputs: Any) -> Apply:
        x = pt.as_tensor_variable(inputs[0])
        return Apply(self, [x], [x.type()])

    def perform(self, node: Apply, inputs: Any, outputs: Any) -> None:
        outputs[0][0] = self.fn(inputs[0])


def test_an_op_without_a_stable_description_is_rewritten_as_without_the_store(store: Path) -> None:
    xs, out = loop_graph()
    applied = Applied(lambda v: v * 2.0).make_node(pt.exp(xs)).outputs[0]
    fn = pytensor.function([xs], pt.sum(applied) + out, mode=FAST_RUN_PY)
    assert rewritten.stats == {"hit": 0, "miss": 0, "stored": 0, "again": 0, "uncached": 1}
    assert entries(store) == []
    np.testing.assert_allclose(fn(VALUES), 2 * np.exp(VALUES).sum() + compiled(loop_graph())(VALUES), rtol=1e-13)


class Unreadable(Applied):
    """An Op whose prop raises when read: the key gives up, the compilation does not."""

    @property
    def fn(self) -> Any:
        raise RuntimeError("not readable")

    @fn.setter
    def fn(self, value: Any) -> None:
        self._fn = value

    def perform(self, node: Apply, inputs: Any, outputs: Any) -> None:
        outputs[0][0] = self._fn(inputs[0])

    def __eq__(self, other: Any) -> bool:
        return self is other

    def __hash__(self) -> int:
        return id(self)


def test_an_op_the_key_cannot_read_is_rewritten_as_without_the_store(store: Path) -> None:
    xs = pt.dvector("xs")
    fn = pytensor.function([xs], pt.sum(Unreadable(np.exp).make_node(xs).outputs[0]), mode=FAST_RUN_PY)
    assert rewritten.stats == {"hit": 0, "miss": 0, "stored": 0, "again": 0, "uncached": 1}
    np.testing.assert_allclose(fn(VALUES), np.exp(VALUES).sum(), rtol=1e-13)


def calls_graph() -> tuple[pt.TensorVariable, pt.TensorVariable]:
    """A vector, and two calls of one `OpFromGraph`, which innergraph lifts into calls of one body folded into a constant."""
    x, a = pt.dvector("x"), pt.dvector("a")
    shared = OpFromGraph([a], [pt.tanh(a) * 2.0 + a.sum()])
    first, second = (typed.one_tensor(shared(v)) for v in (x, 3.0 * x))
    return x, first + second


def test_a_graph_holding_a_folded_body_is_stored_and_served(store: Path) -> None:
    """The body constant reaches the stored graph; the graph loaded with it computes what the rewritten one does."""
    from innergraph.core.fold import folded_bodies

    def calls(fn: Function) -> tuple[int, int]:
        """How many nodes call a folded body, and how many bodies they call."""
        bodies = folded_bodies(fn.maker.fgraph.outputs)
        constants = {id(c) for c, _ in bodies}
        callers = [n for n in fn.maker.fgraph.apply_nodes if any(id(v) in constants for v in n.inputs)]
        return len(callers), len(bodies)

    compiled(calls_graph())  # the first compilation of a call loads modules, which are part of the key
    fn = compiled(calls_graph())
    assert calls(fn) == (2, 1)
    assert rewritten.stats["stored"] >= 1 and len(entries(store)) >= 1
    served = served_after_warming(calls_graph)
    assert rewritten.stats["hit"] == 1
    assert calls(served) == (2, 1)
    expected = np.tanh(VALUES) * 2.0 + VALUES.sum() + np.tanh(3.0 * VALUES) * 2.0 + 3.0 * VALUES.sum()
    np.testing.assert_allclose(fn(VALUES), expected, rtol=1e-13)
    np.testing.assert_allclose(served(VALUES), expected, rtol=1e-13)


def constant_graph() -> tuple[pt.TensorVariable, pt.TensorVariable]:
    """A matrix, and a sum through products with one constant matrix, which rewriting keeps in the graph."""
    X = pt.dmatrix("X")
    C = pt.constant(np.arange(9.0).reshape(3, 3) / 7.0)
    return X, (pt.dot(X, C) @ C).sum() + pt.dot(X.T, X).sum()


def test_a_hit_puts_the_callers_own_constants_back(store: Path) -> None:
    """The loaded graph holds the caller's constant where the rewritten graph held it, not an unpickled copy.

    Unpickled copies made the loaded graph share constants otherwise than the rewritten
    one (frozen inner graphs re-intern their nodes, which keep the process's own
    constants), and Numba compiled the state-space models' `OpFromGraph` functions again
    in the first process that loaded them (`rewritten._own_constant`).
    """
    compiled(constant_graph())  # the first compilation of this graph's kind loads modules, which are part of the key
    served_after_warming(constant_graph)  # compiled until the store serves it: the key is settled
    another_process()
    X, out = constant_graph()
    (constant,) = [v for v in ancestors([out]) if isinstance(v, Constant)]
    served = pytensor.function([X], out, mode=FAST_RUN_PY)
    assert rewritten.stats["hit"] == 2
    held = rewritten.original_constants(served.maker.fgraph)
    assert len(held) == 1 and held[0] is constant
    values = np.linspace(-1.0, 2.0, 12).reshape(4, 3)
    C = constant.data
    np.testing.assert_allclose(served(values), (values @ C @ C).sum() + (values.T @ values).sum(), rtol=1e-13)


def test_a_stored_constant_unlike_the_callers_is_kept() -> None:
    """A caller whose k-th constant differs from the stored one (another type, another value, none) gets the stored one."""
    stored = pt.constant(np.arange(3.0))
    equal, other_value, other_type = pt.constant(np.arange(3.0)), pt.constant(np.arange(1.0, 4.0)), pt.constant(np.arange(3))
    assert rewritten._own_constant([equal], stored, 0) is equal
    assert rewritten._own_constant([other_value], stored, 0) is stored
    assert rewritten._own_constant([other_type], stored, 0) is stored
    assert rewritten._own_constant([equal], stored, 1) is stored
    from pytensor.link.c.type import generic

    arrays = [Constant(generic, np.arange(3.0)) for _ in range(2)]  # data whose == is elementwise
    assert rewritten._own_constant([arrays[0]], arrays[1], 0) is arrays[1]


def test_uninstall_gives_pytensor_its_own_prepare_fgraph_and_leaves_the_store_alone(store: Path) -> None:
    compiled(loop_graph())
    before = {p: p.read_bytes() for p in entries(store)}
    with innergraph.uninstalled():
        if not patched_pytensor():  # a patched PyTensor keeps its delegating prepare_fgraph, which calls its own body now
            assert FunctionMaker.__dict__["prepare_fgraph"] is original(FunctionMaker, "prepare_fgraph")
        compiled(loop_graph(body_scale=7.0))
    assert {p: p.read_bytes() for p in entries(store)} == before
    assert rewritten.stats["miss"] == 1


def test_the_key_does_not_depend_on_which_flags_the_process_has_computed_yet(monkeypatch: pytest.MonkeyPatch) -> None:
    """Flags computed once from the machine (``compile__timeout``, ``compiledir``) count the same read or not.

    A process that had linked a function had computed ``compile__timeout``, one that had loaded
    everything from Numba's cache had not: the key of its next graph differed, and a rerun of a
    PyMC model missed the store (found on the GARCH model with a mean, 2026-12-01).
    """
    fn = compiled(loop_graph())
    specs: tuple[Any, Any, list[Any]] = (fn.maker.inputs, fn.maker.outputs, [])
    computed = [p for p in pytensor.config._config_var_dict.values() if callable(p.default) and not p.mutable]
    assert {p.name for p in computed} >= {"compile__timeout", "compiledir"}
    for param in computed:
        getattr(pytensor.config, param.name)  # computed now, if not before
    read = rewritten_key.graph_key(fn.maker.fgraph, *specs, FAST_RUN_PY)
    for param in computed:
        monkeypatch.delattr(param, "val")  # as in a process that has not computed them
    assert rewritten_key.graph_key(fn.maker.fgraph, *specs, FAST_RUN_PY) == read is not None


def test_the_key_does_not_depend_on_what_the_process_has_imported_yet() -> None:
    """Numba's version counts the same before Numba is imported: a profiled child imported it early and missed."""
    code = textwrap.dedent(
        """
        import sys
        import innergraph
        from innergraph.patching import rewritten_key
        if sys.argv[1] == "numba":
            import numba
        print(repr(rewritten_key.code_fingerprint(["pytensor.tensor"])))
        """
    )
    import subprocess
    import sys

    before, after = (subprocess.run([sys.executable, "-c", code, first], capture_output=True, text=True, check=True).stdout for first in ("-", "numba"))
    assert before == after and "0." in before


class Doubling(GraphRewriter):
    """Doubles every output: what it does is its class's method, which a key does not read."""

    def apply(self, fgraph: Any) -> None:
        for k, out in enumerate(list(fgraph.outputs)):
            fgraph.replace(out, out * 2.0, reason="doubling")


def test_a_process_never_reads_what_it_stored(store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A method replaced at run time changes no key; the process that stored before it still rewrites anew."""
    rewriter = Doubling()
    optdb.register("test_rewritten_cache_doubling", rewriter, "fast_run", position=100)
    try:
        once = compiled(loop_graph())
        monkeypatch.setattr(Doubling, "apply", lambda self, fgraph: None)
        plain = compiled(loop_graph())
    finally:
        unregister(optdb, "test_rewritten_cache_doubling", rewriter)
    assert rewritten.stats["hit"] == 0
    np.testing.assert_allclose(once(VALUES), 2 * plain(VALUES), rtol=1e-13)


_CHILD = textwrap.dedent(
    """
    import json, sys, time
    import numpy as np
    import innergraph
    import pytensor, pytensor.tensor as pt
    from numba.core import event
    from innergraph.patching import rewritten

    compiled = []

    class Count(event.Listener):
        def on_start(self, ev):
            pass

        def on_end(self, ev):
            compiled.append(ev.data["dispatcher"].py_func.__name__)

    event.register("numba:compile", Count())
    start = float(sys.argv[1])
    while time.time() < start:  # both children compile at once
        time.sleep(0.001)
    xs = pt.dvector("xs")
    if sys.argv[2] == "loop":
        ys = pytensor.scan(lambda x, acc: acc + x * x * 2.0, sequences=[xs], outputs_info=[pt.constant(np.float64(0.0))], return_updates=False)
        # equal nodes in several places (exp, neg, log1p), whose conversions the linker shares in a graph innergraph rewrote
        out = pt.log1p(ys[-1] ** 2) + (pt.sigmoid(xs) * pt.softplus(-xs[::-1]) + pt.sigmoid(ys) * pt.softplus(-ys)).sum()
    else:  # two calls of one OpFromGraph: lifted into calls of one body folded into a constant of the graph
        from pytensor.compile.builders import OpFromGraph
        a = pt.dvector("a")
        shared = OpFromGraph([a], [pt.tanh(a) * 2.0 + a.sum()])
        out = (shared(xs) + shared(3.0 * xs)).sum()
    fn = pytensor.function([xs], out, mode="NUMBA")
    compiled.clear()
    value = float(fn(np.linspace(-0.5, 0.7, 6)))
    print(json.dumps({"value": value, "stats": rewritten.stats, "compiled": compiled}))
    """
)


def test_processes_share_the_store_and_numbas_cache(tmp_path: Path) -> None:
    """Two processes compile at once (both succeed, one whole entry); a third takes it and compiles no Numba code."""
    import time

    env_store = tmp_path / "store"
    os.environ[rewritten_store.ENV] = str(env_store)
    try:
        start = str(time.time() + 3.0)
        racing = [spawn(_CHILD, tmp_path / "compiledir", start, "loop", wait=False) for _ in range(2)]
        first, second = (result(p) for p in racing)
        third = spawn(_CHILD, tmp_path / "compiledir", "0", "loop")
        (entry,) = entries(env_store)
        assert rewritten_store.read(entry.stem) is not None
    finally:
        del os.environ[rewritten_store.ENV]
    assert first["stats"]["stored"] + second["stats"]["stored"] >= 1
    assert third["stats"]["hit"] == 1 and third["stats"]["miss"] == 0
    assert third["compiled"] == []
    assert first["value"] == second["value"] == third["value"]


def test_a_graph_holding_a_folded_body_takes_numbas_cache_from_the_store(tmp_path: Path) -> None:
    """The body constant is keyed by its code, not its pickle: the process that loads the graph compiles no Numba code.

    Keyed by the hash of its pickle (PyTensor's rule for a constant), the loaded body,
    whose equal strings and tuples are shared differently, got a new key, and the
    second process compiled the outer function again.
    """
    os.environ[rewritten_store.ENV] = str(tmp_path / "store")
    try:
        first = spawn(_CHILD, tmp_path / "compiledir", "0", "calls")
        second = spawn(_CHILD, tmp_path / "compiledir", "0", "calls")
    finally:
        del os.environ[rewritten_store.ENV]
    assert first["stats"]["stored"] == 1
    assert second["stats"]["hit"] == 1 and second["stats"]["miss"] == 0
    assert second["compiled"] == []
    assert first["value"] == second["value"]


_USER_CHILD = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import innergraph
    import pytensor, pytensor.tensor as pt
    from pytensor.compile.mode import Mode, optdb
    from innergraph.patching import rewritten
    import rk_user

    x = pt.dvector("x")
    if sys.argv[1] == "rewrite":  # the package's rewrite, registered as users do: in2out of a node rewriter
        optdb.register("rk_user_exp", rk_user.walking, "fast_run", position=0.5)
        out = pt.exp(x).sum()
    else:  # the package's function, wrapped by as_op and applied to a constant: constant folding runs it
        out = (x + rk_user.scaled(pt.constant(np.array([1.0, 2.0])))).sum()
    fn = pytensor.function([x], out, mode=Mode(linker="py", optimizer="fast_run"))
    print(json.dumps({"value": float(fn(np.array([1.0, 0.0]))), "stats": rewritten.stats}))
    """
)

_USER_PACKAGE = textwrap.dedent(
    """
    import pytensor.tensor as pt
    from pytensor.compile.ops import as_op
    from pytensor.graph.rewriting.basic import in2out, node_rewriter

    @node_rewriter([pt.exp])
    def exp_rewrite(fgraph, node):
        return [pt.sinh(node.inputs[0]) + pt.cosh(node.inputs[0])]

    walking = in2out(exp_rewrite, name="rk_user_exp")

    def _scaled(v):
        return v * 2.0

    scaled = as_op(itypes=[pt.dvector], otypes=[pt.dvector])(_scaled)
    """
)


@pytest.mark.parametrize(
    "what, edit, before, after",
    [
        ("rewrite", ("pt.sinh(node.inputs[0]) + pt.cosh(node.inputs[0])", "pt.cosh(node.inputs[0])"), np.e + 1.0, np.cosh(1.0) + 1.0),
        ("function", ("v * 2.0", "v * 3.0"), 7.0, 10.0),
    ],
)
def test_a_users_package_edited_between_processes_is_rewritten_anew(tmp_path: Path, what: str, edit: tuple[str, str], before: float, after: float) -> None:
    """A rewrite registered through ``in2out`` (its function two objects deep) or a function an Op holds: edited, never served stale."""
    package = tmp_path / "rk_user"
    package.mkdir()
    (package / "__init__.py").write_text(_USER_PACKAGE)
    env = {**os.environ, rewritten_store.ENV: str(tmp_path / "store"), "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}

    def child() -> Any:
        import subprocess
        import sys

        process = subprocess.Popen([sys.executable, "-W", "ignore", "-c", _USER_CHILD, what], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        return result(process)

    first = child()
    assert first["stats"]["stored"] == 1 and first["value"] == pytest.approx(before, rel=1e-14)
    assert child()["stats"]["hit"] == 1  # unchanged: served
    (package / "__init__.py").write_text(_USER_PACKAGE.replace(*edit))
    edited = child()
    assert edited["stats"]["hit"] == 0 and edited["value"] == pytest.approx(after, rel=1e-14)
