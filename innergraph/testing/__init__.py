"""The alpha-equivalence kit: assertions, random bodies, and a checker for inner-graph Ops.

`assert_alpha_equivalent` / `assert_not_alpha_equivalent`
    Fail with both bodies side by side and the first point where they differ.
`innergraph.testing.recipes`
    Random closed bodies as data (`recipes` is a hypothesis strategy), built any
    number of times with fresh variables, other names and shuffled construction
    order, and mutated in meaning-changing ways (law 2).
`body_nodes` / `body_ops`
    A body's nodes, or their Ops (an ``Elemwise`` as its scalar Op), for structural
    assertions (also in `innergraph.consumer`).
`check_inner_graph_op`
    Checks a consumer against laws 1, 2, 4 and 5, pickling, ``infer_shape`` and
    gradients. See ``design/testing.md``.
`rewrite_bodies_in_isolation`
    A graph's consumer bodies each rewritten on its own, as PyTensor rewrites an
    ``OpFromGraph``'s inner graph: the vanilla side for a consumer with no vanilla
    equivalent (``check_inner_graph_op(..., against="isolated")``).
`innergraph.testing.programs` / `check_against_vanilla`
    Random user programs written with plain PyTensor (scan of every state kind,
    ifelse, OpFromGraph, nested; derivatives up to third order), compiled with
    innergraph and as vanilla PyTensor under the py, cvm, numba and jax linkers,
    and compared (``tests/test_differential.py``).
`check_rewrite`
    Applies a graph rewrite and checks values and gradients before and after on
    random inputs (``design/rewrites.md``).

The strategies need hypothesis (the ``test`` extra).
"""

from innergraph.core.graph import body_nodes, body_ops
from innergraph.testing.assertions import alpha_equivalent, assert_alpha_equivalent, assert_not_alpha_equivalent
from innergraph.testing.kit import OpCase, check_inner_graph_op
from innergraph.testing.isolated import rewrite_bodies_in_isolation
from innergraph.testing.programs import check_against_vanilla
from innergraph.testing.rewrites import check_rewrite

__all__ = ["OpCase", "alpha_equivalent", "body_nodes", "body_ops", "assert_alpha_equivalent", "assert_not_alpha_equivalent", "check_against_vanilla",
           "check_inner_graph_op", "check_rewrite", "rewrite_bodies_in_isolation"]
