"""The in-place decision for native Scans that share an Op, taken once (issue 22, item 3).

`innergraph.rewriting.scan_inplace.SharedScanInplace` stands in for PyTensor's
``scan_make_inplace`` while innergraph is installed. These tests check that it takes
PyTensor's decisions (same destroy maps as PyTensor's own pass on the same graphs),
that the K copies of one Op become in place with one validation and share one in-place
Op, that protected inputs cost no attempt and are never overwritten, and that values
equal vanilla PyTensor's.

The pass is first called directly (so that a planted fault fails fast) on FunctionGraphs of
native Scans built here with every kind of state (mit-mot, mit-sot, sit-sot, untraced, beside
sequences and nit-sots), marked lifted, and compared with PyTensor's pass on an identical
copy: the inputs each Scan destroys, the attempts made, the Op the copies share, the
allocations duplicated (the swap of the two passes: ``tests/test_stand_in.py``).
"""

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.compile.aliasing import Supervisor
from pytensor.compile.mode import Mode, optdb
from pytensor.compile.ops import deep_copy_op
from pytensor.graph.basic import Constant
from pytensor.graph.fg import FunctionGraph
from pytensor.graph.traversal import graph_inputs
from pytensor.scan.op import Scan as NativeScan
from pytensor.scan.op import ScanInfo
from pytensor.scan.rewriting.inplace import ScanInplaceOptimizer
from pytensor.tensor.basic import Alloc
from pytensor.tensor.subtensor import IncSubtensor

import innergraph
from innergraph.rewriting import scan_inplace
from innergraph.rewriting.lift import mark_lifted
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


# The pass called directly ---------------------------------------------------------------------
#
# `SharedScanInplace` on FunctionGraphs of native Scans built here, marked lifted, beside
# PyTensor's own pass on an identical copy (first, so that a planted fault fails fast): which
# inputs each Scan destroys, which attempts it makes, which Op the copies share.


def native_op(n_seqs=1, n_mit_mot=0, n_mit_sot=0, n_sit_sot=0, n_nit_sot=0, n_untraced=0):
    """A native Scan Op with the slots asked for: scalar steps of float64 vector buffers, vector untraced states."""
    seqs = [pt.dscalar(f"s{i}") for i in range(n_seqs)]
    mit_mot = [pt.dscalar(f"mm{i}_{t}") for i in range(n_mit_mot) for t in (0, 1)]
    mit_sot = [pt.dscalar(f"ms{i}_{t}") for i in range(n_mit_sot) for t in (2, 1)]
    sit_sot = [pt.dscalar(f"ss{i}") for i in range(n_sit_sot)]
    untraced = [pt.dvector(f"u{i}") for i in range(n_untraced)]
    total = pt.add(pt.constant(0.5), *seqs, *mit_mot, *mit_sot, *sit_sot)
    outputs = [total * (i + 2) for i in range(n_mit_mot + n_mit_sot + n_sit_sot + n_nit_sot)] + [u + total for u in untraced]
    info = ScanInfo(
        n_seqs=n_seqs,
        mit_mot_in_slices=((0, 1),) * n_mit_mot,
        mit_mot_out_slices=((1,),) * n_mit_mot,
        mit_sot_in_slices=((-2, -1),) * n_mit_sot,
        sit_sot_in_slices=((-1,),) * n_sit_sot,
        n_nit_sot=n_nit_sot,
        n_untraced_sit_sot=n_untraced,
        n_non_seqs=0,
        as_while=False,
    )
    return NativeScan([*seqs, *mit_mot, *mit_sot, *sit_sot, *untraced], outputs, info)


N = pt.lscalar("n")


def apply_op(op, states, seqs=None):
    """A node of ``op`` over ``states`` (its mit-mot, mit-sot, sit-sot and untraced states, in order)."""
    seqs = seqs if seqs is not None else [pt.dvector(f"x{i}") for i in range(op.info.n_seqs)]
    n_traced = op.info.n_mit_mot + op.info.n_mit_sot + op.info.n_sit_sot
    return op.make_node(N, *seqs, *states[:n_traced], *states[n_traced:], *[N] * op.info.n_nit_sot)


def fresh(name):
    """A vector computed in the graph (nothing else reads it): a state any Scan may overwrite."""
    return pt.exp(pt.dvector(name))


def made_in_place(outputs, protected="all", rewriter=None, clone=True):
    """A copy of the graph of ``outputs`` (the graph itself if not ``clone``), marked lifted, after the pass (ours
    unless ``rewriter``); its Scans in order.

    ``protected``: the graph's inputs the function must not overwrite (all, or those named).
    """
    inputs = [v for v in graph_inputs(outputs) if not isinstance(v, Constant)]
    fgraph = FunctionGraph(inputs, list(outputs), clone=clone)
    fgraph.attach_feature(Supervisor([v for v in fgraph.inputs if protected == "all" or v.name in protected]))
    rewriter = rewriter or SharedScanInplace()
    rewriter.add_requirements(fgraph)
    mark_lifted(fgraph)
    rewriter.apply(fgraph)
    return fgraph, [n for n in fgraph.toposort() if isinstance(n.op, NativeScan)]


def pytensors_maps(outputs, protected="all"):
    """The destroy maps PyTensor's own pass gives the graph's Scans, in order."""
    _, nodes = made_in_place(outputs, protected, ScanInplaceOptimizer())
    return [n.op.destroy_map for n in nodes]


SLOTS = {  # (sequences, mit-mots, mit-sots, sit-sots, nit-sots, untraced states): destroy map when every state is fresh
    "one of each, two sequences": ((2, 1, 1, 1, 1, 1), {0: [3], 1: [4], 2: [5], 4: [6]}),
    "two mit-sots, two sit-sots, two untraced": ((1, 1, 2, 2, 0, 2), {0: [2], 1: [3], 2: [4], 3: [5], 4: [6], 5: [7], 6: [8]}),
    "three sit-sots, two nit-sots, an untraced": ((0, 0, 0, 3, 2, 1), {0: [1], 1: [2], 2: [3], 5: [4]}),
    "mit-sots and untraced, no sequence": ((0, 0, 2, 0, 1, 2), {0: [1], 1: [2], 3: [3], 4: [4]}),
    "two of each, three sequences": ((3, 2, 2, 2, 2, 2), {0: [4], 1: [5], 2: [6], 3: [7], 4: [8], 5: [9], 8: [10], 9: [11]}),
    "a mit-mot, a mit-sot, no sit-sot": ((1, 1, 1, 0, 1, 1), {0: [2], 1: [3], 3: [4]}),
}


@pytest.mark.parametrize("slots, expected", SLOTS.values(), ids=SLOTS.keys())
def test_every_kind_of_state_is_made_in_place_as_pytensors_pass_does(slots, expected, attempts):
    op = native_op(*slots)
    n_states = sum(slots[1:4]) + slots[5]
    node = apply_op(op, [fresh(f"b{i}") for i in range(n_states)])
    fgraph, (new,) = made_in_place(node.outputs)
    assert new.op.destroy_map == expected == pytensors_maps(node.outputs)[0]
    assert new.op.view_map == {}  # an untraced output overwrites its input: no longer a view of it
    assert attempts == [1] and op.destroy_map == {}  # one attempt; the Op the node had is left as it was


def test_protected_states_cost_no_attempt_the_others_are_tried_one_by_one(attempts):
    op = native_op(n_seqs=1, n_sit_sot=2, n_nit_sot=1, n_untraced=3)
    v, w, z = pt.dvector("v"), pt.dvector("w"), pt.dvector("z")
    # a protected input, a fresh vector, a view of a protected input, an input the function may overwrite, a constant
    node = apply_op(op, [v, fresh("b"), w[::-1], z, pt.constant(np.zeros(3))])
    _, (new,) = made_in_place(node.outputs, protected=("v", "w", "x0"))
    assert new.op.destroy_map == {1: [3], 4: [5]} == pytensors_maps(node.outputs, protected=("v", "w", "x0"))[0]
    # the three candidates at once (refused: a constant cannot be overwritten), then each alone
    assert attempts == [1, 1, 1, 1]
    # nothing protected: every input may be overwritten, only the constant may not
    attempts.clear()
    _, (new,) = made_in_place(node.outputs, protected=())
    assert new.op.destroy_map == {0: [2], 1: [3], 3: [4], 4: [5]} == pytensors_maps(node.outputs, protected=())[0]
    assert attempts == [1, 1, 1, 1, 1, 1]
    # the second untraced state protected, the first and the trace's fresh: one attempt, of those two
    attempts.clear()
    node = apply_op(native_op(n_seqs=1, n_sit_sot=1, n_untraced=2), [fresh("b"), fresh("u"), v])
    _, (new,) = made_in_place(node.outputs, protected=("v",))
    assert new.op.destroy_map == {0: [2], 1: [3]} == pytensors_maps(node.outputs, protected=("v",))[0]
    assert attempts == [1]
    # the third trace protected, the first two fresh: one attempt, of those two
    attempts.clear()
    node = apply_op(native_op(n_seqs=1, n_sit_sot=3), [fresh("b0"), fresh("b1"), v])
    _, (new,) = made_in_place(node.outputs, protected=("v",))
    assert new.op.destroy_map == {0: [2], 1: [3]} == pytensors_maps(node.outputs, protected=("v",))[0]
    assert attempts == [1]


def test_copies_of_one_op_are_made_in_place_together_with_one_op(attempts):
    op = native_op(n_seqs=1, n_sit_sot=1, n_untraced=1)
    nodes = [apply_op(op, [fresh(f"b{i}"), fresh(f"u{i}")]) for i in range(3)]
    outputs = [out for n in nodes for out in n.outputs]
    _, new = made_in_place(outputs)
    assert [n.op.destroy_map for n in new] == [{0: [2], 1: [3]}] * 3 == pytensors_maps(outputs)
    assert len({id(n.op) for n in new}) == 1 and attempts == [3]  # one in-place Op, one attempt
    # one copy starting from a protected input: the copies' candidates differ, each is tried alone
    attempts.clear()
    nodes[1] = apply_op(op, [pt.dvector("v"), fresh("u1")])
    outputs = [out for n in nodes for out in n.outputs]
    _, new = made_in_place(outputs)
    maps = [n.op.destroy_map for n in new]
    assert sorted(map(str, maps)) == sorted(map(str, pytensors_maps(outputs))) == ["{0: [2], 1: [3]}"] * 2 + ["{1: [3]}"]
    assert attempts == [1, 1, 1]
    assert len({id(n.op) for n in new if n.op.destroy_map == {0: [2], 1: [3]}}) == 1  # one Op built per decision


def test_copies_with_fewer_candidates_than_the_first_are_tried_alone(attempts):
    """The first copy the pass reaches may overwrite both states, the other only its trace's: neither more nor fewer
    candidates than the first's send the copies together."""
    op = native_op(n_seqs=1, n_sit_sot=1, n_untraced=1)
    (trace, _) = apply_op(op, [fresh("b1"), pt.dvector("v")]).outputs  # its untraced state a protected input
    last = apply_op(op, [fresh("b0"), fresh("u0")], seqs=[trace])  # reads the other's trace: reached first
    _, new = made_in_place(last.outputs)
    assert [n.op.destroy_map for n in new] == [{0: [2]}, {0: [2], 1: [3]}] == pytensors_maps(last.outputs)
    assert attempts == [1, 1]  # each copy's candidates at once, no batch of the two


def test_each_ops_copies_are_made_in_place(attempts):
    """Two copies of one Op read a third Scan's trace: the pass reaches the two copies first, then the third."""
    first, other = native_op(n_seqs=1, n_sit_sot=1), native_op(n_seqs=1, n_sit_sot=1, n_nit_sot=1)
    (trace, _) = apply_op(other, [fresh("c")]).outputs
    copies = [apply_op(first, [fresh(f"b{i}")], seqs=[trace * (i + 1)]) for i in range(2)]
    outputs = [out for n in copies for out in n.outputs]
    _, new = made_in_place(outputs)
    assert [n.op.destroy_map for n in new] == [{0: [2]}, {0: [2]}, {0: [2]}] == pytensors_maps(outputs)
    assert attempts == [2, 1]


def test_a_refused_batch_leaves_each_copy_pytensors_decision(attempts):
    """Two copies start from one fresh vector: one of them may overwrite it (after the other read it), not both."""
    op = native_op(n_seqs=1, n_sit_sot=1)
    e = fresh("b")
    outputs = [out for i in range(2) for out in apply_op(op, [e], seqs=[pt.dvector(f"x{i}")]).outputs]
    _, new = made_in_place(outputs)
    assert sorted(str(n.op.destroy_map) for n in new) == ["{0: [2]}", "{}"]
    assert [n.op.destroy_map for n in new] == pytensors_maps(outputs)
    assert attempts == [2, 1]  # the batch, then the first copy alone; the second's state is overwritten already


def test_fresh_allocations_are_duplicated_only_when_read_twice(attempts):
    op = native_op(n_seqs=1, n_sit_sot=1)
    zeros = pt.alloc(np.float64(0.0), N + 1)
    outputs = [out for i in range(2) for out in apply_op(op, [zeros], seqs=[pt.dvector(f"x{i}")]).outputs]
    fgraph, new = made_in_place(outputs)
    assert [n.op.destroy_map for n in new] == [{0: [2]}] * 2 == pytensors_maps(outputs)
    assert attempts == [2]  # each copy overwrites an allocation of its own
    buffers = [n.inputs[2] for n in new]
    assert all(isinstance(b.owner.op, Alloc) for b in buffers) and buffers[0] is not buffers[1]
    # read once, an allocation is overwritten as it is: the in-place Scan reads that very allocation
    attempts.clear()
    (out,) = apply_op(op, [zeros]).outputs
    fgraph, (new,) = made_in_place([out], clone=False)
    assert new.op.destroy_map == {0: [2]} and new.inputs[2] is zeros and attempts == [1]


def test_a_state_something_else_overwrites_is_left_unless_freshly_allocated(attempts):
    op = native_op(n_seqs=1, n_sit_sot=1)
    for state, made in [(pt.alloc(np.float64(0.0), N + 1), {0: [2]}), (fresh("b"), {})]:
        attempts.clear()
        write = pt.set_subtensor(state[:1], pt.zeros(1, dtype="float64")).owner
        overwritten = IncSubtensor(write.op.idx_list, inplace=True, set_instead_of_inc=True)(*write.inputs)
        outputs = [*apply_op(op, [state]).outputs, overwritten]
        _, (new,) = made_in_place(outputs)
        assert new.op.destroy_map == made == pytensors_maps(outputs)[0]
        assert attempts == ([1] if made else [])
    # a state another node only reads, beside a vector that node overwrites: the Scan may overwrite the state
    attempts.clear()
    state, other = fresh("b"), fresh("c")
    write = pt.set_subtensor(other[:1], state).owner
    outputs = [*apply_op(op, [state]).outputs, IncSubtensor(write.op.idx_list, inplace=True, set_instead_of_inc=True)(*write.inputs)]
    _, (new,) = made_in_place(outputs)
    assert new.op.destroy_map == {0: [2]} == pytensors_maps(outputs)[0] and attempts == [1]


def test_the_same_state_twice_in_one_node_is_copied_once():
    op = native_op(n_seqs=1, n_sit_sot=2)
    e = fresh("b")
    node = apply_op(op, [e, e])
    fgraph, (new,) = made_in_place(node.outputs)
    assert new.op.destroy_map == {0: [2], 1: [3]} == pytensors_maps(node.outputs)[0]
    (exp,) = [n.outputs[0] for n in fgraph.apply_nodes if n.op == pt.exp(e).owner.op]
    # the first state overwrites the vector itself, the second a copy of it
    assert new.inputs[2] is exp and new.inputs[3].owner.op is deep_copy_op and new.inputs[3].owner.inputs == [exp]


def test_an_unlifted_graph_gets_pytensors_pass(attempts):
    op = native_op(n_seqs=1, n_sit_sot=1)
    outputs = [out for i in range(2) for out in apply_op(op, [fresh(f"b{i}")]).outputs]
    fgraph = FunctionGraph([v for v in graph_inputs(outputs) if not isinstance(v, Constant)], outputs, clone=True)
    fgraph.attach_feature(Supervisor(fgraph.inputs))
    rewriter = SharedScanInplace()
    rewriter.add_requirements(fgraph)
    rewriter.apply(fgraph)  # not marked lifted
    new = [n for n in fgraph.toposort() if isinstance(n.op, NativeScan)]
    assert [n.op.destroy_map for n in new] == [{0: [2]}] * 2 and attempts == []
    assert new[0].op is not new[1].op  # PyTensor's pass gives each node an Op of its own


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
