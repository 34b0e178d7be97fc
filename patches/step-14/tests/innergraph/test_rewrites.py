"""Rewrites of bodies, called by hand (the last step registers them): OpFromGraph lifted and merged, dead slots.

Each rewrite takes a `FunctionGraph`; the graphs are then folded and compiled with
the Python linker, and their values compared with NumPy's.
"""

import numpy as np

import pytensor
import pytensor.tensor as pt
from pytensor.compile.builders import OpFromGraph
from pytensor.compile.mode import Mode
from pytensor.graph.fg import FunctionGraph
from pytensor.innergraph.core.fold import fold_inner_graphs, folded_bodies
from pytensor.innergraph.ops.call import Call
from pytensor.innergraph.rewriting.dce import remove_dead_slots
from pytensor.innergraph.rewriting.lift_ofg import lift_op_from_graphs


PY = Mode(linker="py", optimizer=None)


def run(fgraph, values):
    """Fold a copy of ``fgraph``'s bodies, compile it with the Python linker and call it."""
    copy = fgraph.clone()
    fold_inner_graphs(copy)
    return pytensor.function(copy.inputs, copy.outputs, mode=PY)(*values)


def student_t(name):
    """An OpFromGraph of a Student-t log density, built anew each time (equal inner graphs)."""
    v, nu = pt.dvector(f"{name}_v"), pt.dscalar(f"{name}_nu")
    logp = -(nu + 1) / 2 * pt.log1p(v**2 / nu)
    return OpFromGraph([v, nu], [logp, v**2])


def test_opfromgraphs_built_apart_become_calls_of_one_body():
    x, y = pt.dvectors("x", "y")
    nu = pt.dscalar("nu")
    outputs = [student_t("a")(x, nu)[0], student_t("b")(y, nu)[0]]
    fgraph = FunctionGraph([x, y, nu], outputs, clone=True)

    assert lift_op_from_graphs(fgraph) == 2
    assert not any(isinstance(n.op, OpFromGraph) for n in fgraph.apply_nodes)
    calls = [n for n in fgraph.apply_nodes if isinstance(n.op, Call)]
    assert len(calls) == 2
    assert calls[0].inputs[0] is calls[1].inputs[0]  # one function variable: merged
    x_val, y_val = np.array([0.5, -1.0]), np.array([2.0, 0.0])
    first, second = run(fgraph, [x_val, y_val, 3.0])
    np.testing.assert_allclose(first, -2 * np.log1p(x_val**2 / 3))
    np.testing.assert_allclose(second, -2 * np.log1p(y_val**2 / 3))


def test_an_output_nobody_reads_leaves_the_body():
    x, nu = pt.dvector("x"), pt.dscalar("nu")
    fgraph = FunctionGraph([x, nu], [student_t("a")(x, nu)[0]], clone=True)
    lift_op_from_graphs(fgraph)  # the second output is dead: a gain
    (call,) = [n for n in fgraph.apply_nodes if isinstance(n.op, Call)]
    assert len(call.outputs) == 2

    assert remove_dead_slots(fgraph) >= 1
    (call,) = [n for n in fgraph.apply_nodes if isinstance(n.op, Call)]
    assert len(call.outputs) == 1
    fold_inner_graphs(fgraph)
    ((_, body),) = folded_bodies(fgraph.outputs)
    assert len(body.outputs) == 1
    x_val = np.array([1.0, 2.0])
    np.testing.assert_allclose(
        run(fgraph, [x_val, 4.0])[0], -2.5 * np.log1p(x_val**2 / 4)
    )


def test_an_opfromgraph_with_nothing_to_gain_stays_native():
    x, nu = pt.dvector("x"), pt.dscalar("nu")
    both = student_t("a")(x, nu)
    fgraph = FunctionGraph([x, nu], list(both), clone=True)
    assert lift_op_from_graphs(fgraph) == 0
    assert any(isinstance(n.op, OpFromGraph) for n in fgraph.apply_nodes)
