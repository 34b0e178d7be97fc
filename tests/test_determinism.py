"""The rewrite pipeline's result depends on the graph alone, never on hash or id order.

Each case is compiled twice in this process (the graphs are built afresh, so every
node has other ids), and rewritten in this process and in two fresh interpreters
with different ``PYTHONHASHSEED``s. The compiled graphs must be the same node for node, in the
same order: a *fingerprint* lists the nodes of ``fn.maker.fgraph.toposort()`` with
their Op, where each input comes from (a graph input by position, a node output by
position, a constant by type and value) and their output types; an inner graph
(a native Scan's, an OpFromGraph's) is fingerprinted the same way, and a folded
body by the bytes of its canonical encoding (`innergraph.core.canonical`, which is what
a `Body` pickles to).

The rewrite itself is compared too, as DebugMode's stability check does: the
sequence of graph events (imports, input changes, prunes: kind, Op, position,
reason) of rewriting the case, except one equal constant replacing another: PyTensor 3.3
interns a Scan's inner constants process-wide, so how many of those MergeOptimizer makes
depends on what the process built before. Run as a script, this module prints both for
every case as JSON (what the subprocesses do).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import pytensor
import pytest
from pytensor.compile.io import SymbolicInput, SymbolicOutput
from pytensor.compile.maker import FunctionMaker
from pytensor.compile.mode import Mode, get_default_mode
from pytensor.graph.basic import Constant, Variable
from pytensor.graph.features import Feature
from pytensor.graph.fg import AbstractFunctionGraph, FunctionGraph
from pytensor.graph.op import Op
from pytensor.graph.type import Type

from innergraph_bench import cases
from innergraph.core.fold import folded_bodies
from innergraph.core.types import Body

#: The default pipeline with a linker that compiles quickly (the structure is the rewriter's).
MODE = Mode(linker="cvm", optimizer=get_default_mode().provided_optimizer)

CASES: dict[str, Callable[[], cases.Case]] = {
    "1669-d2": lambda: cases.issue_1669(2),
    "ar2": lambda: cases.ar2(n=8),
    "ifelse": lambda: cases.ifelse_heavy(size=4, n_conditionals=3),
    "call": lambda: cases.student_t(k=3),
    "nested": lambda: cases.nested_scan(outer_steps=3, inner_steps=2),
}


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def _leaf(var: Variable, inputs: dict[Variable, int]) -> Any:
    if var in inputs:
        return ["input", inputs[var]]
    if isinstance(var, Constant) and isinstance(var.data, Body):
        return ["body", _digest(json.dumps(_encoding(var.data.key())).encode())]
    if isinstance(var, Constant):
        return ["constant", str(var.type), _data(var.data)]
    return ["free", str(var.type)]


def _data(data: Any) -> str:
    value = np.asarray(data).tobytes() if isinstance(data, np.ndarray | np.generic | int | float) else repr(data).encode()
    return _digest(value)


def _encoding(item: Any) -> Any:
    """A body's canonical encoding as JSON data, the same in every process.

    Its pickle is not: an Op pickles with state PyTensor fills in lazily (a
    ``Composite``'s, once it was compiled), so the bytes of one body change when a
    later compilation uses the same Op object.
    """
    if isinstance(item, tuple | list):
        return [_encoding(i) for i in item]
    if isinstance(item, Op):
        inner = getattr(item, "fgraph", None)
        return ["op", str(item), fingerprint(inner) if isinstance(inner, AbstractFunctionGraph) else None]
    if isinstance(item, Type):
        return ["type", str(item)]
    if isinstance(item, str | int | float | bool) or item is None:
        return item
    if hasattr(item, "__len__") and len(item) == 2:  # a constant's signature: (type, data)
        return ["signature", str(item[0]), _data(item[1])]
    return ["other", type(item).__name__, _data(item)]


def fingerprint(fgraph: AbstractFunctionGraph) -> list[Any]:
    """``fgraph``'s nodes in toposort order: Op, input references, output types, inner graph."""
    inputs = {v: i for i, v in enumerate(fgraph.inputs)}
    where: dict[Variable, list[int]] = {}
    nodes = []
    for k, node in enumerate(fgraph.toposort()):
        refs = [["node", *where[v]] if v in where else _leaf(v, inputs) for v in node.inputs]
        inner = getattr(node.op, "fgraph", None)
        nodes.append([str(node.op), refs, [str(o.type) for o in node.outputs], fingerprint(inner) if isinstance(inner, AbstractFunctionGraph) else None])
        where.update((o, [k, j]) for j, o in enumerate(node.outputs))
    outputs = [["node", *where[o]] if o in where else _leaf(o, inputs) for o in fgraph.outputs]
    return [nodes, outputs]


_ADDRESS = re.compile(r" at 0x[0-9a-f]+")


class _Events(Feature):
    """Every change of the graph, as DebugMode compares two rewrites: kind, Op, input position, reason."""

    def __init__(self) -> None:
        self.events: list[list[Any]] = []

    def _record(self, kind: str, node: Any, reason: Any, idx: int | None = None) -> None:
        # a rewriter's repr may name a function by its address: not part of the event
        self.events.append([kind, str(node.op), idx, _ADDRESS.sub("", str(reason))])

    def on_import(self, fgraph: FunctionGraph, node: Any, reason: Any) -> None:
        self._record("import", node, reason)

    def on_change_input(self, fgraph: FunctionGraph, node: Any, i: int, r: Any, new_r: Any, reason: Any = None) -> None:
        if isinstance(r, Constant) and isinstance(new_r, Constant) and r.equals(new_r):
            # one equal constant for another (MergeOptimizer): how many such changes a rewrite
            # makes depends on which constant objects are already one, and PyTensor 3.3 interns
            # a Scan's inner constants process-wide (design/testing.md, "Determinism")
            return
        self._record("change", node, reason, i)

    def on_prune(self, fgraph: FunctionGraph, node: Any, reason: Any) -> None:
        self._record("prune", node, reason)


def rewritten(case_id: str) -> tuple[FunctionGraph, list[list[Any]]]:
    """The case's graph rewritten by `MODE`'s rewriter, and the events of rewriting it (what DebugMode's stability check compares)."""
    inputs, outputs = CASES[case_id]().build("innergraph")
    fgraph, _ = FunctionMaker.create_fgraph(
        [SymbolicInput(v) for v in inputs], [SymbolicOutput(v) for v in outputs], force_clone=True
    )
    recorder = _Events()
    fgraph.attach_feature(recorder)
    MODE.optimizer(fgraph)
    return fgraph, recorder.events


def compiled(case_id: str) -> Any:
    case = CASES[case_id]()
    inputs, outputs = case.build("innergraph")
    return pytensor.function(inputs, outputs, mode=MODE)


def rewrites() -> dict[str, Any]:
    """Per case, the fingerprint of the rewritten graph and the events of rewriting it."""
    found = {}
    for case_id in CASES:
        fgraph, events = rewritten(case_id)
        found[case_id] = {"graph": fingerprint(fgraph), "events": events}
    return found


@pytest.fixture(scope="module")
def in_this_process() -> dict[str, Any]:
    found = rewrites()
    for case_id in CASES:
        found[case_id]["compiled"] = fingerprint(compiled(case_id).maker.fgraph)
    return found


@pytest.mark.parametrize("case_id", CASES)
def test_compiling_twice_gives_the_same_graph_in_the_same_order(case_id, in_this_process):
    fn = compiled(case_id)
    assert fingerprint(fn.maker.fgraph) == in_this_process[case_id]["compiled"]
    first = compiled(case_id)  # and the bodies themselves, compared as canonical encodings
    assert [b.key() for _, b in folded_bodies(fn.maker.fgraph.outputs)] == [
        b.key() for _, b in folded_bodies(first.maker.fgraph.outputs)
    ]


@pytest.mark.parametrize("case_id", CASES)
def test_rewriting_twice_makes_the_same_changes_in_the_same_order(case_id, in_this_process):
    """Stronger than the result: every import, change and prune, as DebugMode's stability check compares them.

    Unfolding bodies in the order of a set of nodes gave the same compiled graphs
    through different imports; DebugMode refused such graphs (``StochasticOrder``).
    """
    fgraph, events = rewritten(case_id)
    assert events == in_this_process[case_id]["events"]
    assert fingerprint(fgraph) == in_this_process[case_id]["graph"]


def test_the_cases_have_bodies_and_native_inner_graphs(in_this_process):
    """The fingerprints reach what the pipeline made: folded bodies and native Scans' inner graphs."""
    graphs = {case_id: found["compiled"] for case_id, found in in_this_process.items()}
    assert '"body"' in json.dumps(graphs["ifelse"]) and '"body"' in json.dumps(graphs["call"])
    assert all(any(node[3] for node in graphs[c][0]) for c in ("1669-d2", "ar2", "nested"))
    assert '"free"' not in json.dumps(graphs)
    lifted = [e for found in in_this_process.values() for e in found["events"] if e[3] == "innergraph_lift"]
    assert any(e[0] == "import" for e in lifted)  # the events include the unfolded bodies' nodes


def test_fresh_interpreters_with_other_hash_seeds_give_the_same_graphs(in_this_process):
    def run(seed: str) -> subprocess.Popen[str]:
        env = {**os.environ, "PYTHONHASHSEED": seed}
        return subprocess.Popen([sys.executable, __file__], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    processes = [run("1"), run("12345")]
    results = []
    for process in processes:
        out, err = process.communicate(timeout=600)
        assert process.returncode == 0, err
        results.append(json.loads(out))
    expected = json.loads(json.dumps(in_this_process))  # tuples as lists, like the subprocesses' JSON
    for case_id in CASES:
        expected[case_id].pop("compiled")
    assert results[0] == results[1] == expected


if __name__ == "__main__":
    import innergraph  # noqa: F401  (installs the patches, as the tests' conftest does)

    print(json.dumps(rewrites()))
