"""The key of the store of rewritten graphs, called directly (issue 47).

`innergraph.patching.rewritten_key` digests everything PyTensor's rewriting reads: the
graph, the specs, the mode, the rewrite database, the code, the configuration and the
state of PyTensor's and innergraph's modules. A key that misses something serves a stale
graph; a key that holds something unstable never hits. `tests/test_rewritten_cache.py`
reaches it through compilations (some in fresh processes, with Numba); these call each
part on small graphs, Ops, modes, databases and fake modules, with literal expectations,
and no compilation (a fault planted in the module fails here in about a second).
"""

import collections
import dataclasses
import enum
import hashlib
import importlib.metadata
import logging
import math
import pickle
import platform
import sys
import types
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor import config
from pytensor.compile.mode import Mode
from pytensor.graph.basic import Apply, Variable
from pytensor.graph.fg import FunctionGraph
from pytensor.graph.op import Op
from pytensor.graph.rewriting.basic import GraphRewriter, graph_rewriter, in2out, node_rewriter
from pytensor.graph.rewriting.db import EquilibriumDB, RewriteDatabaseQuery, SequenceDB
from pytensor.link.basic import PerformLinker
from pytensor.misc.ordered_set import OrderedSet

from innergraph.patching import rewritten_key as module
from innergraph.patching.rewritten_key import (
    Unstable,
    _Encoder,
    _is_cache,
    _named,
    _package_files,
    _version,
    code_fingerprint,
    configuration,
    database_description,
    database_modules,
    defining_modules,
    graph_key,
    graph_part,
    mode_description,
    module_state,
    query_modules,
)

HERE = __name__  # the module of this file's classes, as the key names them
TENSOR_TYPE = ("pytensor.tensor.type", "TensorType")
BASIC = "pytensor.graph.rewriting.basic"


def tensor_type(dtype: str, shape: tuple[Any, ...]) -> tuple[Any, ...]:
    """A `TensorType`'s encoding, spelled out."""
    return ("type", TENSOR_TYPE, (("dtype", ("str", dtype)), ("shape", ("tuple", tuple((type(d).__name__, d) for d in shape)))))


VECTOR, SCALAR = tensor_type("float64", (None,)), tensor_type("float64", ())


class Scaled(Op):
    """Its first input times ``factor``, labelled: an Op whose props are a number and a string."""

    __props__: tuple[str, ...] = ("factor", "label")

    def __init__(self, factor: float, label: str = "s") -> None:
        self.factor, self.label = factor, label

    def make_node(self, *inputs: Any) -> Apply:
        tensors = [pt.as_tensor_variable(v) for v in inputs]
        return Apply(self, tensors, [tensors[0].type()])

    def perform(self, node: Apply, inputs: Any, outputs: Any) -> None:
        outputs[0][0] = inputs[0] * self.factor


def apply(op: Op, *inputs: Any) -> Variable:
    """``op``'s one output on ``inputs``."""
    return op.make_node(*inputs).outputs[0]


def scaled_op(factor: float, label: str) -> tuple[Any, ...]:
    return ("op", (HERE, "Scaled"), (("factor", ("float", factor)), ("label", ("str", label))))


class Plain(Op):
    """An Op without props, described by its attributes."""

    def __init__(self, **attributes: Any) -> None:
        for name, value in attributes.items():
            setattr(self, name, value)

    def make_node(self, *inputs: Any) -> Apply:
        x = pt.as_tensor_variable(inputs[0])
        return Apply(self, [x], [x.type()])

    def perform(self, node: Apply, inputs: Any, outputs: Any) -> None:
        outputs[0][0] = inputs[0]


class Holding(Scaled):
    """An Op whose prop is any object: a variable, a lambda, ..."""

    __props__ = ("held",)

    def __init__(self, held: Any) -> None:
        self.held = held
        self.factor = 1.0

    def __eq__(self, other: Any) -> bool:
        return self is other

    def __hash__(self) -> int:
        return id(self)


class Unreadable(Scaled):
    """An Op whose prop raises when read: not an instability the key knows, an error it survives."""

    __props__ = ("fn",)

    def __init__(self) -> None:
        self.factor = 1.0

    @property
    def fn(self) -> Any:
        raise RuntimeError("not readable")

    def __str__(self) -> str:
        return "Unreadable"

    def __eq__(self, other: Any) -> bool:
        return self is other

    def __hash__(self) -> int:
        return id(self)


class Color(enum.Enum):
    RED = 1


@dataclasses.dataclass
class Point:
    x: int
    y: str


class Bag:
    """An object whose repr is its address: described by its class and attributes."""

    def __init__(self, **attributes: Any) -> None:
        vars(self).update(attributes)


class Shown(Bag):
    """An object with a repr of its own: the key does not guess what it shows."""

    def __repr__(self) -> str:
        return "Shown()"


class _EqualByName(type):
    """A metaclass under which classes of one name compare equal."""

    def __eq__(cls, other: object) -> bool:
        return isinstance(other, type) and cls.__qualname__ == other.__qualname__

    __hash__ = type.__hash__


class Redefined(metaclass=_EqualByName):
    pass


FIRST_REDEFINED = Redefined


class Redefined(metaclass=_EqualByName):  # type: ignore[no-redef]  # the name now finds this one (a cell run twice)
    pass


def helper() -> None:
    """A module-level function: found again by its name."""


class Linked(PerformLinker):
    """A linker with settings of every kind."""

    def __init__(self) -> None:
        super().__init__()
        self.flag, self.count, self.ratio, self.word, self.things = True, 3, 0.5, "w", [1]


@graph_rewriter
def rk_graph_rewrite(fgraph: FunctionGraph) -> None:
    """A graph rewriter defined here, doing nothing."""


@node_rewriter([Scaled])
def rk_node_rewrite(fgraph: FunctionGraph, node: Apply) -> None:
    """A node rewriter defined here, doing nothing."""
    return None


def small_db() -> SequenceDB:
    """A database of this file's rewrites: a graph rewriter at 2.5 and an equilibrium database at 1 holding a node rewriter."""
    db, sub = SequenceDB(), EquilibriumDB()
    sub.register("rk_node", rk_node_rewrite, "rk_inner")
    db.register("rk_graph", rk_graph_rewrite, "rk_tag", position=2.5)
    db.register("rk_sub", sub, "rk_tag", position=1)
    return db


EQUILIBRIUM_SETTINGS = (("ignore_newtrees", True), ("name", "rk_sub"), ("tracks_on_change_inputs", False))  # registering names it
SMALL_DB = (
    "SequenceDB",
    (),
    (
        ("rk_graph", 2.5, ("FromFunctionGraphRewriter", "rk_graph", "rk_tag"), (BASIC, "FromFunctionGraphRewriter")),
        (
            "rk_sub",
            1.0,
            ("EquilibriumDB", "rk_sub", "rk_tag"),
            ("EquilibriumDB", EQUILIBRIUM_SETTINGS, (("rk_node", 0.0, ("FromFunctionNodeRewriter", "rk_inner", "rk_node"), (BASIC, "FromFunctionNodeRewriter")),)),
        ),
    ),
)


def spec(mutable: bool = False, borrow: bool = False, update: Any = None) -> SimpleNamespace:
    """What `graph_key` reads of a `SymbolicInput` (and, ``borrow`` alone, of a `SymbolicOutput`)."""
    return SimpleNamespace(mutable=mutable, borrow=borrow, update=update)


PY = Mode(linker="py", optimizer="fast_run")


def key(inputs: list[Variable], outputs: list[Variable], mode: Mode = PY, specs: list[Any] | None = None) -> str | None:
    fgraph = FunctionGraph(inputs, outputs)
    return graph_key(fgraph, specs or [spec() for _ in inputs], [spec() for _ in outputs], [], mode)


def graph(scale: Any = np.float64(2.0), name: str = "x", shape: tuple[Any, ...] = (None,), op: Op | None = None) -> tuple[list[Variable], list[Variable]]:
    """``exp(x) * scale``, through ``op`` if given."""
    x = pt.tensor(name, dtype="float64", shape=shape)
    y = pt.exp(x) * pt.constant(scale)
    return [x], [apply(op, y) if op is not None else y]


# -- what the key covers ------------------------------------------------------------------


def test_the_same_graph_built_twice_has_one_key() -> None:
    first = key(*graph())
    assert first is not None and len(first) == 64
    assert key(*graph()) == first
    assert key(*graph(op=Scaled(2.0))) == key(*graph(op=Scaled(2.0))) != first


@pytest.mark.parametrize(
    "other",
    [
        pytest.param(lambda: graph(scale=np.float64(2.5)), id="constant value"),
        pytest.param(lambda: graph(scale=np.float32(2.0)), id="constant dtype"),  # an equal value
        pytest.param(lambda: graph(scale=np.full(3, 2.0)), id="constant shape"),
        pytest.param(lambda: graph(shape=(3,)), id="input shape"),
        pytest.param(lambda: graph(name="y"), id="input name"),
        pytest.param(lambda: graph(op=Scaled(2.0)), id="one node more"),
    ],
)
def test_another_graph_has_another_key(other: Any) -> None:
    assert key(*other()) != key(*graph())


def test_an_ops_props_and_a_variables_name_count() -> None:
    base = key(*graph(op=Scaled(2.0, "a")))
    assert key(*graph(op=Scaled(3.0, "a"))) != base
    assert key(*graph(op=Scaled(2.0, "b"))) != base
    inputs, outputs = graph(op=Scaled(2.0, "a"))
    outputs[0].name = "named"
    assert key(inputs, outputs) != base


def test_an_op_without_props_counts_by_its_attributes_not_its_caches() -> None:
    base = key(*graph(op=Plain(level=1)))
    assert key(*graph(op=Plain(level=2))) != base
    cached = Plain(level=1)
    setattr(cached, "_thunk", object())  # filled when compiled or run: never decides the rewriting
    assert key(*graph(op=cached)) == base


def test_the_specs_count() -> None:
    inputs, outputs = graph()
    fgraph = FunctionGraph(inputs, outputs)
    keys = {
        graph_key(fgraph, [spec(*flags)], [spec(borrow=out)], extra, PY)
        for flags in [(False, False, None), (True, False, None), (False, True, None), (False, False, inputs[0])]
        for out in (False, True)
        for extra in ([], [spec(borrow=True)])
    }
    assert len(keys) == 16 and None not in keys


def test_the_mode_the_query_the_database_and_a_flag_count(monkeypatch: pytest.MonkeyPatch) -> None:
    base = key(*graph())
    assert key(*graph(), mode=Mode(linker="cvm", optimizer="fast_run")) != base
    assert key(*graph(), mode=PY.excluding("fusion")) != base
    assert key(*graph(), mode=Mode(linker="py", optimizer="fast_run", db=small_db())) != base
    db = small_db()
    mode = Mode(linker="py", optimizer="fast_run", db=db)
    before = key(*graph(), mode=mode)
    db.register("rk_later", in2out(rk_node_rewrite, name="rk_later"), "fast_run", position=3)
    assert key(*graph(), mode=mode) != before
    monkeypatch.setattr(config, "optdb__max_use_ratio", config.optdb__max_use_ratio + 1.0)
    assert key(*graph()) != base


def test_innergraphs_environment_and_a_module_knob_count_another_variable_does_not(monkeypatch: pytest.MonkeyPatch) -> None:
    base = key(*graph())
    monkeypatch.setenv("RK_DIRECT_UNRELATED", "1")
    assert key(*graph()) == base
    monkeypatch.setenv("INNERGRAPH_RK_DIRECT", "1")
    with_env = key(*graph())
    assert with_env != base
    from innergraph.rewriting import until_while

    monkeypatch.setattr(until_while, "ENV_FLAG", until_while.ENV_FLAG + "_OTHER")
    assert key(*graph()) not in (base, with_env)


@pytest.mark.parametrize(
    "held",
    [
        pytest.param(lambda: pt.dscalar("s"), id="a variable"),
        pytest.param(lambda: (lambda v: v), id="a lambda"),
        pytest.param(lambda: object(), id="an object known by its address only"),
        pytest.param(lambda: np.array([None]), id="an array of objects"),
    ],
)
def test_an_op_holding_what_no_other_process_can_describe_has_no_key(held: Any, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger=module.__name__)
    assert key(*graph(op=Holding(held()))) is None
    assert [r for r in caplog.records if r.name == module.__name__] == []  # an instability the key knows: nothing to report


def test_an_op_the_key_cannot_read_has_no_key_and_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger=module.__name__)
    assert key(*graph(op=Unreadable())) is None
    (record,) = [r for r in caplog.records if r.name == module.__name__]
    assert record.levelno == logging.DEBUG and "no key for rewriting" in record.getMessage() and "not readable" in record.getMessage()


@pytest.mark.parametrize("raised", [Unstable("a rewrite no other process can describe"), ValueError("a database the key cannot read")])
def test_a_process_part_that_cannot_be_described_leaves_the_request_part_and_no_key(
    raised: Exception, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """`full_key` fails alone: the request's part is still taken (what `rewritten` remembers), the key is None."""
    caplog.set_level(logging.DEBUG, logger=module.__name__)
    fgraph = FunctionGraph(*graph())
    specs: tuple[list[Any], list[Any], list[Any]] = ([spec()], [spec()], [])
    part = graph_part(fgraph, *specs, PY)
    assert part is not None

    def fails(db: Any) -> Any:
        raise raised

    monkeypatch.setattr(module, "database_description", fails)
    assert graph_part(fgraph, *specs, PY) == part
    assert module.full_key(part, PY) is None and graph_key(fgraph, *specs, PY) is None
    logged = [r for r in caplog.records if r.name == module.__name__]
    if isinstance(raised, Unstable):
        assert logged == []  # an instability the key knows: nothing to report
    else:
        assert len(logged) == 2 and all("no key for rewriting with" in r.getMessage() and "cannot read" in r.getMessage() for r in logged)


def test_the_request_part_is_an_immutable_value() -> None:
    """Equal parts of two builds of one graph are one set member; a part cannot be edited after it is taken."""
    parts = [graph_part(FunctionGraph(*graph()), [spec()], [spec()], [], PY) for _ in range(2)]
    assert parts[0] is not None and len(set(parts)) == 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        parts[0].digest = "another"  # type: ignore[misc]


def test_a_mode_whose_rewriter_is_no_query_has_no_key() -> None:
    class Nothing(GraphRewriter):
        def apply(self, fgraph: Any) -> None:
            pass

    mode = Mode(linker="py", optimizer=Nothing())
    assert key(*graph(), mode=mode) is None
    with pytest.raises(Unstable, match="no query"):
        mode_description(mode)


def test_the_key_is_the_digest_of_format_4_and_its_parts() -> None:
    """Recomputed from the parts, with the specs spelled out and the packages of the graph's and the database's classes."""
    x = pt.dvector("x")
    y = apply(Scaled(2.0, "a"), x, x)
    db = small_db()
    mode = Mode(linker="py", optimizer="fast_run", db=db)
    fgraph = FunctionGraph([x], [y, x])
    inputs = [spec(mutable=True, update=y)]
    found = graph_key(fgraph, inputs, [spec(borrow=True), spec()], [spec(borrow=True)], mode)
    request = (
        4,
        _Encoder().graph(fgraph.inputs, fgraph.outputs),
        ((tuple([True, False, True]),), tuple([True, False, True])),  # two tuples, as graph_part builds them: a pickle keeps which objects are one
        mode_description(mode),
    )
    digest = hashlib.sha256(pickle.dumps(request, protocol=5)).hexdigest()
    part = graph_part(fgraph, inputs, [spec(borrow=True), spec()], [spec(borrow=True)], mode)
    assert part is not None and part.digest == digest
    parts = (
        digest,
        database_description(db),
        code_fingerprint(["pytensor", HERE, "types"]),  # TensorType's package, this file (Scaled; the database's functions), types (a walk meets SimpleNamespace)
        (configuration(), module_state()),
    )
    assert found == hashlib.sha256(pickle.dumps(parts, protocol=5)).hexdigest()
    unread = graph_key(fgraph, [spec(mutable=True)], [spec(borrow=True), spec()], [spec(borrow=True)], mode)
    assert unread != found and unread is not None


# -- the graph's encoding -----------------------------------------------------------------


def test_a_graph_is_encoded_by_position_type_name_and_op() -> None:
    x = pt.dvector("x")
    two = pt.constant(np.float64(2.0), name="two")
    y = apply(Scaled(2.0, "a"), x, two)
    y.name = "y"
    z = apply(Scaled(3.0, "b"), y, x)
    encoder = _Encoder()
    constant = ("c", SCALAR, ("nd", "<f8", (), hashlib.sha256(np.float64(2.0).tobytes()).hexdigest()), "two")
    assert encoder.graph([x], [z, x, two]) == (
        ((VECTOR, "x"),),
        (
            (scaled_op(2.0, "a"), (("i", 0), constant), ((VECTOR, "y"),)),
            (scaled_op(3.0, "b"), (("n", 0, 0), ("i", 0)), ((VECTOR, None),)),
        ),
        (("n", 1, 0), ("i", 0), constant),
    )
    assert encoder.modules == {HERE, "pytensor.tensor.type"}


def test_a_variable_the_graph_does_not_compute_is_unstable() -> None:
    x = pt.dvector("x")
    with pytest.raises(Unstable, match="neither an input"):
        _Encoder().graph([], [apply(Scaled(2.0), x)])


def test_an_op_is_encoded_once_and_an_op_holding_itself_ends_in_a_cycle() -> None:
    encoder = _Encoder()
    op = Scaled(2.0, "a")
    assert encoder.op(op) == scaled_op(2.0, "a") and encoder.op(op) is encoder.op(op)
    selfish = Plain()
    setattr(selfish, "me", selfish)
    assert encoder.op(selfish) == ("op", (HERE, "Plain"), (("me", ("cycle",)),))


def test_attributes_without_props_are_sorted_by_name_and_keep_a_classs_private_names() -> None:
    op = Plain(zz="a", aa="b", _cache=1, _Plain__fn=2, _Op__level=3, _Other__x=4)
    assert _Encoder().attributes(op) == (("_Op__level", ("int", 3)), ("_Plain__fn", ("int", 2)), ("aa", ("str", "b")), ("zz", ("str", "a")))
    assert (_is_cache("_thunk", op), _is_cache("level", op), _is_cache("_Plain__fn", op), _is_cache("_Other__x", op)) == (True, False, False, True)


def test_a_type_is_encoded_by_its_class_and_props() -> None:
    encoder = _Encoder()
    assert encoder.tensor_type(pt.TensorType("int8", shape=(3, None))) == tensor_type("int8", (3, None))
    assert encoder.modules == {"pytensor.tensor.type"}


def _values() -> list[tuple[Any, Any]]:
    x = pt.dvector("x")
    y = apply(Scaled(2.0, "a"), x)
    fgraph = FunctionGraph([x], [y], clone=False)
    return [
        (None, ("NoneType", None)),
        (Ellipsis, ("ellipsis", Ellipsis)),
        (True, ("bool", True)),
        (3, ("int", 3)),
        (1.5, ("float", 1.5)),
        (1j, ("complex", 1j)),
        ("s", ("str", "s")),
        (b"b", ("bytes", b"b")),
        (slice(1, None, 2), ("slice", ("int", 1), ("NoneType", None), ("int", 2))),
        ((1, "a"), ("tuple", (("int", 1), ("str", "a")))),
        ([2], ("list", (("int", 2),))),
        ({3, 1}, ("set", (("int", 1), ("int", 3)))),
        (frozenset({"b", "a"}), ("set", (("str", "a"), ("str", "b")))),
        (OrderedSet([3, 1]), ("ordered", (("int", 3), ("int", 1)))),
        ({"b": 1, "a": 2}, ("dict", ((("str", "a"), ("int", 2)), (("str", "b"), ("int", 1))))),
        (np.arange(3.0), ("nd", "<f8", (3,), hashlib.sha256(np.arange(3.0).tobytes()).hexdigest())),
        (np.arange(6.0)[::2], ("nd", "<f8", (3,), hashlib.sha256(np.array([0.0, 2.0, 4.0]).tobytes()).hexdigest())),
        (np.float32(1.5), ("np", "<f4", np.float32(1.5).tobytes())),
        (np.dtype("int8"), ("dtype", "|i1")),
        (Scaled(2.0, "a"), scaled_op(2.0, "a")),
        (pt.dvector().type, VECTOR),
        (fgraph, ("fgraph", "FunctionGraph", (((VECTOR, "x"),), ((scaled_op(2.0, "a"), (("i", 0),), ((VECTOR, None),)),), (("n", 0, 0),)))),
        (Mode(linker=Linked(), optimizer=RewriteDatabaseQuery(include=["rk_a"])), None),  # mode_description's, below
        (Color.RED, ("enum", (HERE, "Color"), "RED")),
        (math.sqrt, ("named", "math", "sqrt")),
        (helper, ("named", HERE, "helper")),
        (np.float64, ("named", "numpy", "float64")),
        (Point(1, "a"), ("dataclass", (HERE, "Point"), (("x", ("int", 1)), ("y", ("str", "a"))))),
        (Bag(b=2, a=1), ("object", (HERE, "Bag"), (("a", ("int", 1)), ("b", ("int", 2))))),
    ]


VALUES = _values()


@pytest.mark.parametrize(("value", "expected"), VALUES, ids=[type(v).__name__ for v, _ in VALUES])
def test_a_value_is_encoded_by_its_kind(value: Any, expected: Any) -> None:
    if isinstance(value, Mode):
        expected = mode_description(value)
    assert _Encoder().value(value) == expected


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(lambda: pt.dscalar("s"), id="variable"),
        pytest.param(lambda: np.array([1, None]), id="array of objects"),
        pytest.param(lambda: (lambda v: v), id="lambda"),
        pytest.param(lambda: helper.__get__(1), id="bound method"),
        pytest.param(lambda: object(), id="object without attributes"),
        pytest.param(lambda: Shown(a=1), id="object with a repr of its own"),
        pytest.param(lambda: FIRST_REDEFINED, id="class whose name finds an equal class"),
    ],
)
def test_a_value_without_a_stable_description_is_unstable(value: Any) -> None:
    with pytest.raises(Unstable):
        _Encoder().value(value())


def test_a_name_finds_the_object_again_or_it_is_unstable() -> None:
    assert _named(Redefined) == (HERE, "Redefined")
    assert _named(Scaled.perform) == (HERE, "Scaled.perform")
    assert _named(len) == ("builtins", "len")
    with pytest.raises(Unstable, match="cannot be found again"):
        _named(FIRST_REDEFINED)
    local = types.FunctionType(helper.__code__, {}, "helper")
    local.__module__ = None  # type: ignore[assignment]
    with pytest.raises(Unstable, match="cannot be found again"):
        _named(local)


# -- the mode and the database ------------------------------------------------------------


def test_a_mode_is_its_linkers_class_and_simple_settings_and_its_query() -> None:
    mode = Mode(linker=Linked(), optimizer=RewriteDatabaseQuery(include=["rk_b", "rk_a"], exclude=["rk_x"]))
    settings = (
        ("_allow_gc", True), ("_scheduler", None), ("count", 3), ("fgraph", None), ("flag", True), ("ratio", 0.5), ("things", "list"), ("word", "w"),
    )
    query = (("minimum_compile", "py_only", "rk_a", "rk_b"), (), ("cxx_only", "rk_x"), (), math.inf, ())
    assert mode_description(mode) == ("mode", "Mode", (HERE, "Linked"), settings, query)


def test_a_query_is_its_tags_sub_queries_cut_off_and_named_extra_rewrites() -> None:
    extra = in2out(rk_node_rewrite)
    extra.name = "rk_extra"  # what registering in a database does
    query = RewriteDatabaseQuery(
        include=["rk_b", None, "rk_a"],
        require=["rk_r"],
        exclude=["rk_z", "rk_y"],
        subquery={"rk_s": RewriteDatabaseQuery(include=["rk_q"])},
        position_cutoff=5,
        extra_rewrites=[(extra, 1.5)],
    )
    mode = Mode(linker="py", optimizer=query)
    assert mode_description(mode)[-1] == (
        ("minimum_compile", "py_only", "rk_a", "rk_b", None),
        ("rk_r",),
        ("cxx_only", "rk_y", "rk_z"),
        (("rk_s", (("rk_q",), (), (), (), math.inf, ())),),
        5.0,
        (("WalkingGraphRewriter", "rk_extra", 1.5),),
    )
    unnamed = Mode(linker="py", optimizer=RewriteDatabaseQuery(include=["rk_a"], extra_rewrites=[(in2out(rk_node_rewrite), 1.5)]))
    with pytest.raises(Unstable, match="unnamed extra rewrite"):
        mode_description(unnamed)


def test_a_database_is_every_registration_with_position_tags_and_class() -> None:
    assert database_description(small_db()) == SMALL_DB


def test_the_modules_of_a_database_are_its_classes_and_the_functions_its_rewriters_hold() -> None:
    # builtins and types: objects the rewriters hold (builtins is compiled into Python: no file, never fingerprinted)
    assert database_modules(small_db()) == {BASIC, HERE, "builtins", "types"}
    db = SequenceDB()
    db.register("rk_graph", rk_graph_rewrite, position=1)
    db.register("rk_again", rk_graph_rewrite, position=2)  # one object under two names: visited once
    assert database_modules(db) - {"builtins", "types"} == {BASIC, HERE}
    assert database_modules(SequenceDB()) == set()


def _from(module_name: str) -> Any:
    """A node rewriter's function that says it was defined in ``module_name``."""

    def rewrite(fgraph: Any, node: Any) -> None:
        return None

    rewrite.__module__ = module_name
    return rewrite


class _Slotted:
    __slots__ = ("held",)

    def __init__(self, held: Any) -> None:
        self.held = held


def test_a_rewrites_modules_are_found_wherever_it_keeps_its_code() -> None:
    """``in2out(f)`` holds ``f`` two objects deep; a closure, a partial, a bound method, slots and an Op it tracks count too."""
    import functools

    inner = _from("rk_user.closed")

    def closure(fgraph: Any, node: Any) -> Any:
        return inner(fgraph, node)

    method_class = type("Rewrites", (), {"rewrite": lambda self, fgraph, node: None, "__module__": "rk_user.methods"})
    tracked = Plain(fn=_from("rk_user.tracked_op"))
    partial = functools.partial(_from("rk_user.partial"))
    partial.__name__ = "partial"  # type: ignore[attr-defined]  # node_rewriter names its rewriter by it
    db = SequenceDB()
    db.register("rk_in2out", in2out(node_rewriter([pt.exp])(_from("rk_user.in2out"))), position=1)
    db.register("rk_closure", in2out(node_rewriter([pt.exp])(closure)), position=2)
    db.register("rk_partial", in2out(node_rewriter([pt.exp])(partial)), position=3)
    db.register("rk_method", in2out(node_rewriter([pt.exp])(method_class().rewrite)), position=4)
    db.register("rk_slots", in2out(node_rewriter([pt.exp])(_from(HERE)), name="slotted"), position=5)
    db["rk_slots"].extra = _Slotted(_from("rk_user.slotted"))
    db.register("rk_tracks", in2out(node_rewriter([tracked])(_from(HERE))), position=6)
    found = database_modules(db)
    for module_name in ("rk_user.in2out", "rk_user.closed", "rk_user.partial", "rk_user.methods", "rk_user.slotted", "rk_user.tracked_op"):
        assert module_name in found, module_name
    assert defining_modules([None, 1, "x", np.ones(2), np, {"k": (_from("rk_user.deep"),)}]) == {"rk_user.deep"}


class _OneSlot:
    __slots__ = "held"  # a string: one slot

    def __init__(self, held: Any) -> None:
        self.held = held


class _WithDict:
    __slots__ = ("__dict__", "__weakref__", "held")

    def __init__(self, held: Any) -> None:
        self.held = held


def test_the_walk_reads_every_kind_of_slot_and_stops_at_nothing_it_meets() -> None:
    import math
    import weakref

    assert defining_modules([_OneSlot(_from("rk_user.one_slot"))]) == {HERE, "rk_user.one_slot"}
    with_dict = _WithDict(_from("rk_user.slots"))
    with_dict.extra = _from("rk_user.dict")  # type: ignore[attr-defined]
    referent = _WithDict(None)
    with_dict.ref = weakref.ref(referent)  # type: ignore[attr-defined]  # a weakref is walked as an object: its class's module
    assert defining_modules([with_dict]) == {HERE, "rk_user.slots", "rk_user.dict", "weakref"}
    # what is popped first (the last root) ends its branch, never the walk: values, a module, a builtin function, a class
    for value in (np.ones(2), np.float64(1.0), b"x", 1j, np):
        assert defining_modules([_from("rk_user.after"), value]) == {"rk_user.after"}, value
    assert defining_modules([_from("rk_user.after"), math.sqrt]) == {"math", "rk_user.after"}
    assert defining_modules([_from("rk_user.after"), _WithDict]) == {HERE, "rk_user.after"}
    # containers of a class of their own (a named tuple, a list subclass) are walked as containers, and so is a mapping
    Pair = collections.namedtuple("Pair", "a b")
    for container in (Pair(_from("rk_user.pair"), 1), type("Rows", (list,), {})([_from("rk_user.pair")]), collections.OrderedDict(k=_from("rk_user.pair"))):
        assert defining_modules([_from("rk_user.after"), container]) == {"rk_user.after", "rk_user.pair"}, container


def test_a_closure_variable_not_assigned_yet_is_skipped() -> None:
    def walk_before_assignment() -> set[str]:
        def reads_later() -> Any:
            return later

        found = defining_modules([reads_later])  # its cell is still empty here
        later = _from("rk_user.later")
        return found | defining_modules([reads_later])

    assert walk_before_assignment() == {HERE, "rk_user.later"}


def test_the_code_of_a_modes_extra_rewrite_changes_the_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An extra rewrite defined in a package of its own: editing that package's file changes the key."""
    source = tmp_path / "rk_extra_user.py"
    source.write_text("# the extra rewrite's module\n")
    user = types.ModuleType("rk_extra_user")
    user.__file__ = str(source)
    monkeypatch.setitem(sys.modules, "rk_extra_user", user)
    extra = in2out(node_rewriter([pt.exp])(_from("rk_extra_user")))
    extra.name = "rk_extra"  # a query's extra rewrite needs a name (unnamed: unstable)
    mode = Mode(linker="py", optimizer="fast_run").register((extra, 0.5))
    db = small_db()  # a database holding a rewrite of the same package too (`|` precedes `^`: the sets meet there)
    db.register("rk_user_db", in2out(node_rewriter([pt.exp])(_from("rk_extra_user"))), "fast_run", position=3)
    with_db = Mode(linker="py", optimizer=mode._optimizer, db=db)  # Mode.register's copy keeps the default database
    for mode in (mode, with_db):
        _package_files.cache_clear()
        before = key(*graph(), mode=mode)
        source.write_text(source.read_text() + "# edited\n")
        _package_files.cache_clear()
        assert before is not None and key(*graph(), mode=mode) != before


def test_a_modes_extra_rewrites_count_by_their_modules() -> None:
    mode = Mode(linker="py", optimizer="fast_run").register((in2out(node_rewriter([pt.exp])(_from("rk_user.extra"))), 0.5))
    assert "rk_user.extra" in query_modules(mode)
    assert query_modules(Mode(linker="py", optimizer="fast_run")) == set()


def rk_as_op_function(v: Any) -> Any:
    return v * 2.0


def rk_other_function(v: Any) -> Any:
    return v * 3.0


@pytest.mark.filterwarnings("ignore:pytensor.as_op is deprecated:FutureWarning")
def test_a_function_an_op_holds_is_in_its_key_and_its_module_in_the_code(monkeypatch: pytest.MonkeyPatch) -> None:
    """``as_op`` keeps its function under a private name (``_FromFunctionOp__fn``); constant folding runs it."""
    from pytensor.compile.ops import as_op

    user = types.ModuleType("rk_user_ops")
    monkeypatch.setitem(sys.modules, "rk_user_ops", user)
    held = _from("rk_user_ops")
    held.__qualname__ = "held"
    setattr(user, "held", held)
    encoder = _Encoder()
    assert encoder.value(held) == ("named", "rk_user_ops", "held") and "rk_user_ops" in encoder.modules
    ops = [as_op(itypes=[pt.dvector], otypes=[pt.dvector])(fn) for fn in (rk_as_op_function, rk_other_function)]
    encoded = [_Encoder().op(op) for op in ops]
    assert encoded[0] != encoded[1]
    assert ("_FromFunctionOp__fn", ("named", HERE, "rk_as_op_function")) in encoded[0][2]


# -- the code -----------------------------------------------------------------------------


def test_the_code_is_the_versions_and_each_packages_files() -> None:
    fingerprint = code_fingerprint(["pytensor.tensor.basic", "pytensor", HERE, "numpy.linalg"])
    assert fingerprint[:7] == (
        sys.version, platform.machine(), np.__version__, installed("scipy"), installed("numba"), installed("pytensor"), pytensor.__version__,
    )
    assert [top for top, _ in fingerprint[7]] == sorted(["numpy", "pytensor", HERE])
    files = dict(fingerprint[7])
    basic = Path(pytensor.__file__).parent / "graph" / "basic.py"
    assert (str(basic), basic.stat().st_size, basic.stat().st_mtime_ns) in files["pytensor"]
    this = Path(__file__)
    assert files[HERE] == ((str(this), this.stat().st_size, this.stat().st_mtime_ns),)


def test_pythons_own_modules_count_by_its_version_not_by_their_files() -> None:
    fingerprint = code_fingerprint(["pytensor", "inspect", "json.decoder", "collections", "sys"])
    assert fingerprint == code_fingerprint(["pytensor"])
    assert [top for top, _ in fingerprint[7]] == ["pytensor"] and fingerprint[0] == sys.version


def test_an_op_prepared_by_the_process_keeps_the_modules_its_walk_reaches() -> None:
    """A cold start's rerun missed the store: the walk met NumPy and ``inspect`` or not by what the process ran.

    An `Elemwise` holds its NumPy function (``nfunc``) only once it is prepared for running,
    which constant folding does while rewriting and a process that loads its graph from
    the store never does; ``np.where`` carries an ``inspect.Signature``. Measured on a PyMC
    GARCH model: the unchanged rerun after a cold start rewrote one of its two graphs again.
    `Elemwise` leaves ``nfunc`` out of its pickle, and the walk follows what an object pickles.
    """
    from pytensor.scalar.basic import switch
    from pytensor.tensor.elemwise import Elemwise

    op = Elemwise(switch)
    fresh = defining_modules([op])
    x = pt.dvector("x")
    op.prepare_node(op.make_node(x > 0, x, x), None, None, "py")
    assert op.nfunc is np.where
    assert defining_modules([op]) == fresh and not any(m.startswith(("numpy", "inspect")) for m in fresh)


class _Cached:
    """Pickles ``kept`` and leaves out ``cache``, as `Elemwise` leaves out ``nfunc``."""

    def __init__(self, kept: Any, cache: Any) -> None:
        self.kept, self.cache = kept, cache

    def __getstate__(self) -> dict[str, Any]:
        return {"kept": self.kept}


class _Refusing(_Cached):
    """Refuses to pickle, as an Op holding something unpicklable does: its attributes are followed."""

    def __getstate__(self) -> dict[str, Any]:
        raise TypeError("not picklable")


class _Tuple(_Cached):
    """Pickles a tuple, not a dict: its attributes are followed."""

    def __getstate__(self) -> Any:
        return (self.kept,)


def test_the_walk_follows_what_an_object_pickles_where_its_class_says() -> None:
    kept, cache = _from("rk_user.kept"), _from("rk_user.cache")
    assert defining_modules([_Cached(kept, cache)]) == {HERE, "rk_user.kept"}
    assert defining_modules([_Refusing(kept, cache)]) == {HERE, "rk_user.kept", "rk_user.cache"}
    assert defining_modules([_Tuple(kept, cache)]) == {HERE, "rk_user.kept", "rk_user.cache"}
    assert defining_modules([SimpleNamespace(a=kept, b=cache)]) == {"types", "rk_user.kept", "rk_user.cache"}  # object's own __getstate__


def installed(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return ""


def test_a_missing_distribution_has_no_version() -> None:
    assert _version("innergraph-no-such-distribution") == ""


def test_the_versions_are_read_once_per_process(monkeypatch: pytest.MonkeyPatch) -> None:
    first = code_fingerprint(["pytensor"])
    installed = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version", lambda name: installed(name) + ".other")
    try:
        assert code_fingerprint(["pytensor"]) == first
        _version.cache_clear()
        assert code_fingerprint(["pytensor"])[5] == first[5] + ".other" and first[5] == installed("pytensor")
    finally:
        monkeypatch.undo()
        _version.cache_clear()


def _stat(path: Path) -> tuple[str, int, int]:
    return (str(path), path.stat().st_size, path.stat().st_mtime_ns)


def test_a_packages_files_are_its_python_files_read_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    for folder, files in ((one, ["__init__.py", "a.py", "sub/b.py", "data.txt"]), (two, ["c.py"])):
        for name in files:
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            (folder / name).write_text(f"# {name}\n")
    top = f"rk_package_{tmp_path.name}"
    package = types.ModuleType(top)
    package.__path__ = [str(one), str(two)]
    monkeypatch.setitem(sys.modules, top, package)
    expected = (_stat(one / "__init__.py"), _stat(one / "a.py"), _stat(one / "sub" / "b.py"), _stat(two / "c.py"))
    assert _package_files(top) == expected
    (one / "a.py").write_text("# a.py, edited: this process does not look again\n")
    assert _package_files(top) == expected
    _package_files.cache_clear()
    assert _package_files(top) != expected and _stat(one / "a.py") in _package_files(top)


def test_a_modules_file_and_the_unstable_cases(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    single = tmp_path / "single.py"
    single.write_text("X = 1\n")
    top = f"rk_single_{tmp_path.name}"
    loaded = types.ModuleType(top)
    loaded.__file__ = str(single)
    monkeypatch.setitem(sys.modules, top, loaded)
    assert _package_files(top) == (_stat(single),)
    monkeypatch.setitem(sys.modules, top + "_nofile", types.ModuleType(top + "_nofile"))
    with pytest.raises(Unstable, match="has no file"):
        _package_files(top + "_nofile")
    with pytest.raises(Unstable, match="is not loaded"):
        _package_files(top + "_absent")


# -- the configuration and the modules' state -----------------------------------------------


def test_a_flag_counts_by_its_value() -> None:
    flags = dict(configuration()[0])
    assert flags["compile__wait"] == repr(config.compile__wait)  # immutable, a plain default
    assert flags["optdb__max_use_ratio"] == repr(config.optdb__max_use_ratio)
    assert list(flags) == sorted(config._config_var_dict)


def test_a_flag_computed_from_the_machine_counts_by_what_the_environment_gives_it(monkeypatch: pytest.MonkeyPatch) -> None:
    param = config._config_var_dict["compile__timeout"]
    getattr(config, "compile__timeout")  # computed now, if not before
    monkeypatch.setitem(config._flags_dict, "compile__timeout", "77")
    assert dict(configuration()[0])["compile__timeout"] == "('computed', '77')"
    monkeypatch.delattr(param, "val")  # as in a process that has not computed it
    assert dict(configuration()[0])["compile__timeout"] == "('computed', '77')"


def test_a_flag_not_read_yet_counts_by_what_it_would_take(monkeypatch: pytest.MonkeyPatch) -> None:
    def unread(name: str) -> Any:
        param = config._config_var_dict[name]
        if hasattr(param, "val"):
            monkeypatch.delattr(param, "val")
        monkeypatch.delitem(config._flags_dict, name, raising=False)
        return param

    monkeypatch.setattr(config, "_pytensor_cfg", type(config._pytensor_cfg)())  # no configuration file
    monkeypatch.setattr(config, "_pytensor_raw_cfg", type(config._pytensor_raw_cfg)())
    plain, computed = unread("optimizer_excluding"), unread("DebugMode__check_c")
    assert not callable(plain.default) and callable(computed.default) and computed.mutable
    flags = dict(configuration()[0])
    assert (flags["optimizer_excluding"], flags["DebugMode__check_c"]) == (repr(plain.default), "('computed',)")
    monkeypatch.setitem(config._flags_dict, "optimizer_excluding", "rk_given")
    assert dict(configuration()[0])["optimizer_excluding"] == "'rk_given'"


def test_the_environment_counts_for_innergraph_and_pytensor_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INNERGRAPH_RK_DIRECT", "1")
    monkeypatch.setenv("PYTENSOR_RK_DIRECT", "2")
    monkeypatch.setenv("RK_DIRECT_UNRELATED", "3")
    env = dict(configuration()[1])
    assert (env["INNERGRAPH_RK_DIRECT"], env["PYTENSOR_RK_DIRECT"]) == ("1", "2") and "RK_DIRECT_UNRELATED" not in env


def test_the_module_state_is_each_watched_modules_constants_and_functions(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = types.ModuleType("innergraph._rk_state")
    vars(fake).update(ALPHA=1, BETA=None, lower=2, LISTED=[1], FLAG=True, RATIO=1.5, WORD="w", helper=helper, Mixed_Case=3)
    monkeypatch.setitem(sys.modules, "innergraph._rk_state", fake)
    monkeypatch.setitem(sys.modules, "innergraph._rk_none", None)  # a failed import's mark
    monkeypatch.setitem(sys.modules, "rk_unwatched", types.ModuleType("rk_unwatched"))
    state = dict(module_state())
    assert state["innergraph._rk_state"] == (("ALPHA", 1), ("BETA", None), ("FLAG", True), ("RATIO", 1.5), ("WORD", "w"), ("helper", HERE, "helper"))
    assert "innergraph._rk_none" not in state and "rk_unwatched" not in state and "numpy" not in state
    from innergraph.rewriting import until_while

    assert ("ENV_FLAG", until_while.ENV_FLAG) in state["innergraph.rewriting.until_while"]
    assert "pytensor.tensor.basic" in state and list(state) == sorted(state)
    assert {name.partition(".")[0] for name in state} == {"innergraph", "pytensor"}
