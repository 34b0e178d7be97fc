"""`innergraph.rewriting.ofg_outputs`: native OpFromGraphs lose their dead outputs (structure and values)."""

import numpy as np
import pytensor
import pytensor.tensor as pt
from pytensor.compile.builders import OpFromGraph
from pytensor.compile.mode import Mode
from pytensor.graph.fg import FunctionGraph

import innergraph
from innergraph.rewriting.ofg_outputs import remove_dead_ofg_outputs
from innergraph.stats import graph_stats
from vanilla import vanilla_function
from typed import grad

CVM = Mode(linker="cvm", optimizer="fast_run")
x, y = pt.dvector("x"), pt.dvector("y")
a, b = pt.dvector("a"), pt.dvector("b")
VALUES = [np.arange(3.0), np.array([1.0, -2.0])]


def _scan_ofg(**kwargs):
    """An OpFromGraph holding a Scan (so the lift keeps it native), with three outputs."""
    doubled = pytensor.scan(lambda r: r * 2, sequences=[x], return_updates=False)
    return OpFromGraph([x, y], [doubled.sum(), (y**2).sum(), x * 3], **kwargs)


def _ofg_nodes(fn):
    return [n for n in fn.maker.fgraph.apply_nodes if isinstance(n.op, OpFromGraph)]


def _vanilla(inputs, outputs):
    """Vanilla's function of the graph (PyTensor's own OpFromGraph and Scan), compiled and first called
    with innergraph uninstalled: an OpFromGraph compiles its inner graph at its first call."""
    return vanilla_function(lambda: (inputs, outputs), CVM, first_call=VALUES)


def test_a_native_op_from_graph_loses_its_dead_outputs_and_the_inputs_only_they_read():
    op = _scan_ofg()
    first, _, third = op(a, b)
    out = first + third.sum()
    fn = pytensor.function([a, b], out, mode=CVM)
    (node,) = _ofg_nodes(fn)
    assert type(node.op) is OpFromGraph and len(node.outputs) == 2
    assert node.inputs == [fn.maker.fgraph.inputs[0]]  # b fed only the dead output
    assert graph_stats(fn)["dead_outputs_by_kind"] == {}
    np.testing.assert_allclose(fn(*VALUES), _vanilla([a, b], out)(*VALUES))
    assert len(op.inner_outputs) == 3 and len(op(a, b)) == 3  # the user's Op is unchanged


def test_vanilla_keeps_the_dead_outputs():
    first, _, _ = _scan_ofg()(a, b)
    (node,) = _ofg_nodes(_vanilla([a, b], first))
    assert len(node.outputs) == 3


def test_a_gradient_built_before_the_rewrite_equals_vanilla():
    """The pullback OFG PyTensor builds reads the forward outputs; the rewrite runs on the compiled graph only."""
    first, second, _ = _scan_ofg()(a, b)
    outs = [first, *grad(first + second, [a, b])]
    fn = pytensor.function([a, b], outs, mode=CVM)
    for got, want in zip(fn(*VALUES), _vanilla([a, b], outs)(*VALUES), strict=True):
        np.testing.assert_allclose(got, want)
    assert all(fn.maker.fgraph.clients.get(out) for n in _ofg_nodes(fn) for out in n.outputs)


def test_inline_flag_name_keywords_and_connection_pattern_are_kept():
    op = _scan_ofg(inline=True, name="mine", on_unused_input="ignore", connection_pattern=[[True, False, True], [False, True, False]])
    first, _, _ = op(a, b)
    fgraph = FunctionGraph([a, b], [first], clone=False)
    assert remove_dead_ofg_outputs(fgraph) == 1
    (node,) = [n for n in fgraph.apply_nodes if isinstance(n.op, OpFromGraph)]
    assert node.op.is_inline and node.op.name == "mine" and node.op.kwargs == {"on_unused_input": "ignore"}
    assert len(node.outputs) == 1 and node.op._connection_pattern == [[True]]  # row a, column of the first output


class _Sub(OpFromGraph):
    """A subclass (as PyTensor's Einsum or Pad): left alone."""


def test_subclasses_are_left_alone():
    doubled = pytensor.scan(lambda r: r * 2, sequences=[x], return_updates=False)
    sub = _Sub([x, y], [doubled.sum(), (y**2).sum()])
    first, _ = sub.make_node(a, b).outputs
    fgraph = FunctionGraph([a, b], [first], clone=False)
    assert remove_dead_ofg_outputs(fgraph) == 0
    fn = pytensor.function([a, b], first, mode=CVM)
    (node,) = _ofg_nodes(fn)
    assert type(node.op) is _Sub and len(node.outputs) == 2
    np.testing.assert_allclose(fn(*VALUES), _vanilla([a, b], first)(*VALUES))


def test_excluding_the_pass_keeps_the_outputs():
    first, _, _ = _scan_ofg()(a, b)
    fn = pytensor.function([a, b], first, mode=CVM.excluding("innergraph_ofg_dead_outputs"))
    (node,) = _ofg_nodes(fn)
    assert len(node.outputs) == 3


def test_every_native_op_from_graph_of_a_mixed_graph_is_visited_and_nothing_else_is_rebuilt():
    # in graph order: an elementwise node, an OpFromGraph whose outputs are all read, a multi-output
    # Op that is no OpFromGraph with a dead output (eigh's vectors), then an OpFromGraph with a dead
    # output: the pass must pass over the first three and rebuild the last
    A = pt.dmatrix("A")
    w, _ = pt.linalg.eigh(A)
    live = OpFromGraph([x, y], [x + y, x * y]).make_node(pt.exp(a), b).outputs
    first, _ = OpFromGraph([x, y], [x - y, x / y]).make_node(live[0] + pt.sum(w), live[1]).outputs
    fgraph = FunctionGraph([A, a, b], [first], clone=True)
    kinds = [type(getattr(n.op, "core_op", n.op)).__name__ for n in fgraph.toposort()]
    assert kinds[0] == "Elemwise" and kinds.count("OpFromGraph") == 2 and kinds[-1] == "OpFromGraph"
    assert kinds.index("OpFromGraph") < kinds.index("Eigh")  # the live one first, then eigh, the dead one last
    assert remove_dead_ofg_outputs(fgraph) == 1
    ofgs = [n for n in fgraph.toposort() if type(n.op) is OpFromGraph]
    assert [len(n.outputs) for n in ofgs] == [2, 1]
    assert [len(n.outputs) for n in fgraph.apply_nodes if type(getattr(n.op, "core_op", None)).__name__ == "Eigh"] == [2]
    assert remove_dead_ofg_outputs(fgraph) == 0
