"""The in-place decision for native Scans that share an Op, taken once (issue 22, item 3).

`innergraph.rewriting.scan_inplace.SharedScanInplace` stands in for PyTensor's
``scan_make_inplace`` while innergraph is installed. These tests check that it takes
PyTensor's decisions (same destroy maps as PyTensor's own pass on the same graphs),
that the K copies of one Op become in place with one validation and share one in-place
Op, that protected inputs cost no attempt and are never overwritten, and that values
equal vanilla PyTensor's.
"""

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.compile.mode import Mode, optdb
from pytensor.scan.op import Scan as NativeScan
from pytensor.scan.rewriting.inplace import ScanInplaceOptimizer

import innergraph
from innergraph.rewriting import scan_inplace
from innergraph.rewriting.scan_inplace import SharedScanInplace, replace_pytensor_pass, restore_pytensor_pass

PY = Mode(linker="py", optimizer="fast_run")
NUMBA = Mode(linker="numba", optimizer="fast_run")


def vanilla(inputs, outputs, values, linker="py"):
    with innergraph.uninstalled():
        return pytensor.function(inputs, outputs, mode=Mode(linker=linker, optimizer="fast_run"))(*values)


def step(x_t, acc):
    return acc * 0.9 + pt.sin(x_t)


def loops(k, init, final_only):
    """``k`` loops of one step over sequences of different lengths, from the same ``init``."""
    xs = [pt.dvector(f"x{i}") for i in range(k)]
    traces = [pytensor.scan(step, sequences=[x], outputs_info=[init], return_updates=False) for x in xs]
    outputs = [t[-1] for t in traces] if final_only else [t.sum() for t in traces]
    values = [np.random.default_rng(i).normal(size=5 + i) for i in range(k)]
    return xs, outputs, values


def scans(fn):
    return [n for n in fn.maker.fgraph.toposort() if isinstance(n.op, NativeScan)]


def destroy_maps(fn):
    return sorted(str(n.op.destroy_map) for n in scans(fn))


@pytest.fixture
def attempts(monkeypatch):
    """How many in-place attempts (each a replacement and a validation) the pass makes, and over how many nodes."""
    calls = []
    original = scan_inplace._Pass._attempt

    def spy(self, nodes, output_indices):
        calls.append(len(nodes))
        return original(self, nodes, output_indices)

    monkeypatch.setattr(scan_inplace._Pass, "_attempt", spy)
    return calls


def graphs():
    """(name, inputs, outputs, values) of graphs whose Scans share Ops in several ways."""
    a, v = pt.dscalar("a"), pt.dvector("v")
    xs, outs, vals = loops(4, a, final_only=False)  # traced states: fresh buffers, made in place
    yield "traces", [*xs, a], [pt.add(*outs)], [*vals, np.float64(0.3)]
    xs, outs, vals = loops(4, a, final_only=True)  # untraced states starting from an input: protected
    yield "finals", [*xs, a], [pt.add(*outs)], [*vals, np.float64(0.3)]
    e = pt.exp(v)  # (under Numba) untraced states starting from one computed vector: one loop may destroy it
    xs = [pt.dmatrix(f"x{i}") for i in range(3)]
    finals = [pytensor.scan(step, sequences=[x], outputs_info=[e], return_updates=False)[-1] for x in xs]
    rng = np.random.default_rng(4)
    yield "shared-init", [*xs, v], [pt.add(*finals)], [rng.normal(size=(4 + i, 2)) for i in range(3)] + [rng.normal(size=2)]
    xs = [pt.dmatrix(f"x{i}") for i in range(3)]
    traces = [pytensor.scan(lambda x, acc: acc * 0.5 + x, sequences=[x], outputs_info=[v], return_updates=False) for x in xs[:2]]
    traces.append(pytensor.scan(lambda x, acc: acc * 0.5 + x, sequences=[xs[2]], outputs_info=[v * 2], return_updates=False))
    rng = np.random.default_rng(5)
    # vector states, one loop from a computed vector: copies whose candidates differ
    yield "mixed", [*xs, v], [pt.add(*(t[-1] for t in traces))], [rng.normal(size=(4 + i, 2)) for i in range(3)] + [rng.normal(size=2)]


@pytest.mark.parametrize(
    "name, linker", [("traces", "py"), ("finals", "py"), ("shared-init", "py"), ("mixed", "py"), ("finals", "numba"), ("shared-init", "numba")]
)
def test_same_decisions_and_values_as_pytensors_pass(name, linker):
    _, inputs, outputs, values = next(g for g in graphs() if g[0] == name)
    mode = Mode(linker=linker, optimizer="fast_run")
    ours = pytensor.function(inputs, outputs, mode=mode)
    restore_pytensor_pass()
    try:
        assert all(type(r) is ScanInplaceOptimizer for r in optdb.__db__["scan_make_inplace"])
        theirs = pytensor.function(inputs, outputs, mode=mode)
    finally:
        replace_pytensor_pass()
    assert destroy_maps(ours) == destroy_maps(theirs)
    copies = [np.copy(v) for v in values]
    got = ours(*values)
    for value, copy in zip(values, copies):
        np.testing.assert_array_equal(value, copy)  # nothing the user passed was overwritten
    for g, w in zip(got, vanilla(inputs, outputs, values, linker=linker)):
        np.testing.assert_allclose(g, w, rtol=1e-12)


def test_copies_made_in_place_at_once_with_one_op(attempts):
    _, inputs, outputs, values = next(graphs())
    fn = pytensor.function(inputs, outputs, mode=PY)
    nodes = scans(fn)
    assert len(nodes) == 4 and all(n.op.destroy_map == {0: [2]} for n in nodes)
    assert len({id(n.op) for n in nodes}) == 1  # one in-place Op built for the four
    assert attempts == [4]  # one replacement of the four copies, one validation
    np.testing.assert_allclose(fn(*values), vanilla(inputs, outputs, values), rtol=1e-12)


def test_protected_initial_states_cost_no_attempt(attempts):
    _, inputs, outputs, values = list(graphs())[1]
    fn = pytensor.function(inputs, outputs, mode=NUMBA)
    nodes = scans(fn)
    assert len(nodes) == 4 and all(not n.op.destroy_map for n in nodes)
    assert all(n.inputs[-1] is inputs[-1] for n in nodes)  # each loop's state starts from the input itself
    assert attempts == []  # PyTensor's pass tries each of the four twice, and fails
    copy = np.copy(values[-1])
    np.testing.assert_allclose(fn(*values), vanilla(inputs, outputs, values, linker="numba"), rtol=1e-12)
    assert values[-1] == copy


def test_refused_batch_falls_back_to_pytensors_one_by_one(attempts):
    _, inputs, outputs, values = list(graphs())[2]
    fn = pytensor.function(inputs, outputs, mode=NUMBA)
    # three loops may not destroy one exp(v) read by all: the batch is refused, then each copy is
    # tried as PyTensor tries it (all candidates, then one by one), and none may destroy it
    assert len(scans(fn)) == 3 and not any(n.op.destroy_map for n in scans(fn))
    assert attempts == [3, 1, 1, 1, 1, 1, 1]
    np.testing.assert_allclose(fn(*values), vanilla(inputs, outputs, values, linker="numba"), rtol=1e-12)


def test_outlined_loops_under_numba_share_the_in_place_op(attempts):
    _, inputs, outputs, values = next(graphs())
    fn = pytensor.function(inputs, outputs, mode=NUMBA)
    nodes = scans(fn)
    assert len(nodes) == 4 and len({id(n.op) for n in nodes}) == 1
    assert all(n.op.destroy_map == {0: [2]} for n in nodes) and attempts == [4]
    np.testing.assert_allclose(fn(*values), vanilla(inputs, outputs, values, linker="numba"), rtol=1e-12)


def test_graphs_innergraph_did_not_lift_get_pytensors_pass(attempts):
    """innergraph installed, its rewrites excluded: its in-place pass hands the native Scans to PyTensor's."""
    _, inputs, outputs, values = next(graphs())
    fn = pytensor.function(inputs, outputs, mode=PY.excluding("innergraph"))
    assert attempts == [] and all(n.op.destroy_map == {0: [2]} for n in scans(fn))
    # PyTensor's own pass gives each node an Op of its own; its scan_inner_graph (100) then bakes
    # equal Ops with equal maps once and gives the nodes that one Op (PyTensor 3.3)
    assert len({id(n.op) for n in scans(fn)}) == 1


def test_excluding_inplace_excludes_it():
    _, inputs, outputs, values = next(graphs())
    fn = pytensor.function(inputs, outputs, mode=PY.excluding("inplace"))
    assert all(not n.op.destroy_map for n in scans(fn))


def test_uninstall_puts_pytensors_pass_back():
    assert [type(r) for r in optdb.__db__["scan_make_inplace"]] == [SharedScanInplace]
    with innergraph.uninstalled():
        (rewriter,) = optdb.__db__["scan_make_inplace"]
        assert type(rewriter) is ScanInplaceOptimizer and rewriter in optdb.__db__["inplace"]
        assert not any(isinstance(r, SharedScanInplace) for members in optdb.__db__.values() for r in members)
    assert [type(r) for r in optdb.__db__["scan_make_inplace"]] == [SharedScanInplace]
