"""Moving work out of loops, called by hand on a lifted Scan (the last step registers the rewrites).

A Scan is lifted with the lifting step's rule table, a rewrite is applied, the
body is folded and the graph compiled with the Python linker; the values are
NumPy's, and the work is where the rewrite said it would be.
"""

import numpy as np

import pytensor
import pytensor.tensor as pt
from pytensor.compile.mode import Mode
from pytensor.graph.fg import FunctionGraph
from pytensor.graph.rewriting.basic import dfs_rewriter
from pytensor.innergraph.core.fold import fold_inner_graphs
from pytensor.innergraph.core.graph import body_of, scope_toposort
from pytensor.innergraph.lifting.rules import lift
from pytensor.innergraph.ops.scan import Scan
from pytensor.innergraph.rewriting.licm import hoist_invariants
from pytensor.innergraph.rewriting.untrace import untrace_final_states
from pytensor.scalar import exp as scalar_exp
from pytensor.scan.op import Scan as NativeScan
from pytensor.tensor.rewriting.subtensor import local_subtensor_merge_integer


PY = Mode(linker="py", optimizer=None)


def lifted(outputs, inputs):
    fgraph = FunctionGraph(inputs, outputs, clone=True)
    assert lift(fgraph, only={NativeScan}) == 1
    return fgraph


def run(fgraph, values):
    copy = fgraph.clone()
    fold_inner_graphs(copy)
    return pytensor.function(copy.inputs, copy.outputs, mode=PY)(*values)


def the_scan(fgraph):
    (node,) = [n for n in fgraph.apply_nodes if isinstance(n.op, Scan)]
    return node


def exps_in_body(fgraph):
    body = body_of(the_scan(fgraph).inputs[0])
    return sum(
        getattr(n.op, "scalar_op", None) == scalar_exp
        for n in scope_toposort(body.outputs)
    )


def test_loop_invariant_work_leaves_the_body():
    x, a = pt.dvector("x"), pt.dscalar("a")
    trace = pytensor.scan(
        lambda v, acc: acc + v * pt.exp(a),
        sequences=[x],
        outputs_info=[pt.zeros(())],
        return_updates=False,
    )
    fgraph = lifted([trace], [x, a])
    assert exps_in_body(fgraph) == 1

    assert hoist_invariants(fgraph) >= 1
    assert exps_in_body(fgraph) == 0
    x_val = np.array([1.0, 2.0, 4.0])
    (result,) = run(fgraph, [x_val, 0.5])
    np.testing.assert_allclose(result, np.cumsum(x_val) * np.exp(0.5))


def test_a_trace_read_only_at_its_end_is_carried_instead():
    x = pt.dvector("x")
    trace = pytensor.scan(
        lambda v, acc: acc * v + 1,
        sequences=[x],
        outputs_info=[pt.ones(())],
        return_updates=False,
    )
    fgraph = lifted([trace[-1]], [x])
    # trace[1:][-1] as canonicalize leaves it: one read of the last row
    dfs_rewriter(local_subtensor_merge_integer).rewrite(fgraph)
    results_before = len(the_scan(fgraph).outputs)

    assert untrace_final_states(fgraph) == 1
    node = the_scan(fgraph)
    assert len(node.outputs) == results_before
    assert all(
        out.ndim == 0 for out in node.outputs
    )  # no trace of rows: the final value
    x_val = np.array([2.0, 3.0, 0.5])
    expected = 1.0
    for v in x_val:
        expected = expected * v + 1
    np.testing.assert_allclose(run(fgraph, [x_val])[0], expected)
