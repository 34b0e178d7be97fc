"""Rewrite databases copied from PyTensor's while innergraph was installed.

PyMC queries ``optdb`` for canonicalize when it is imported and keeps the result in
its logprob database; with innergraph imported first, that copy holds
``innergraph_sum_of_one_row``, and `innergraph.uninstall` cannot reach it. The
copied rewrites must then do nothing: after ``uninstall`` the copy rewrites as
PyTensor alone would.
"""

import pytensor
import pytensor.tensor as pt
from pytensor.compile.mode import optdb
from pytensor.graph.fg import FunctionGraph
from pytensor.tensor.math import Sum
from pytensor.tensor.rewriting.shape import ShapeFeature

import innergraph


def _one_row_sum():
    """``ys[2:3].sum(0)``, ``ys`` a 5-step loop's result: only the shape feature knows its length."""
    x0 = pt.dvector("x0", shape=(3,))
    ys = pytensor.scan(lambda a: a * 2, outputs_info=[x0], n_steps=5, return_updates=False)
    assert ys.type.shape == (None, 3)
    return FunctionGraph([x0], [ys[2:3].sum(axis=0)], clone=True, features=[ShapeFeature()])


def _has_sum(fgraph):
    return any(isinstance(node.op, Sum) for node in fgraph.apply_nodes)


def test_a_copy_of_canonicalize_does_nothing_of_innergraphs_once_uninstalled():
    copy = optdb.query("+canonicalize")  # what PyMC does on import
    fgraph = _one_row_sum()
    copy.rewrite(fgraph)
    assert not _has_sum(fgraph)  # installed: the copy rewrites x[2:3].sum(0) to x[2]
    innergraph.uninstall()
    try:
        fgraph = _one_row_sum()
        copy.rewrite(fgraph)
        assert _has_sum(fgraph)  # as PyTensor alone
        vanilla = _one_row_sum()
        optdb.query("+canonicalize").rewrite(vanilla)
        assert _has_sum(vanilla)
    finally:
        innergraph.install()
