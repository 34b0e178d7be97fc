"""PyTensor's ``scan_merge`` within one scope (`innergraph.rewriting.scan_merge`).

Between the lowering (1.59) and the fold (48.5) the loops of call bodies are native Scans
among the outer graph's nodes, and two bodies whose loops run over their first param of
one type share the step count. PyTensor's ``ScanMerge`` then made one Scan of loops of
two bodies: the differential programs met it on two outlined loop groups (taps -1 and
-2) over sequences that come through calls, which innergraph failed to compile ("a
rewrite broke the closure of a body").

The pass is called directly on FunctionGraphs of two unfolded bodies with a native Scan
each (merged by MergeOptimizer first, so that they share the step count), and of a body
loop beside an outer loop of one constant length, beside PyTensor's pass on an identical
graph; then graphs are compiled: ``innergraph.call`` of a body holding a loop (cvm,
against a NumPy loop) and that program (Numba, against vanilla PyTensor). A last test lists
every graph pass PyTensor runs while bodies are unfolded and fails on one innergraph has
not read. The swap of the two passes is in ``tests/test_stand_in.py``.
"""

from typing import Any

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.compile.builders import OpFromGraph
from pytensor.compile.mode import Mode, optdb
from pytensor.graph.fg import FunctionGraph
from pytensor.graph.rewriting.basic import MergeOptimizer
from pytensor.scan.op import Scan as NativeScan
from pytensor.scan.rewriting.merge import ScanMerge

import innergraph
from innergraph.core.fold import fold_inner_graphs
from innergraph.rewriting import scan_merge
from innergraph.rewriting.scan_merge import ScopedScanMerge, homes
from consumer_nodes import call_node
from typed import param, recording
from vanilla import vanilla_values

VECTOR = pt.dvector().type
SCALAR = pt.dscalar().type


def _damped(x_t: Any, h: Any) -> Any:
    return 0.5 * h + pt.tanh(x_t)


def _drift(x_t: Any, h: Any) -> Any:
    return 0.5 * h - x_t


def _loop(step: Any, sequence: Any, start: Any) -> Any:
    return pytensor.scan(step, sequences=[sequence], outputs_info=[start], return_updates=False)[-1]


def _two_bodies(second: Any, same_body: bool = False) -> FunctionGraph:
    """Two calls, each of a body whose loop runs over its param 0 (a vector); param 1 of the second is of type ``second``.

    ``same_body``: both loops in one body instead (the second's start from its param 2).
    """
    x, y = pt.dvector("x"), pt.dvector("y")
    z = second()
    first_loop = _loop(_damped, param(0, VECTOR), param(1, VECTOR)[0])
    start = param(2 if same_body else 1, second)
    second_loop = _loop(_drift, param(0, VECTOR), start if second == SCALAR else start[0])
    if same_body:
        node = call_node([first_loop + second_loop], [x, y, z], fold=False)
        out = node.outputs[0]
    else:
        out = call_node([first_loop], [x, y], fold=False).outputs[0] + call_node([second_loop], [x, z], fold=False).outputs[0]
    fgraph = FunctionGraph([x, y, z], [out], clone=False)
    MergeOptimizer().rewrite(fgraph)
    return fgraph


def _scans(fgraph: FunctionGraph) -> list[Any]:
    return [node for node in fgraph.apply_nodes if isinstance(node.op, NativeScan)]


def _step_counts(fgraph: FunctionGraph) -> set[Any]:
    return {node.inputs[0] for node in _scans(fgraph)}


@pytest.mark.parametrize("second", [SCALAR, VECTOR], ids=["param 1 of other types", "equal params"])
def test_pytensors_pass_merges_loops_of_two_bodies(second: Any) -> None:
    """The hazard: after merging, the two bodies' loops share their step count, and PyTensor's pass makes them one Scan."""
    fgraph = _two_bodies(second)
    assert len(_scans(fgraph)) == 2 and len(_step_counts(fgraph)) == 1
    ScanMerge().rewrite(fgraph)
    assert len(_scans(fgraph)) == 1
    if second == SCALAR:
        with pytest.raises(AssertionError, match="broke the closure of a body"):
            fold_inner_graphs(fgraph)


@pytest.mark.parametrize("second", [SCALAR, VECTOR], ids=["param 1 of other types", "equal params"])
def test_loops_of_two_bodies_stay_apart(second: Any) -> None:
    fgraph = _two_bodies(second)
    ScopedScanMerge().rewrite(fgraph)
    assert len(_scans(fgraph)) == 2
    assert fold_inner_graphs(fgraph) == 2  # both bodies still closed


def _outer_and_body_of_constant_length() -> FunctionGraph:
    """A loop of five steps in the outer graph, and one of five steps in a body (over its param 0)."""
    x = pt.dvector("x")
    outer = pytensor.scan(lambda h: 0.5 * h + 1.0, outputs_info=[x[0]], n_steps=5, return_updates=False)[-1]
    inner = pytensor.scan(lambda h: 0.5 * h - 1.0, outputs_info=[param(0, VECTOR)[0]], n_steps=5, return_updates=False)[-1]
    return FunctionGraph([x], [outer + call_node([inner], [x], fold=False).outputs[0]], clone=False)


def test_a_loop_of_a_body_and_one_of_the_outer_graph_stay_apart() -> None:
    """Constant step counts are equal wherever the loops are: PyTensor's pass merges across the scopes."""
    theirs, ours = _outer_and_body_of_constant_length(), _outer_and_body_of_constant_length()
    ScanMerge().rewrite(theirs)
    assert len(_scans(theirs)) == 1
    ScopedScanMerge().rewrite(ours)
    assert len(_scans(ours)) == 2
    assert fold_inner_graphs(ours) == 1


def test_a_call_holding_a_loop_as_long_as_an_outer_one() -> None:
    """Through the public API: a body of ``innergraph.call`` with a loop of five steps beside an outer loop of five.

    PyTensor's pass made them one Scan in the outer graph, reading the body's param: "a
    rewrite broke the closure of a body" (cvm; the guard removed, it fails).
    """
    x = pt.dvector("x")
    outer = pytensor.scan(lambda h: 0.5 * h + 1.0, outputs_info=[x[0]], n_steps=5, return_updates=False)[-1]

    def body(v: Any) -> Any:
        return pytensor.scan(lambda h: 0.5 * h - pt.tanh(h), outputs_info=[v[1]], n_steps=5, return_updates=False)[-1]

    f = pytensor.function([x], outer + innergraph.call(body, x), mode=Mode(linker="cvm", optimizer="fast_run"))
    value = np.array([0.3, -1.2, 2.0])
    a, b = value[0], value[1]
    for _ in range(5):
        a, b = 0.5 * a + 1.0, 0.5 * b - np.tanh(b)
    np.testing.assert_allclose(f(value), a + b, rtol=1e-14)


def test_loops_of_one_body_are_merged() -> None:
    fgraph = _two_bodies(VECTOR, same_body=True)
    assert len(_scans(fgraph)) == 2
    ScopedScanMerge().rewrite(fgraph)
    assert len(_scans(fgraph)) == 1
    assert fold_inner_graphs(fgraph) == 1


def test_loops_of_the_outer_graph_are_merged_as_pytensor_merges_them() -> None:
    x = pt.dvector("x")
    out = _loop(_damped, x, x[0]) + _loop(_drift, x, x[1])
    fgraph = FunctionGraph([x], [out], clone=True)
    MergeOptimizer().rewrite(fgraph)
    ScopedScanMerge().rewrite(fgraph)
    assert len(_scans(fgraph)) == 1


def test_homes_are_found_once_per_run_and_only_for_two_scans_or_more(monkeypatch: Any) -> None:
    found: list[FunctionGraph] = []
    monkeypatch.setattr(scan_merge, "homes", recording(found, homes))
    fgraph = _two_bodies(SCALAR)
    ScopedScanMerge().rewrite(fgraph)
    assert found == [fgraph] and len(_scans(fgraph)) == 2
    x = pt.dvector("x")
    single = FunctionGraph([x], [call_node([_loop(_damped, param(0, VECTOR), param(0, VECTOR)[0])], [x], fold=False).outputs[0]])
    ScopedScanMerge().rewrite(single)
    assert found == [fgraph]  # one Scan: PyTensor's pass asks nothing
    plain = FunctionGraph([x], [_loop(_damped, x, x[0]) + _loop(_drift, x, x[1])])
    ScopedScanMerge().rewrite(plain)
    assert found == [fgraph]  # no body: one scope, no walk


def test_homes() -> None:
    apart, together = _two_bodies(SCALAR), _two_bodies(VECTOR, same_body=True)
    assert sorted(len(h) for h in homes(apart).values()) == [1, 1]
    assert len(set(homes(apart).values())) == 2
    assert len(set(homes(together).values())) == 1
    assert None not in next(iter(homes(together).values()))  # in the body, not in the outer graph


def test_the_pass_stands_in_for_pytensors_while_installed() -> None:
    def merge_passes() -> set[type]:
        return {type(r) for r in optdb["scan_eqopt2"].__db__["scan_merge"]}

    assert merge_passes() == {ScopedScanMerge}
    with innergraph.uninstalled():
        assert merge_passes() == {ScanMerge}
    assert merge_passes() == {ScopedScanMerge}


#: The graph passes PyTensor runs while bodies are unfolded (between ``innergraph_lift``, 0.04, and
#: ``innergraph_fold``, 48.5) that innergraph has read, and why each keeps every node in its scopes.
#: A pass that builds one node from *siblings* (as ``scan_merge`` and ``elemwise_fusion`` do) can
#: combine nodes of two bodies; one that replaces a node by an expression of its own ancestors cannot.
SCOPE_SAFE = {
    "innergraph.rewriting.db.FunctionRewriter": "innergraph's own passes, which walk one scope at a time",
    "innergraph.rewriting.scan_merge.ScopedScanMerge": "scan_merge within one scope (this file)",
    "pytensor.compile.mode.PrintCurrentFunctionGraph": "prints the graph",
    "pytensor.graph.rewriting.basic.MergeOptimizer": "merges equal nodes over the same inputs: the same value in any scope",
    "pytensor.tensor.rewriting.shape.ShapeOptimizer": "attaches the shape feature",
    "pytensor.tensor.rewriting.shape.UnShapeOptimizer": "detaches it",
    "pytensor.tensor.rewriting.assumptions.DrainSpecifyAssumptions": "replaces each assumption node by its input",
    "pytensor.tensor.rewriting.blas.GemmOptimizer": "rewrites one sum of products into a gemm of that sum's own inputs",
    "pytensor.tensor.rewriting.linalg.reassociate_matmul.ReassociateMatmulChain": "reassociates one chain of products from the chain's own inputs",
}


def _graph_passes(rewriter: Any, path: str, found: dict[str, set[str]]) -> None:
    """Record the graph passes in ``rewriter``, looking inside databases and the rewriters that hold rewriters."""
    from pytensor.graph.rewriting.basic import (
        EquilibriumGraphRewriter,
        GraphRewriter,
        SequentialGraphRewriter,
        WalkingGraphRewriter,
    )
    from pytensor.graph.rewriting.db import RewriteDatabase

    if isinstance(rewriter, RewriteDatabase):
        for name in sorted(rewriter._names):
            for member in rewriter.__db__.get(name, ()):
                _graph_passes(member, f"{path}/{name}", found)
    elif isinstance(rewriter, SequentialGraphRewriter):
        for member in list(rewriter):
            _graph_passes(member, path, found)
    elif isinstance(rewriter, EquilibriumGraphRewriter):
        for member in [*rewriter.global_rewriters, *rewriter.final_rewriters, *rewriter.cleanup_rewriters]:
            _graph_passes(member, path, found)
    elif isinstance(rewriter, GraphRewriter) and not isinstance(rewriter, WalkingGraphRewriter):
        module = type(rewriter).__module__
        if module.startswith("pytensor.innergraph."):  # the patched PyTensor's innergraph: one name in both forms
            module = module.removeprefix("pytensor.")
        found.setdefault(f"{module}.{type(rewriter).__qualname__}", set()).add(path)


def test_every_graph_pass_while_bodies_are_unfolded_keeps_scopes() -> None:
    """A PyTensor that adds a pass there (or innergraph not standing in for ``scan_merge``) fails here, naming it.

    Node rewriters replace one node by an expression of its ancestors, so they are not
    listed; the passes that hold them (walking, equilibrium, sequential) are looked into.
    """
    found: dict[str, set[str]] = {}
    for name, position in optdb.__position__.items():
        if 0.04 < position < 48.5:
            for member in optdb.__db__.get(name, ()):
                _graph_passes(member, name, found)
    unknown = {kind: sorted(where) for kind, where in found.items() if kind not in SCOPE_SAFE}
    assert not unknown, f"graph passes that run while bodies are unfolded and may combine nodes of two scopes: {unknown}"
    assert "innergraph.rewriting.scan_merge.ScopedScanMerge" in found


def _grouped_through_calls() -> tuple[list[Any], Any]:
    """Four loops over columns of ``m``, two with one tap and two with two, each fed by an OpFromGraph of its own with a dead output.

    innergraph lifts the calls and outlines each group of loops into a body; the two bodies'
    loops run over their param 0 (a vector): PyTensor's pass merged them.
    """
    m = pt.dmatrix("m")
    values = []
    for k, (column, taps) in enumerate([(0, (-1,)), (2, (-1,)), (1, (-2,)), (3, (-2,))]):
        rows = -min(taps)
        inner = m.type()
        first = inner[0, column] if taps == (-1,) else inner[:rows, column]
        outputs: Any = OpFromGraph([inner], [pt.tanh(inner[rows:, column]) * (k + 0.5), first, inner + 1.0])(m)
        sequence, start = outputs[:2]
        initial = start if taps == (-1,) else {"initial": start, "taps": list(taps)}
        trace = pytensor.scan(lambda x_t, *h: 0.5 * h[0] + 0.5 * pt.tanh(-x_t * h[-1]), sequences=[sequence],
                              outputs_info=[initial], return_updates=False)
        values.append(trace[-1])
    return [m], [pt.stack(values)]  # the value alone meets the fault: a gradient would triple the compile (9.7 s -> 26.5 s cold)


def test_loop_groups_through_calls_compile_and_equal_vanilla() -> None:
    value = np.random.default_rng(7).normal(size=(6, 4))
    mode = Mode(linker="numba", optimizer="fast_run")
    inputs, outputs = _grouped_through_calls()
    ours = pytensor.function(inputs, outputs, mode=mode)(value)
    theirs = vanilla_values(_grouped_through_calls, [value], mode)
    np.testing.assert_allclose(ours[0], theirs[0], rtol=1e-12, atol=1e-14)
