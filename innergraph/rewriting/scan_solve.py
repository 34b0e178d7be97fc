"""PyTensor's split of a Solve of a loop-invariant matrix, run on native Scans before the lift.

PyTensor's first Scan pass (``scan_eqopt1``, 0.05) splits a ``Solve`` in a Scan's inner
graph whose ``A`` depends only on non-sequences and constants into a decomposition
(LU, tridiagonal LU or Cholesky) and a solve with the factors, so that push-out moves
the decomposition out of the loop: one factorization instead of one per step
(``scan_split_non_sequence_decomposition_and_solve``, ``fast_run``, and its ``jax``
variant). ``innergraph_lift`` (0.04) lifts the Scans before that pass, which then finds
none; innergraph's own rewrites never split a single ``Solve``, so the loop would
factorize ``A`` at every step. Here PyTensor's own node rewriters run on the native
Scans just before the lift (0.039); the decomposition is then loop-invariant work that
`innergraph.rewriting.licm.hoist_invariants` moves out, as PyTensor's push-out does.

Each pass carries the name of the PyTensor rewrite it runs as a tag, plus
``innergraph``: excluding the PyTensor rewrite by name (or ``scan_pushout``, or
``scan``) excludes it here too, and ``mode.excluding("innergraph")`` leaves the split
to PyTensor's pass.
"""

from __future__ import annotations

from pytensor.graph.fg import FunctionGraph
from pytensor.graph.rewriting.basic import NodeRewriter, dfs_rewriter
from pytensor.scan.op import Scan
from pytensor.tensor.rewriting.linalg.solvers import (
    scan_split_non_sequence_decomposition_and_solve,
    scan_split_non_sequence_decomposition_and_solve_jax,
)

__all__ = ["split_scan_solves", "split_scan_solves_jax"]


def _run(rewriter: NodeRewriter, fgraph: FunctionGraph) -> int:
    if not any(isinstance(node.op, Scan) for node in fgraph.apply_nodes):
        return 0  # most graphs: no walk at all
    before = set(fgraph.apply_nodes)
    dfs_rewriter(rewriter, ignore_newtrees=True).rewrite(fgraph)
    return int(set(fgraph.apply_nodes) != before)


def split_scan_solves(fgraph: FunctionGraph) -> int:
    """Run ``scan_split_non_sequence_decomposition_and_solve`` on ``fgraph``'s native Scans.

    Returns 1 if a Scan was rewritten, else 0.
    """
    return _run(scan_split_non_sequence_decomposition_and_solve, fgraph)


def split_scan_solves_jax(fgraph: FunctionGraph) -> int:
    """Run the ``jax`` variant (``scan_split_non_sequence_decomposition_and_solve_jax``).

    Returns 1 if a Scan was rewritten, else 0.
    """
    return _run(scan_split_non_sequence_decomposition_and_solve_jax, fgraph)
