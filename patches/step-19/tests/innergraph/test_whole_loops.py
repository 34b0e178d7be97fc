"""Loops as a whole, called by hand on lifted Scans (the last step registers the rewrites).

Two independent loops over one sequence become one loop; the consumer rewrites'
fixpoint then leaves one loop computing both results, with NumPy's values.
"""

import numpy as np

import pytensor
import pytensor.tensor as pt
from pytensor.compile.mode import Mode
from pytensor.graph.fg import FunctionGraph
from pytensor.graph.rewriting.basic import MergeOptimizer
from pytensor.innergraph.core.fold import fold_inner_graphs
from pytensor.innergraph.lifting.rules import lift
from pytensor.innergraph.ops.scan import Scan
from pytensor.innergraph.rewriting.merge_loops import merge_loops
from pytensor.innergraph.rewriting.simplify import simplify_consumers
from pytensor.scan.op import Scan as NativeScan


PY = Mode(linker="py", optimizer=None)


def two_loops():
    x = pt.dvector("x")
    sums = pytensor.scan(
        lambda v, acc: acc + v,
        sequences=[x],
        outputs_info=[pt.zeros(())],
        return_updates=False,
    )
    products = pytensor.scan(
        lambda v, acc: acc * v,
        sequences=[x],
        outputs_info=[pt.ones(())],
        return_updates=False,
    )
    fgraph = FunctionGraph([x], [sums, products], clone=True)
    assert lift(fgraph, only={NativeScan}) == 2
    # as the pipeline does first: both loops' step counts (x's length) one variable
    MergeOptimizer().rewrite(fgraph)
    return fgraph


def scans(fgraph):
    return [n for n in fgraph.apply_nodes if isinstance(n.op, Scan)]


def run(fgraph, values):
    copy = fgraph.clone()
    fold_inner_graphs(copy)
    return pytensor.function(copy.inputs, copy.outputs, mode=PY)(*values)


def test_independent_loops_over_one_sequence_become_one_loop():
    fgraph = two_loops()
    assert len(scans(fgraph)) == 2

    assert merge_loops(fgraph) == 1
    assert len(scans(fgraph)) == 1
    x_val = np.array([1.0, 2.0, 3.0, 0.5])
    sums, products = run(fgraph, [x_val])
    np.testing.assert_allclose(sums, np.cumsum(x_val))
    np.testing.assert_allclose(products, np.cumprod(x_val))


def test_the_consumer_rewrites_fixpoint_settles():
    fgraph = two_loops()
    assert simplify_consumers(fgraph) >= 1
    assert len(scans(fgraph)) == 1
    assert simplify_consumers(fgraph) == 0  # nothing left to do
    x_val = np.array([2.0, -1.0])
    sums, products = run(fgraph, [x_val])
    np.testing.assert_allclose(sums, np.cumsum(x_val))
    np.testing.assert_allclose(products, np.cumprod(x_val))
