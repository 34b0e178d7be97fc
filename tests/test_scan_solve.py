"""A Solve of a loop-invariant matrix in a Scan factorizes once, outside the loop.

PyTensor's ``scan_split_non_sequence_decomposition_and_solve`` (in its first Scan pass)
splits such a Solve so push-out moves the factorization out of the loop; innergraph lifts
Scans before that pass, so `innergraph.rewriting.scan_solve` runs it just before the lift.
Found by PyTensor's own ``test_lu_decomposition_reused_scan`` (design/testing.md, ninth
session). The tests compare the compiled inner graph with vanilla PyTensor's and the values
with vanilla's and NumPy's.
"""

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.compile.mode import Mode
from pytensor.scan.op import Scan as NativeScan
from pytensor.tensor.blockwise import Blockwise

import innergraph

LINKERS = ["py", "cvm", "numba"]


def solve_loop(assume_a):
    A = pt.tensor("A", shape=(3, 3))
    x0 = pt.tensor("x0", shape=(3, 4))
    xs = pytensor.scan(
        lambda x, A: pt.linalg.solve(A, x, assume_a=assume_a),
        outputs_info=[x0],
        non_sequences=[A],
        n_steps=10,
        return_updates=False,
    )
    return [A, x0], xs


def inner_op_names(fn):
    [scan] = [node for node in fn.maker.fgraph.apply_nodes if isinstance(node.op, NativeScan)]
    return sorted(type(n.op.core_op if isinstance(n.op, Blockwise) else n.op).__name__ for n in scan.op.fgraph.apply_nodes)


def has_full_solve(names):
    return "Solve" in names


def values():
    rng = np.random.default_rng(170)
    return rng.random((3, 3)) + 3 * np.eye(3), rng.random((3, 4))


def expected(A, x0):
    out, x = [], x0
    for _ in range(10):
        x = np.linalg.solve(A, x)
        out.append(x)
    return np.stack(out)


@pytest.mark.parametrize("assume_a", ["gen", "tridiagonal"])
def test_factorization_leaves_the_loop_as_in_vanilla(assume_a):
    inputs, xs = solve_loop(assume_a)
    mode = Mode(linker="cvm", optimizer="fast_run")
    with innergraph.uninstalled():
        vanilla = pytensor.function(inputs, xs, mode=mode)
    ig = pytensor.function(inputs, xs, mode=mode)
    assert not has_full_solve(inner_op_names(vanilla))
    assert inner_op_names(ig) == inner_op_names(vanilla)
    # excluding the rewrite by its PyTensor name keeps the Solve, as in vanilla
    kept = pytensor.function(inputs, xs, mode=mode.excluding("scan_split_non_sequence_decomposition_and_solve"))
    assert has_full_solve(inner_op_names(kept))


@pytest.mark.parametrize("linker", LINKERS)
@pytest.mark.parametrize("assume_a", ["gen", "pos"])
def test_values_equal_vanilla(assume_a, linker):
    inputs, xs = solve_loop(assume_a)
    A, x0 = values()
    if assume_a == "pos":
        A = A @ A.T
    mode = Mode(linker=linker, optimizer="fast_run")
    with innergraph.uninstalled():
        want = pytensor.function(inputs, xs, mode=mode)(A, x0)
    got = pytensor.function(inputs, xs, mode=mode)(A, x0)
    np.testing.assert_allclose(got, want, rtol=1e-10)
    np.testing.assert_allclose(got, expected(A, x0), rtol=1e-8)


def test_the_pass_says_whether_it_split_a_solve():
    from pytensor.graph.fg import FunctionGraph

    from innergraph.rewriting.scan_solve import split_scan_solves, split_scan_solves_jax

    inputs, xs = solve_loop("gen")
    split = FunctionGraph(inputs, [xs], clone=True)
    assert split_scan_solves(split) == 1
    [scan] = [n for n in split.apply_nodes if isinstance(n.op, NativeScan)]
    names = sorted(type(n.op.core_op if isinstance(n.op, Blockwise) else n.op).__name__ for n in scan.op.fgraph.apply_nodes)
    assert not has_full_solve(names)
    assert split_scan_solves(split) == 0  # nothing left to split
    assert split_scan_solves_jax(FunctionGraph(inputs, [xs], clone=True)) == 1

    x = pt.vector("x")
    no_solve = pytensor.scan(lambda s: s * 2.0, outputs_info=[x], n_steps=3, return_updates=False)
    assert split_scan_solves(FunctionGraph([x], [no_solve], clone=True)) == 0  # a Scan, nothing to split
    assert split_scan_solves(FunctionGraph([x], [pt.exp(x)], clone=True)) == 0  # no Scan at all
