"""The key of a graph before rewriting: everything that decides what PyTensor's rewriting makes of it.

`FunctionMaker.prepare_fgraph` rewrites a `FunctionGraph` with the mode's rewriter and
then protects its outputs with deep copies. What comes out depends on the graph and on
what the rewrites read while they run. `graph_key` digests all of that, so that two
compilations with equal keys rewrite to equal graphs and the second can take the
first's result (`innergraph.patching.rewritten`).

Terms
-----
key
    A SHA-256 digest (hex) of the request's part and the process's part. The request's
    part (`graph_part`, itself a digest: what the same graph compiled again in this
    process shares) covers the first three items below, the process's (`full_key`) the
    other four:

    * the graph: its nodes in PyTensor's deterministic topological order, each Op by
      its class and ``__props__`` (an Op without props by its class and attributes),
      each type by its class and props, each constant by its type and data, each
      variable's name, inputs by position; inner graphs (Scan's, `OpFromGraph`'s,
      `Composite`'s) the same way;
    * the specs: per input ``mutable``, ``borrow`` and whether it is updated, per
      output ``borrow``;
    * the mode: its linker's class and settings and its rewriter query;
    * the rewrite database: every registration's name, position and tags and the
      class of what is registered;
    * the code: per package that defined a registered rewrite (anything it reaches:
      ``in2out(my_rewrite)``'s function, a closure, an Op it tracks; a mode's extra
      rewrites too), an Op of the graph or a function or class an Op holds, the path,
      size and modification time of each of its Python files; the versions of Python,
      NumPy, SciPy, Numba and PyTensor;
    * PyTensor's configuration (each flag's value, or for a flag not read yet the
      value it would take; a flag computed once from the machine and fixed after,
      such as ``compiledir``, by what the environment gives it), ``PYTENSOR_FLAGS``
      and innergraph's environment variables (``INNERGRAPH_*``);
    * the state of innergraph's and PyTensor's loaded modules: each module-level
      constant's value and each module-level function's defining module and name,
      so a knob or a function replaced at run time (a test's ``monkeypatch``)
      changes the key.
unstable
    Something the key cannot describe the same way in every process (an object
    whose only description is its address, a function without a module-level
    name, code without a file): `graph_key` returns None and the graph is rewritten
    as without the cache.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import hashlib
import importlib.metadata
import logging
import os
import pickle
import platform
import sys
import types
from collections.abc import Iterable, Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
from pytensor import config
from pytensor.compile.mode import Mode
from pytensor.graph.basic import Apply, Constant, Variable
from pytensor.graph.fg import AbstractFunctionGraph, FunctionGraph
from pytensor.graph.op import Op
from pytensor.graph.rewriting.db import RewriteDatabase, RewriteDatabaseQuery, SequenceDB
from pytensor.graph.traversal import io_toposort
from pytensor.graph.type import Type
from pytensor.link.basic import Linker
from pytensor.misc.ordered_set import OrderedSet

__all__ = ["GraphPart", "Unstable", "code_fingerprint", "defining_modules", "full_key", "graph_key", "graph_part", "query_modules"]

_logger = logging.getLogger(__name__)

#: Raised to the next version when what a key covers changes, so older entries are never read.
FORMAT = 4  # 2: the payload holds the original constants apart (rewritten._payload); 3: the modules a rewrite reaches, an Op's functions and private names; 4: the digest of the request's part (graph_part) in place of its parts

#: The packages whose loaded modules' state (`module_state`) the key covers.
_WATCHED = ("pytensor", "innergraph")

Encoded = Any  # nested tuples of None, bool, int, float, str and bytes


class Unstable(Exception):
    """Something in the graph or its context has no description that is the same in every process."""


def graph_key(
    fgraph: FunctionGraph,
    inputs: Sequence[Any],
    outputs: Sequence[Any],
    additional_outputs: Sequence[Any],
    mode: Mode,
) -> str | None:
    """The key of rewriting ``fgraph`` for ``mode`` (see the module docstring), or None if unstable.

    ``inputs``, ``outputs`` and ``additional_outputs`` are `FunctionMaker.prepare_fgraph`'s
    specs (`SymbolicInput`, `SymbolicOutput`). The same as `full_key` of `graph_part`.
    """
    part = graph_part(fgraph, inputs, outputs, additional_outputs, mode)
    return None if part is None else full_key(part, mode)


@dataclasses.dataclass(frozen=True)
class GraphPart:
    """What the request itself decides of a key: the graph, its specs and the mode's description.

    ``digest`` is the SHA-256 of those three (and `FORMAT`); ``modules`` the packages of the
    classes the graph's encoding met, which `full_key` fingerprints with the database's. Two
    requests with equal digests ask for the same rewriting as long as the process's database,
    code, flags and modules are the same.
    """

    digest: str
    modules: frozenset[str]


def graph_part(
    fgraph: FunctionGraph,
    inputs: Sequence[Any],
    outputs: Sequence[Any],
    additional_outputs: Sequence[Any],
    mode: Mode,
) -> GraphPart | None:
    """The request's part of the key (`GraphPart`), or None if unstable; costs the graph's encoding only."""
    try:
        encoder = _Encoder()
        graph = encoder.graph(fgraph.inputs, fgraph.outputs)
        specs = (
            tuple((bool(i.mutable), bool(i.borrow), i.update is not None) for i in inputs),
            tuple(bool(o.borrow) for o in (*outputs, *additional_outputs)),
        )
        described = mode_description(mode)
    except Unstable:
        return None
    except Exception as exc:  # an object the encoder does not know how to read (slots, a property that raises, ...)
        _logger.debug("innergraph: no key for rewriting %s: %r", fgraph, exc)
        return None
    digest = hashlib.sha256(pickle.dumps((FORMAT, graph, specs, described), protocol=5)).hexdigest()
    return GraphPart(digest, frozenset(encoder.modules))


def full_key(part: GraphPart, mode: Mode) -> str | None:
    """The key of a request whose `graph_part` is ``part``: with the database, the code, the flags and the modules' state."""
    try:
        db: RewriteDatabase = getattr(mode, "optdb")  # set in Mode.__setstate__, untyped
        context = database_description(db)
        code = code_fingerprint(set(part.modules) | database_modules(db) | query_modules(mode))
        state = (configuration(), module_state())
    except Unstable:
        return None
    except Exception as exc:
        _logger.debug("innergraph: no key for rewriting with %s: %r", mode, exc)
        return None
    payload = pickle.dumps((part.digest, context, code, state), protocol=5)
    return hashlib.sha256(payload).hexdigest()


class _Encoder:
    """Encodes graphs and the values their Ops and types hold; records the modules of the classes it met."""

    def __init__(self) -> None:
        self.modules: set[str] = set()
        self._ops: dict[int, Encoded] = {}

    def graph(self, inputs: Sequence[Variable], outputs: Sequence[Variable]) -> Encoded:
        nodes: list[Apply] = io_toposort(list(inputs), list(outputs))
        where: dict[Variable, Encoded] = {v: ("i", k) for k, v in enumerate(inputs)}
        for k, node in enumerate(nodes):
            for j, out in enumerate(node.outputs):
                where[out] = ("n", k, j)

        def ref(var: Variable) -> Encoded:
            found = where.get(var)
            if found is not None:
                return found
            if isinstance(var, Constant):
                return ("c", self.tensor_type(var.type), self.value(var.data), var.name)
            raise Unstable(f"{var} is neither an input, a constant nor computed in the graph")

        return (
            tuple((self.tensor_type(v.type), v.name) for v in inputs),
            tuple(
                (self.op(node.op), tuple(ref(v) for v in node.inputs), tuple((self.tensor_type(o.type), o.name) for o in node.outputs))
                for node in nodes
            ),
            tuple(ref(o) for o in outputs),
        )

    def op(self, op: Op) -> Encoded:
        found = self._ops.get(id(op))
        if found is None:
            self._ops[id(op)] = ("cycle",)
            found = self._ops[id(op)] = ("op", self.cls(type(op)), self.attributes(op))
        return found

    def tensor_type(self, t: Type) -> Encoded:
        return ("type", self.cls(type(t)), self.attributes(t))

    def attributes(self, obj: Any) -> Encoded:
        """An Op's or type's description: its props if it declares them, else all of its attributes."""
        props = getattr(type(obj), "__props__", None)
        if props is not None:
            return tuple((p, self.value(getattr(obj, p))) for p in props)
        return tuple(sorted(((k, self.value(v)) for k, v in vars(obj).items() if not _is_cache(k, obj)), key=lambda kv: kv[0]))

    def cls(self, cls: type) -> Encoded:
        self.modules.add(cls.__module__)
        return (cls.__module__, cls.__qualname__)

    def value(self, v: Any) -> Encoded:
        if v is None or v is Ellipsis or isinstance(v, (bool, int, float, complex, str, bytes)):
            return (type(v).__name__, v)
        if isinstance(v, slice):
            return ("slice", self.value(v.start), self.value(v.stop), self.value(v.step))
        if isinstance(v, (tuple, list)):
            return (type(v).__name__, tuple(self.value(x) for x in v))
        if isinstance(v, (set, frozenset)):
            return ("set", tuple(sorted((self.value(x) for x in v), key=repr)))
        if isinstance(v, OrderedSet):
            return ("ordered", tuple(self.value(x) for x in v))
        if isinstance(v, Mapping):
            return ("dict", tuple(sorted(((self.value(k), self.value(x)) for k, x in v.items()), key=repr)))
        if isinstance(v, np.ndarray):
            if v.dtype.hasobject:
                raise Unstable("an array of Python objects")
            return ("nd", v.dtype.str, v.shape, hashlib.sha256(np.ascontiguousarray(v).tobytes()).hexdigest())
        if isinstance(v, np.generic):
            return ("np", v.dtype.str, v.tobytes())
        if isinstance(v, np.dtype):
            return ("dtype", v.str)
        if isinstance(v, Op):
            return self.op(v)
        if isinstance(v, Type):
            return self.tensor_type(v)
        if isinstance(v, AbstractFunctionGraph):  # a FunctionGraph, or PyTensor's frozen form of one
            return ("fgraph", type(v).__qualname__, self.graph(v.inputs, v.outputs))
        if isinstance(v, Variable):
            raise Unstable(f"a variable held by an Op or type: {v}")
        if isinstance(v, Mode):
            return mode_description(v)
        if isinstance(v, enum.Enum):
            return ("enum", self.cls(type(v)), v.name)
        if isinstance(v, (types.FunctionType, types.BuiltinFunctionType, type)):
            module, qualname = _named(v)
            self.modules.add(module)  # its code decides what the Op computes, and constant folding runs it
            return ("named", module, qualname)
        if dataclasses.is_dataclass(v):
            return ("dataclass", self.cls(type(v)), tuple((f.name, self.value(getattr(v, f.name))) for f in dataclasses.fields(v)))
        if type(v).__repr__ is object.__repr__ and hasattr(v, "__dict__"):
            return ("object", self.cls(type(v)), self.attributes(v))
        raise Unstable(f"no stable description of {type(v).__qualname__}")


def _is_cache(name: str, obj: Any) -> bool:
    """Attributes an Op fills when it is compiled or run, which never decide how it is rewritten.

    Those are the names with a leading underscore, except a class's private names
    (``_FromFunctionOp__fn``, Python's spelling of ``self.__fn`` in that class): they are
    the object's own state, such as the function ``as_op`` wraps, which constant
    folding runs.
    """
    if not name.startswith("_"):
        return False
    return not any(name.startswith(f"_{klass.__name__.lstrip('_')}__") for klass in type(obj).__mro__)


def _named(obj: Any) -> tuple[str, str]:
    """A function's or class's module and qualified name, if that name finds it again."""
    module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", "")
    found: Any = sys.modules.get(module or "")
    for part in qualname.split("."):
        found = getattr(found, part, None)
    if module is None or found is not obj:
        raise Unstable(f"{obj!r} cannot be found again by its name")
    return module, qualname


def mode_description(mode: Mode) -> Encoded:
    """A mode's linker (class and settings) and rewriter query; unstable for a rewriter that is no query."""
    linker = mode.linker
    query = getattr(mode, "_optimizer", None)
    if not isinstance(linker, Linker) or not isinstance(query, RewriteDatabaseQuery):
        raise Unstable("a mode whose rewriter is no query of the rewrite database")
    settings = tuple(
        sorted((k, v if v is None or isinstance(v, (bool, int, float, str)) else type(v).__qualname__) for k, v in vars(linker).items())
    )
    return ("mode", type(mode).__qualname__, (type(linker).__module__, type(linker).__qualname__), settings, _query(query))


def _query(query: RewriteDatabaseQuery) -> Encoded:
    extra = tuple(sorted((type(r).__qualname__, getattr(r, "name", None) or "", p) for r, p in query.extra_rewrites))
    if any(not name for _, name, _ in extra):
        raise Unstable("a query with an unnamed extra rewrite")
    subquery = tuple(sorted((k, _query(v)) for k, v in query.subquery.items()))
    return (  # by repr: PyTensor's own idiom for "every rewrite" is ``include=[None]``
        tuple(sorted(query.include, key=repr)), tuple(sorted(query.require, key=repr)), tuple(sorted(query.exclude, key=repr)),
        subquery, float(query.position_cutoff), extra,
    )


def database_description(db: RewriteDatabase) -> Encoded:
    """Every registration of ``db`` and its sub-databases: name, position, tags, the registered object's class."""
    entries = []
    registered: dict[str, Any] = {name: next(iter(db.__db__[name])) for name in db._names if db.__db__.get(name)}
    memberships: dict[int, list[str]] = {}
    for tag, objs in db.__db__.items():
        for obj in objs:
            memberships.setdefault(id(obj), []).append(tag)
    positions = getattr(db, "__position__", {}) if isinstance(db, SequenceDB) else {}
    for name in sorted(registered):
        obj = registered[name]
        what = database_description(obj) if isinstance(obj, RewriteDatabase) else (type(obj).__module__, type(obj).__qualname__)
        entries.append((name, float(positions.get(name, 0.0)), tuple(sorted(memberships.get(id(obj), []), key=repr)), what))
    settings = tuple(sorted((k, v) for k, v in vars(db).items() if isinstance(v, (bool, int, float, str))))
    return (type(db).__qualname__, settings, tuple(entries))


def database_modules(db: RewriteDatabase) -> set[str]:
    """The modules that define what ``db`` holds: every class and function its rewriters reach (`defining_modules`)."""
    registered: list[Any] = []
    seen: set[int] = set()

    def visit(db: RewriteDatabase) -> None:
        for name in db._names:  # each object is registered under its own name (and under its tags)
            for obj in db.__db__.get(name, ()):
                if id(obj) in seen:
                    continue
                seen.add(id(obj))
                if isinstance(obj, RewriteDatabase):
                    visit(obj)
                else:
                    registered.append(obj)

    visit(db)
    return defining_modules(registered)


def query_modules(mode: Mode) -> set[str]:
    """The modules that define a mode's extra rewrites (`RewriteDatabaseQuery.extra_rewrites`, its subqueries' too)."""
    query = getattr(mode, "_optimizer", None)
    extra: list[Any] = []
    todo = [query] if isinstance(query, RewriteDatabaseQuery) else []
    while todo:
        q = todo.pop()
        extra.extend(r for r, _ in q.extra_rewrites)
        todo.extend(q.subquery.values())
    return defining_modules(extra)


#: What `defining_modules` never walks into: values, and modules (a module is its own file).
_LEAVES = (type(None), bool, int, float, complex, str, bytes, np.ndarray, np.generic, np.dtype, types.ModuleType)
_EXACT_LEAVES = frozenset((type(None), bool, int, float, str))  # the commonest, tested by their exact class first
_CONTAINERS = frozenset((list, tuple, set, frozenset))  # likewise


def defining_modules(roots: Iterable[Any]) -> set[str]:
    """The modules of every class and function reachable from ``roots``.

    A rewrite registered as ``in2out(my_rewrite)`` is a PyTensor class holding a PyTensor
    class holding the user's function; a rewrite's behaviour can also sit in a closure, a
    bound method, a ``functools.partial`` or an Op it tracks. So the walk follows
    attributes (``__dict__`` and ``__slots__``), the items of lists, tuples, sets and
    dicts, a function's closure, defaults and ``__wrapped__``, a method's function and
    object and a partial's function and arguments, and records each class's and each
    function's module; it does not follow a function's globals (its module is recorded).
    """
    found: set[str] = set()
    seen: set[int] = set()
    todo = list(roots)
    while todo:
        obj = todo.pop()
        kind = type(obj)
        if kind in _EXACT_LEAVES or id(obj) in seen:  # the commonest values first, by their exact class
            continue
        seen.add(id(obj))
        if kind in _CONTAINERS or isinstance(obj, (list, tuple, set, frozenset)):  # a named tuple, a list subclass too
            todo.extend(obj)
            continue
        if isinstance(obj, _LEAVES):
            continue
        if isinstance(obj, type):
            found.add(obj.__module__)
            continue
        if isinstance(obj, types.FunctionType):
            found.add(obj.__module__)
            todo.extend(cell.cell_contents for cell in obj.__closure__ or () if _filled(cell))
            todo.extend(obj.__defaults__ or ())
            todo.extend((obj.__kwdefaults__ or {}).values())
            todo.append(getattr(obj, "__wrapped__", None))
            continue
        if isinstance(obj, types.MethodType):
            todo.extend((obj.__func__, obj.__self__))
            continue
        if isinstance(obj, functools.partial):
            todo.extend((obj.func, obj.args, obj.keywords))
            continue
        if isinstance(obj, types.BuiltinFunctionType):
            module = getattr(obj, "__module__", None)
            if isinstance(module, str):
                found.add(module)
            continue
        if isinstance(obj, Mapping):
            todo.extend(obj.keys())
            todo.extend(obj.values())
            continue
        found.add(type(obj).__module__)
        todo.extend(_state(obj))
        todo.extend(getattr(obj, slot, None) for slot in _slot_names(type(obj)))  # type: ignore[arg-type]  # mypy: type[Any] not Hashable
    return found


def _state(obj: Any) -> Iterable[Any]:
    """The attribute values the walk follows: what ``obj`` pickles where its class says (a dict from ``__getstate__``), else all.

    A class that leaves attributes out of its pickle marks them as caches it fills when
    run: `Elemwise` drops ``ufunc`` and ``nfunc``, which hold ``np.where`` once the Op has
    been prepared, with ``inspect`` and NumPy's modules behind it. Followed, they made a
    cold start's key differ from its rerun's, which had prepared nothing.
    """
    if type(obj).__getstate__ is not object.__getstate__:
        try:
            state = obj.__getstate__()
        except Exception:  # a pickle-time check (an Op that refuses to pickle): its attributes, as for any object
            state = None
        if isinstance(state, dict):
            return state.values()
    return vars(obj).values() if hasattr(obj, "__dict__") else ()


@cache
def _slot_names(cls: type) -> tuple[str, ...]:
    """The slots ``cls`` and its bases declare, other than ``__dict__`` and ``__weakref__``."""
    names = []
    for klass in cls.__mro__:
        slots = klass.__dict__.get("__slots__", ())
        for slot in (slots,) if isinstance(slots, str) else slots:  # ``__slots__ = "name"`` declares one
            if slot not in ("__dict__", "__weakref__"):
                names.append(slot)
    return tuple(names)


def _filled(cell: Any) -> bool:
    try:
        cell.cell_contents
    except ValueError:  # a closure variable not assigned yet
        return False
    return True


def code_fingerprint(modules: Iterable[str]) -> Encoded:
    """Per top-level package of ``modules`` outside Python's own: its files' paths, sizes and modification times; and the versions."""
    # Python's own modules are covered by its version: compiled into it (no file to change) or its standard library,
    # whose objects a walk meets or not by what the process ran before (a function's cached ``inspect.Signature``)
    tops = sorted({m.partition(".")[0] for m in modules} - set(sys.builtin_module_names) - sys.stdlib_module_names)
    pytensor_version = getattr(sys.modules.get("pytensor"), "__version__", "")  # a patched PyTensor's own, too
    return (
        sys.version, platform.machine(), np.__version__, _version("scipy"), _version("numba"), _version("pytensor"), pytensor_version,
        tuple((top, _package_files(top)) for top in tops),
    )


@cache
def _version(name: str) -> str:
    """The installed version of distribution ``name`` (whether or not this process has imported it yet), or ""."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return ""


@cache
def _package_files(top: str) -> Encoded:
    """The state of a package's Python files (once per process: a package's files do not change under it)."""
    module = sys.modules.get(top)
    if module is None:
        raise Unstable(f"module {top} is not loaded")
    folders = list(getattr(module, "__path__", []) or [])
    if not folders:
        file = getattr(module, "__file__", None)
        if not file:
            raise Unstable(f"module {top} has no file")
        stat = os.stat(file)
        return ((file, stat.st_size, stat.st_mtime_ns),)
    files = []
    for folder in folders:
        for path in sorted(Path(folder).rglob("*.py")):
            stat = path.stat()
            files.append((str(path), stat.st_size, stat.st_mtime_ns))
    return tuple(files)


def configuration() -> Encoded:
    """PyTensor's flags (a flag not read yet: the value it would take, unless computed) and the environment that sets them."""
    flags = []
    for name, param in sorted(config._config_var_dict.items()):
        try:
            given = config.fetch_val_for_key(name)  # from PYTENSOR_FLAGS or the configuration file
        except KeyError:
            given = None
        if callable(param.default) and not param.mutable:
            # Computed once from the environment and the machine (compiledir, compile__timeout, ...),
            # and then fixed: whether this process has computed it yet must not change the key.
            value: Any = ("computed", given)
        elif hasattr(param, "val"):
            value = param.val
        elif given is not None:
            value = given
        else:
            value = ("computed",) if callable(param.default) else param.default
        flags.append((name, repr(value)))
    env = tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith(("INNERGRAPH_", "PYTENSOR"))))
    return (tuple(flags), env)


def module_state() -> Encoded:
    """Module-level constants and functions of the loaded modules of `_WATCHED` packages (see the module docstring)."""
    state = []
    for name, module in sorted(sys.modules.items()):
        if module is None or name.partition(".")[0] not in _WATCHED:
            continue
        entries: list[tuple[Any, ...]] = []
        for attr, value in vars(module).items():
            if attr.isupper() and (value is None or isinstance(value, (bool, int, float, str))):
                entries.append((attr, value))
            elif isinstance(value, types.FunctionType):
                entries.append((attr, value.__module__, value.__qualname__))
        state.append((name, tuple(entries)))
    return tuple(state)
