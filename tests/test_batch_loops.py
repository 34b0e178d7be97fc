"""Loops over one step body batched into one loop over the vectorised step (`innergraph.rewriting.batch_loops`).

The rewrite alone is checked differentially (`check_rewrite`: values and gradients
before and after) and structurally (one loop, its step once, its params batched or
not); compiled, against vanilla PyTensor under every linker, on a grouped model: K
groups, one ``pytensor.scan`` per group, the gradient too.
"""

from typing import Any

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.graph.basic import equal_computations
from pytensor.scan.op import Scan as NativeScan

import innergraph
from innergraph.core.fold import visible_nodes
from innergraph.core.graph import body_of, scope_toposort
from innergraph.ops.scan import Scan
from innergraph.rewriting.batch_loops import batch_loops
from innergraph.rewriting.merge_loops import merge_loops
from innergraph.testing.rewrites import check_rewrite, rewritten
from test_rewrites import merged_then
from vanilla import vanilla_function

K, N = 4, 6
xs = pt.dmatrix("xs")  # one column per group
s0 = pt.dvector("s0")  # one initial state per group
ks = pt.dvector("ks")  # one parameter per group
c = pt.dscalar("c")  # shared by every group


def step(x, s, k, c):
    return s * k + pt.tanh(x) * c


def groups(order=range(K), shared_init=False):
    """K scans of one step, one per group (the Python loop a user writes)."""
    return [
        innergraph.scan(
            step,
            sequences=[xs[:, g]],
            outputs_info=[s0[0] if shared_init else s0[g]],
            non_sequences=[ks[g], c],
            n_steps=xs.shape[0],  # one length, as canonicalize makes the K ``xs[:, g].shape[0]``
            return_updates=False,
        )
        for g in order
    ]


def scans(fgraph):
    """The outer graph's in-graph Scans (not those of its bodies)."""
    return [n for n in visible_nodes(fgraph) if isinstance(n.op, Scan)]


def values(seed=0):
    rng = np.random.default_rng(seed)
    return [rng.normal(size=(N, K)), rng.normal(size=K), rng.uniform(0.2, 0.9, size=K), 0.7]


def test_k_loops_of_one_step_become_one_loop_whose_step_is_vectorised_once():
    fg = check_rewrite(merged_then(batch_loops), [xs, s0, ks, c], groups(), values=[values()])
    (node,) = scans(fg)
    body = body_of(node.inputs[0])
    ops = [type(n.op).__name__ for n in scope_toposort(body.outputs)]
    assert ops.count("Elemwise") == 4 and len(ops) == 5  # the step once (tanh, mul, mul, add; c broadcast), not K times
    shapes = [getattr(t, "shape", None) for t in body.param_types]
    assert shapes.count((K,)) == 3  # the row, the state, k: batched
    assert shapes.count(()) == 1  # c, one value for every group: not batched


def test_the_loops_in_any_order_read_their_own_columns():
    fg = check_rewrite(merged_then(batch_loops), [xs, s0, ks, c], groups(order=[2, 0, 3, 1]), values=[values(1)])
    assert len(scans(fg)) == 1


def test_a_state_that_starts_equal_is_batched_when_its_step_reads_a_batched_param():
    fg = check_rewrite(merged_then(batch_loops), [xs, s0, ks, c], groups(shared_init=True), values=[values(2)])
    (node,) = scans(fg)
    assert [getattr(t, "shape", None) for t in body_of(node.inputs[0]).param_types].count((K,)) == 3


def test_dependent_loops_other_steps_and_other_lengths_are_not_batched():
    n = xs.shape[0]
    a = innergraph.scan(step, sequences=[xs[:, 0]], outputs_info=[s0[0]], non_sequences=[ks[0], c], n_steps=n, return_updates=False)
    b = innergraph.scan(step, sequences=[a], outputs_info=[s0[1]], non_sequences=[ks[1], c], n_steps=n, return_updates=False)  # reads a
    other = innergraph.scan(lambda x, s, k: s - k * x, sequences=[xs[:, 2]], outputs_info=[s0[2]], non_sequences=[ks[2]], n_steps=n, return_updates=False)
    shorter = innergraph.scan(step, sequences=[xs[1:, 3]], outputs_info=[s0[3]], non_sequences=[ks[3], c], return_updates=False)
    fg, changed = rewritten(merged_then(batch_loops), [xs, s0, ks, c], [b, other, shorter])
    assert changed == 0 and len(scans(fg)) == 4


def test_a_step_that_vectorises_only_as_a_blockwise_is_left_to_merge_loops():
    def nested(x, s, k):
        inner = pytensor.scan(lambda t, u: u * k + t, sequences=[pt.stack([x, x])], outputs_info=[s], return_updates=False)
        return inner[-1]

    outs = [
        innergraph.scan(nested, sequences=[xs[:, g]], outputs_info=[s0[g]], non_sequences=[ks[g]], n_steps=xs.shape[0], return_updates=False)
        for g in range(2)
    ]
    fg, changed = rewritten(merged_then(batch_loops), [xs, s0, ks], outs)
    assert changed == 0 and len(scans(fg)) == 2
    fg = check_rewrite(merged_then(merge_loops), [xs, s0, ks], outs, values=[values()[:3]])
    assert len(scans(fg)) == 1  # side by side instead


def test_a_gradient_loop_reads_the_batched_trace_without_a_copy():
    cost = pt.add(*(o.sum() for o in groups()))
    grads: Any = pytensor.grad(cost, [s0, ks, c])
    fn = pytensor.function([xs, s0, ks, c], [cost, *grads], mode="FAST_RUN")
    native = [n for n in fn.maker.fgraph.apply_nodes if isinstance(n.op, NativeScan)]
    assert len(native) == 2  # one forward loop and one gradient loop, each over the K groups
    assert all(n.op.info.n_sit_sot + n.op.info.n_untraced_sit_sot + n.op.info.n_mit_mot <= 4 for n in native)
    assert not [n for n in fn.maker.fgraph.apply_nodes if type(n.op).__name__ == "Join" and n.op.axis == 1]


def _grouped(k: int = K) -> tuple[list[Any], list[Any]]:
    """The graph a user writes: K groups in a Python loop of ``pytensor.scan``, cost and gradient.

    Static shapes: vanilla's JAX cannot allocate the gradient's buffers otherwise.
    """
    xs_, s0_ = pt.tensor("xs", shape=(N, k), dtype="float64"), pt.tensor("s0", shape=(k,), dtype="float64")
    ks_, c_ = pt.tensor("ks", shape=(k,), dtype="float64"), pt.dscalar("c")
    outs = [
        pytensor.scan(step, sequences=[xs_[:, g]], outputs_info=[s0_[g]], non_sequences=[ks_[g], c_], return_updates=False)
        for g in range(k)
    ]
    cost = pt.add(*((o**2).sum() for o in outs))
    grads: Any = pytensor.grad(cost, [s0_, ks_, c_])
    return [xs_, s0_, ks_, c_], [cost, *grads]


@pytest.mark.parametrize("linker", ["py", "cvm", "numba", "jax"])
def test_the_grouped_model_gives_vanilla_values_under_every_linker(linker):
    if linker == "jax":
        pytest.importorskip("jax")
    mode: Any = {"py": "FAST_RUN", "cvm": "FAST_RUN", "numba": "NUMBA", "jax": "JAX"}[linker]
    if linker == "py":
        mode = pytensor.compile.mode.Mode(linker="py", optimizer="fast_run")
    vals = values(3)
    expected = vanilla_function(_grouped, mode)(*vals)
    fn = pytensor.function(*_grouped(), mode=mode)
    for got, want in zip(fn(*vals), expected, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


def test_batching_is_deterministic_and_scan_merge_excludes_it():
    mode = pytensor.compile.mode.get_mode("FAST_RUN")
    first = pytensor.function(*_grouped(), mode=mode).maker.fgraph
    second = pytensor.function(*_grouped(), mode=mode).maker.fgraph
    assert equal_computations(first.outputs, second.outputs, first.inputs, second.inputs)
    assert [str(n.op) for n in first.toposort()] == [str(n.op) for n in second.toposort()]
    excluded = pytensor.function(*_grouped(), mode=mode.excluding("scan_merge")).maker.fgraph
    assert len([n for n in excluded.apply_nodes if isinstance(n.op, NativeScan)]) == 2 * K


def test_what_the_k_loops_feed_is_batched_too_so_the_graph_does_not_grow_with_k():
    def outer_nodes(k, vanilla=False):
        build = lambda: _grouped(k)  # noqa: E731
        fn = vanilla_function(build, "FAST_RUN") if vanilla else pytensor.function(*build(), mode="FAST_RUN")
        return [type(n.op).__name__ for n in fn.maker.fgraph.apply_nodes]

    small, large = outer_nodes(3), outer_nodes(6)
    # each group's cost and its share of the gradient: one batched computation, and one increment of
    # the gradient at the K indices instead of a chain of K; per group only the final sum's two reads remain
    assert len(large) - len(small) <= 2 * 3
    assert large.count("IncSubtensor") == small.count("IncSubtensor")
    assert large.count("AdvancedIncSubtensor") == small.count("AdvancedIncSubtensor") >= 1
    assert len(outer_nodes(6, vanilla=True)) - len(outer_nodes(3, vanilla=True)) >= 4 * 3  # vanilla: per group


# ---- planted faults the suite once missed (issue 47): each test below fails on its fault


def _static_groups(order: list[int]) -> tuple[list[Any], list[Any]]:
    """K scans over ``xs[:, g]`` in the given order, ``xs`` of static shape (N, K): the branch where the K slices are ``xs`` itself."""
    xs_, s0_ = pt.tensor("xs", shape=(N, K), dtype="float64"), pt.tensor("s0", shape=(K,), dtype="float64")
    ks_, c_ = pt.tensor("ks", shape=(K,), dtype="float64"), pt.dscalar("c")
    outs = [
        pytensor.scan(step, sequences=[xs_[:, g]], outputs_info=[s0_[g]], non_sequences=[ks_[g], c_], return_updates=False)
        for g in order
    ]
    return [xs_, s0_, ks_, c_], [pt.stack(outs), pt.grad(pt.add(*((o**2).sum() for o in outs)), ks_)]


@pytest.mark.parametrize("mode", ["FAST_RUN", "NUMBA"])
def test_permuted_groups_over_a_matrix_of_static_shape_read_their_own_columns(mode):
    """A permutation of the K columns is not the identity (``_slices``): g in [2, 0, 3, 1] over ``xs`` of shape (6, 4)."""
    order = [2, 0, 3, 1]
    vals = values(4)
    fn = pytensor.function(*_static_groups(order), mode=mode)
    assert len([n for n in fn.maker.fgraph.apply_nodes if isinstance(n.op, NativeScan)]) <= 2  # batched: the branch is reached
    expected = vanilla_function(lambda: _static_groups(order), mode)(*vals)
    for got, want in zip(fn(*vals), expected, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
    columns = [np.asarray(expected[0])[i] for i in range(K)]
    assert not np.allclose(columns[0], columns[1])  # the groups differ, so reading another's column would show


def _two_tap_sets(taps: tuple[tuple[int, int], tuple[int, int]]) -> tuple[list[Any], list[Any]]:
    """Two mit-sot scans over one step, with other taps each, over a symbolic ``n_steps``."""
    x0, ks_, n = pt.dvector("x0"), pt.dvector("ks"), pt.iscalar("n")
    outs = []
    for g, (far, near) in enumerate(taps):
        init = x0[: -far]
        outs.append(
            pytensor.scan(
                lambda a, b, k: 0.5 * b + 0.4 * pt.tanh(a) * k,
                outputs_info=[{"initial": init, "taps": [far, near]}],
                non_sequences=[ks_[g]],
                n_steps=n,
                return_updates=False,
            )
        )
    return [x0, ks_, n], [pt.stack(outs), pt.grad(pt.add(*(o.sum() for o in outs)), x0)]


@pytest.mark.parametrize("mode", ["FAST_RUN", "NUMBA"])
def test_mit_sot_loops_over_one_step_with_other_taps_stay_apart(mode):
    """Taps (-2, -1) and (-3, -1): equal tap counts, other tap values, so other layouts (never batched or merged as one)."""
    taps = ((-2, -1), (-3, -1))
    vals = [np.array([0.3, -0.8, 1.1]), np.array([0.9, 0.7]), np.int32(5)]
    expected = vanilla_function(lambda: _two_tap_sets(taps), mode)(*vals)
    fn = pytensor.function(*_two_tap_sets(taps), mode=mode)
    for got, want in zip(fn(*vals), expected, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)


def test_layouts_with_equal_tap_counts_and_other_taps_differ():
    from pytensor.scan.op import ScanInfo

    from innergraph.ops.scan import ScanLayout

    def layout(taps):
        return ScanLayout(ScanInfo(0, (), (), (taps,), (), 0, 0, 1, False))

    assert layout((-2, -1)) != layout((-3, -1))
    assert hash(layout((-2, -1))) != hash(layout((-3, -1)))  # not required of a hash, but what one of taps gives
    assert layout((-2, -1)) == layout((-2, -1)) and hash(layout((-2, -1))) == hash(layout((-2, -1)))


def test_three_hundred_loops_beyond_the_small_ints_have_their_readers_batched():
    """300 loops (more than CPython's cached small ints, so lengths compared with ``is`` would differ): one loop, one exp.

    The slow half of `batch_loops`'s mutation slice (about 9 s): `_batch` compares the count
    of results read with K before it hands them to `_sink`.
    """
    k = 300
    outs = [
        innergraph.scan(lambda x, s, kk: s * kk + x, sequences=[xs[:, g]], outputs_info=[s0[g]], non_sequences=[ks[g]], n_steps=xs.shape[0], return_updates=False)
        for g in range(k)
    ]
    fg, changed = rewritten(merged_then(batch_loops), [xs, s0, ks], [pt.exp(o) for o in outs])
    assert changed == 1 and len(scans(fg)) == 1
    exps = [n for n in fg.apply_nodes if type(getattr(n.op, "scalar_op", None)).__name__ == "Exp"]
    assert len(exps) == 1  # the 300 readers, batched
