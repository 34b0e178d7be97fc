"""`innergraph.rewriting.push_out_cost`: the sequence push-out happens only where it saves work per step.

Structural (the loop's sequences before and after `push_out_sequence_work`, values and
gradients by `check_rewrite`) and the rule's arithmetic. The GARCH models that the rule
was measured on are `innergraph_bench.pymc_models` cases (``design/benchmarks.md``).
"""

import numpy as np
import pytensor.tensor as pt

import innergraph
from innergraph.ops.scan import Scan
from innergraph.protocol.signature import sharing_rebuilt_functions
from innergraph.rewriting.push_out import push_out_sequence_work
from innergraph.rewriting.push_out_cost import CALL_COST, READ_COST, moved_work, pays, read_cost
from innergraph.testing.rewrites import check_rewrite


def _push_out(fgraph):
    with sharing_rebuilt_functions():
        return push_out_sequence_work(fgraph)


def _n_seqs(fgraph):
    (node,) = [n for n in fgraph.apply_nodes if isinstance(n.op, Scan)]
    return node.op.layout.info.n_seqs


def test_cheap_scalar_work_that_adds_reads_stays_in_the_loop():
    """``a * x**2``, ``b * x``, ``x - a``: three rows of arithmetic would be three reads for one."""
    x0, a, b, xs = pt.dscalar("x0"), pt.dscalar("a"), pt.dscalar("b"), pt.dvector("xs")
    s = innergraph.scan(
        lambda x, s, a, b: s * 0.5 + a * x**2 + pt.exp(s) * (b * x) + s * (x - a),
        sequences=[xs], outputs_info=[x0], non_sequences=[a, b], return_updates=False,
    )
    fg = check_rewrite(_push_out, [x0, a, b, xs], [s], expect_change=False)
    assert _n_seqs(fg) == 1


def test_expensive_scalar_work_leaves_the_loop():
    """``exp(x) * sin(x)`` per step costs more than reading it: it becomes the one sequence read."""
    x0, xs = pt.dscalar("x0"), pt.dvector("xs")
    s = innergraph.scan(lambda x, s: s * 0.5 + pt.exp(x) * pt.sin(x), sequences=[xs], outputs_info=[x0], return_updates=False)
    fg = check_rewrite(_push_out, [x0, xs], [s])
    assert _n_seqs(fg) == 1  # x is no longer read: its row-wise work is


def test_large_rows_of_arithmetic_leave_the_loop():
    """Rows of 1000 elements: the reads are amortised, the arithmetic is not."""
    x0, a, xs = pt.vector("x0", shape=(1000,)), pt.dscalar("a"), pt.matrix("xs", shape=(None, 1000))
    s = innergraph.scan(
        lambda x, s, a: s * 0.5 + a * x**2 + s * (x - a),
        sequences=[xs], outputs_info=[x0], non_sequences=[a], return_updates=False,
    )
    fg = check_rewrite(_push_out, [x0, a, xs], [s], values=[(np.ones(1000), 0.3, np.linspace(0.0, 1.0, 3000).reshape(3, 1000))])
    assert _n_seqs(fg) == 2


def test_the_rule_counts_work_and_reads_in_element_operations():
    x = pt.dscalar("x")
    cheap, dear = x * 2.0 + 1.0, pt.exp(x)
    assert moved_work([cheap], stop={x}) == 2 and moved_work([dear], stop={x}) == CALL_COST
    assert pays([dear], stop={x}, dropped=[]) is (CALL_COST >= READ_COST + 1)
    assert not pays([cheap], stop={x}, dropped=[])
    assert pays([cheap], stop={x}, dropped=[x])  # one read for another: the work is saved
    row = pt.vector("row")  # unknown length: taken as large, as before the rule
    assert pays([row * 2.0], stop={row}, dropped=[])


def test_the_calibrated_costs_in_numbers():
    # the numbers design/benchmarks.md's issue 48 calibrated: a read costs 16 plus its elements, a
    # libm call 16, arithmetic 1; written out so that a changed constant fails here, not only on a model
    x = pt.tensor("x", shape=(4, 4))  # 16 elements: sums and bitwise ors of these differ
    assert moved_work([pt.exp(x)], stop={x}) == 16 * 16
    assert moved_work([x * 2.0 + 1.0], stop={x}) == 2 * 16
    assert moved_work([pt.exp(x) * 3.0], stop={x}) == (16 + 1) * 16
    assert read_cost([x]) == 32 and read_cost([x, x]) == 64 and read_cost([]) == 0


def test_the_rule_at_its_boundary():
    # two arithmetic operations per element save 2n; making them a sequence reads 16 + n more
    exactly = pt.tensor("exactly", shape=(16,))  # 32 saved, 32 read: pays (>=)
    short = pt.tensor("fifteen", shape=(15,))  # 30 saved, 31 read: does not
    assert pays([exactly * 2.0 + 1.0], stop={exactly}, dropped=[])
    assert not pays([short * 2.0 + 1.0], stop={short}, dropped=[])
    # a dropped row counts as a read saved: 30 + (16 + 15) against 31
    assert pays([short * 2.0 + 1.0], stop={short}, dropped=[short])
    # and a small one too: 30 + (16 + 2) against 31 (30 | 18 would be 30: the sum, not the bits)
    assert pays([short * 2.0 + 1.0], stop={short}, dropped=[pt.tensor("pair", shape=(2,))])


def test_rows_of_unknown_size_pay_whatever_else_is_known():
    row, known = pt.vector("row"), pt.tensor("known", shape=(3,))
    assert pays([row * 2.0], stop={row}, dropped=[known])  # work and reads unknown, the dropped row known
    assert pays([known * 2.0], stop={known}, dropped=[row])  # only the dropped row unknown
    assert moved_work([row * 2.0], stop={row}) is None and read_cost([known, row]) is None
    # only the work unknown (a row of static shape computed from one of unknown length), and only the
    # read unknown (a reshape of known work has no static shape)
    pinned = pt.specify_shape(row * 2.0, (3,))
    assert moved_work([pinned], stop={row}) is None and read_cost([pinned]) == 19
    assert pays([pinned], stop={row}, dropped=[])
    flat = (known * 2.0).reshape((pt.iscalar("n"), -1))
    assert moved_work([flat], stop={known}) is not None and read_cost([flat]) is None
    assert pays([flat], stop={known}, dropped=[])
