"""Rewriting done once per machine: `FunctionMaker.prepare_fgraph` through a cache of rewritten graphs.

PyTensor rewrites every graph it compiles, in every process: on a PyMC model whose
compiled code is all in Numba's cache, rewriting is 80-90% of compiling the NUTS
function again (``design/benchmarks.md``, "The GARCH models' reruns: where the last
second goes"). While innergraph is installed, `prepare_fgraph` first computes the
graph's key (`innergraph.patching.rewritten_key`: the graph, its specs, the mode, the
rewrite database, the code and the configuration) and looks it up in the store
(`innergraph.patching.rewritten_store`):

hit
    The stored graph, after rewriting and the outputs' deep copies, takes the place of
    the graph's outputs (`FunctionGraph.change_node_input` on each output, so the
    `FunctionGraph`, its inputs and its specs stay the caller's), and the features the
    rewriting had attached are attached anew (`DestroyHandler`, ...). The linker then
    sees what it would have seen, and finds the same entries in Numba's cache.
miss
    PyTensor's own `prepare_fgraph` runs; if it showed no warning and logged nothing at
    WARNING or above (rewriting that warns or reports an error is done again next time,
    so the message is not lost), the result is stored.

Either way the block is a window of `innergraph.core.collector`: rewriting makes garbage with
cycles that lives long enough to be promoted, and CPython's full collections, each walking
the whole heap, were a quarter of an edited model's rerun (``design/benchmarks.md``, "The
collector during compilation").

Not cached: a mode that is not exactly `Mode` (DebugMode checks each rewrite), a
rewriter that is no query of the database, profiling, ``optimizer_verbose``, test
values, and anything `rewritten_key` cannot describe the same way in every process.

A process never looks up a graph it rewrote itself: a request whose part of the key
(`rewritten_key.graph_part`: the graph, its specs, the mode) equals one this process
rewrote is rewritten again at once, without the rest of the key (the database's, the
code's, the flags' and the modules' parts: about 60 ms of a 250 ms compilation of a small
graph) and without reading or writing the store. What changed in the process since (a
class's method replaced at run time, which no key sees) cannot come back through the
store, and compiling one graph again in one process (a test, a benchmark's rounds, the
demonstration) costs what it costs without innergraph's store. Skipping the store can
only cost a hit, never serve a wrong graph: the graph is rewritten as without it.

Terms
-----
payload
    The pickled rewritten outputs, the classes of the features the rewriting added, and
    the plain values it set on the graph (innergraph's mark that its pipeline rewrote it,
    which decides how the Numba linker converts it); the graph's inputs are pickled as
    their positions (the caller's own variables are put back when it loads), and so is
    each constant the graph held before rewriting, by its place among the graph's
    `original_constants` (the caller's own equal constant is put back, so the loaded graph
    shares each constant where the rewritten one did; the stored value travels with the
    payload for a caller whose constant differs).
"""

from __future__ import annotations

import io
import logging
import pickle
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from pytensor import config
from pytensor.compile.debug import profiling as compile_profiling
from pytensor.compile.maker import FunctionMaker
from pytensor.compile.mode import Mode
from pytensor.graph.basic import Constant, Variable
from pytensor.graph.traversal import graph_inputs
from pytensor.graph.features import Feature
from pytensor.graph.fg import FunctionGraph, Output

from innergraph.core.collector import full_collections_deferred
from innergraph.core.hooks import Patch, original
from innergraph.patching import rewritten_key, rewritten_store

__all__ = ["patches", "prepare_fgraph", "stats"]

_prepare_base = original(FunctionMaker, "prepare_fgraph")

#: The request digests (`rewritten_key.GraphPart`) of the graphs this process rewrote: rewritten again
#: here without a key or a look in the store (module docstring).
_rewritten_here: set[str] = set()

#: Counts since the process started: ``hit``, ``miss``, ``stored``, ``again`` (a graph this process
#: rewrote before), ``uncached`` (no key or not cacheable).
stats: dict[str, int] = {"hit": 0, "miss": 0, "stored": 0, "again": 0, "uncached": 0}

_WATCHED_LOGGERS = ("pytensor", "innergraph")


def prepare_fgraph(
    inputs: list[Any], outputs: list[Any], additional_outputs: list[Any], fgraph: FunctionGraph, mode: Any, profile: Any
) -> None:
    """`FunctionMaker.prepare_fgraph`, through the store of rewritten graphs, with full collections deferred (module docstring)."""
    with full_collections_deferred():
        _prepare(inputs, outputs, additional_outputs, fgraph, mode, profile)


def _prepare(
    inputs: list[Any], outputs: list[Any], additional_outputs: list[Any], fgraph: FunctionGraph, mode: Any, profile: Any
) -> None:
    part = rewritten_key.graph_part(fgraph, inputs, outputs, additional_outputs, mode) if _cacheable(mode, profile) else None
    if part is not None and part.digest in _rewritten_here:
        stats["again"] += 1
        return _prepare_base(inputs, outputs, additional_outputs, fgraph, mode, profile)
    key = None if part is None else rewritten_key.full_key(part, mode)
    if part is None or key is None:
        stats["uncached"] += 1
        return _prepare_base(inputs, outputs, additional_outputs, fgraph, mode, profile)
    start = time.perf_counter()
    payload = rewritten_store.read(key)
    if payload is not None and _transplant(fgraph, payload, key):
        compile_profiling.total_graph_rewrite_time += time.perf_counter() - start
        stats["hit"] += 1
        return None
    stats["miss"] += 1
    before = list(fgraph._features)
    attributes = dict(vars(fgraph))
    originals = original_constants(fgraph)
    with _watched() as shown:
        _prepare_base(inputs, outputs, additional_outputs, fgraph, mode, profile)
    _rewritten_here.add(part.digest)
    if not shown:
        payload = _payload(fgraph, before, attributes, originals)
        if payload is not None and rewritten_store.write(key, payload):
            stats["stored"] += 1
    return None


def _cacheable(mode: Any, profile: Any) -> bool:
    return (
        type(mode) is Mode
        and not profile
        and not config.profile
        and not config.profile_optimizer
        and not config.optimizer_verbose
        and getattr(config, "compute_test_value", "off") == "off"
        and rewritten_store.folder() is not None
    )


class _Counter(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.count += 1


@contextmanager
def _watched() -> Iterator[list[int]]:
    """Counts what the block showed: warnings shown or recorded, log records at WARNING or above (``shown`` is truthy after)."""
    shown: list[int] = []
    counter = _Counter()
    loggers = [logging.getLogger(name) for name in _WATCHED_LOGGERS]
    show = warnings._showwarnmsg  # type: ignore[attr-defined]  # what every shown or recorded warning goes through

    def counting(msg: Any) -> None:
        shown.append(1)
        show(msg)

    warnings._showwarnmsg = counting  # type: ignore[attr-defined]
    for logger in loggers:
        logger.addHandler(counter)
    try:
        yield shown
    finally:
        warnings._showwarnmsg = show  # type: ignore[attr-defined]
        for logger in loggers:
            logger.removeHandler(counter)
        if counter.count:
            shown.append(counter.count)


def original_constants(fgraph: FunctionGraph) -> list[Constant]:
    """The constants of ``fgraph`` and of its Ops' inner graphs, each once, in an order fixed by the graph's structure.

    Walked before rewriting, in the storing and in the loading process: the key
    guarantees both graphs have one structure, so the k-th constant of one is the k-th
    of the other whenever both processes built the graph alike.
    """
    found: list[Constant] = []
    seen: set[int] = set()
    graphs: list[Any] = [fgraph]
    walked: set[int] = set()
    while graphs:
        graph = graphs.pop(0)
        if id(graph) in walked:
            continue
        walked.add(id(graph))
        for node in graph.toposort():
            for var in node.inputs:
                if isinstance(var, Constant) and id(var) not in seen:
                    seen.add(id(var))
                    found.append(var)
            inner = getattr(node.op, "fgraph", None)
            if inner is not None and hasattr(inner, "toposort"):
                graphs.append(inner)
    return found


def _payload(fgraph: FunctionGraph, before: list[Feature], attributes: dict[str, Any], originals: list[Constant]) -> bytes | None:
    """The rewritten graph's payload, or None if it cannot be stored.

    Not stored: a feature removed or not rebuildable by its class, an attribute the
    rewriting set on the graph that is neither a plain value (innergraph's mark that its
    pipeline rewrote the graph, which the linker reads) nor something of a feature's
    (attaching it anew sets it again), an Op or a tag that does not pickle.
    """
    if any(f not in fgraph._features for f in before):
        return None
    marks = {}
    for name, value in vars(fgraph).items():
        if name in attributes and attributes[name] is value:
            continue
        if value is None or isinstance(value, (bool, int, float, str)):
            marks[name] = value
        elif not any(value is f or getattr(value, "__self__", None) is f for f in fgraph._features):
            return None  # compared by identity: a value may be an array, whose == is no truth value
    added = []
    for feature in fgraph._features:
        if any(feature is f for f in before):
            continue
        cls = type(feature)
        try:
            rewritten_key._named(cls)
            cls()
        except Exception:  # a feature that needs arguments, or cannot be found again by name
            return None
        added.append((cls.__module__, cls.__qualname__))
    where = {id(v): k for k, v in enumerate(fgraph.inputs)}
    constant_at = {id(c): k for k, c in enumerate(originals)}
    used: dict[int, Constant] = {}

    class _Pickler(pickle.Pickler):
        def persistent_id(self, obj: Any) -> Any:
            if not isinstance(obj, Variable):
                return None
            if isinstance(obj, Constant) and id(obj) in constant_at:
                k = constant_at[id(obj)]
                used[k] = obj
                return ("constant", k)
            return where.get(id(obj))

    buffer = io.BytesIO()
    try:
        _Pickler(buffer, protocol=5).dump((list(fgraph.outputs), added, marks))
        # the original constants the graph holds, pickled apart: the loading process puts its own equal ones in their places
        return pickle.dumps((pickle.dumps(used, protocol=5), buffer.getvalue()), protocol=5)
    except Exception:  # an Op or a tag that does not pickle
        return None


def _transplant(fgraph: FunctionGraph, payload: bytes, key: str) -> bool:
    """Put the stored graph in place of ``fgraph``'s outputs and attach its features; False (entry removed) if it does not fit."""
    inputs = fgraph.inputs
    own = original_constants(fgraph)
    stored: dict[int, Constant] = {}

    class _Unpickler(pickle.Unpickler):
        def persistent_load(self, pid: Any) -> Any:
            if isinstance(pid, tuple):  # ("constant", k): the caller's own k-th constant, if it is the stored one's equal
                return _own_constant(own, stored[pid[1]], pid[1])
            return inputs[pid]

    try:
        constants, graph = pickle.loads(payload)
        stored.update(pickle.loads(constants))
        new_outputs, added, marks = _Unpickler(io.BytesIO(graph)).load()
        features = [_feature(module, qualname) for module, qualname in added]
    except Exception as exc:  # a class gone, an Op whose pickle changed: whatever loading raises
        rewritten_store.discard(key, f"it could not be loaded: {exc!r}")
        return False
    old = list(fgraph.outputs)
    if len(new_outputs) != len(old) or any(not o.type.is_super(n.type) for o, n in zip(old, new_outputs)):
        rewritten_store.discard(key, "its outputs do not fit the graph's")
        return False
    if not _rooted_in(new_outputs, inputs):
        rewritten_store.discard(key, "its graph reads a variable that is not one of the graph's inputs")
        return False
    nodes = [_output_node(fgraph, k) for k in range(len(old))]
    for node, new in zip(nodes, new_outputs):
        fgraph.change_node_input(node, 0, new, reason="innergraph.rewritten")
    for feature in features:
        fgraph.attach_feature(feature)
    for name, value in marks.items():
        setattr(fgraph, name, value)
    return True


def _own_constant(own: list[Constant], theirs: Constant, k: int) -> Constant:
    """The caller's k-th original constant if it equals the stored one (type and value), else the stored one.

    The rewritten graph used the process's own constants wherever the rewriting kept them;
    so does the loaded graph, and each constant is shared where the rewritten graph shared
    it. Unpickled instead, a constant of an inner graph became a second object beside the
    one PyTensor's re-interned frozen nodes keep, and the linker generated other code for
    that graph: Numba compiled it again in the first process that loaded it
    (``design/rewritten-graphs.md``, "Constants: the caller's own").
    """
    mine = own[k] if k < len(own) else None
    try:
        if mine is not None and mine.type == theirs.type and bool(mine.signature() == theirs.signature()):
            return mine
    except Exception:  # a constant whose data compares elementwise or not at all: keep the stored one
        pass
    return theirs


def _rooted_in(outputs: list[Variable], inputs: list[Variable]) -> bool:
    """Whether every variable ``outputs`` are computed from is one of ``inputs`` or a constant."""
    allowed = {id(v) for v in inputs}
    return all(
        id(v) in allowed or isinstance(v, Constant) for v in graph_inputs(outputs, blockers=inputs)
    )


def _feature(module: str, qualname: str) -> Feature:
    found: Any = __import__(module, fromlist=["_"])
    for part in qualname.split("."):
        found = getattr(found, part)
    feature = found()
    if not isinstance(feature, Feature):
        raise TypeError(f"{module}.{qualname} is not a Feature")
    return feature


def _output_node(fgraph: FunctionGraph, k: int) -> Any:
    for node, _ in fgraph.clients[fgraph.outputs[k]]:
        if isinstance(node.op, Output) and node.op.idx == k:
            return node
    raise RuntimeError(f"output {k} of the graph has no output node")


def patches() -> list[Patch]:
    return [Patch(FunctionMaker, "prepare_fgraph", staticmethod(prepare_fgraph))]
