"""Work a lazy branch shares with the outer graph passed in (`innergraph.rewriting.share_branch`), called directly.

`tests/test_ifelse.py` checks the rewrite through compiled functions (one ``exp`` left, the
values); these call `share_branch_work` on a FunctionGraph of in-graph conditionals and
compare its count, the branches' new arguments (``equal_computations``) and what is left in
each branch with what the rewrite should give, then the values with NumPy's.
"""

import numpy as np
import pytensor
import pytensor.tensor as pt
from pytensor.graph.basic import equal_computations
from pytensor.graph.fg import FunctionGraph
from typed import ifelse

from innergraph.core.graph import body_of, scope_toposort
from innergraph.ops.ifelse import IfElse
from innergraph.rewriting.share_branch import share_branch_work

a, b = pt.dscalar("a"), pt.dvector("b")


def _graph(*outputs):
    """A FunctionGraph of ``outputs`` over (a, b), not cloned: the branches' arguments are a and b themselves."""
    return FunctionGraph([a, b], list(outputs), clone=False)


def _branches(fgraph):
    """Each conditional of ``fgraph`` (in order): per branch, its body's Op names and its arguments."""
    found = []
    for node in fgraph.toposort():
        if isinstance(node.op, IfElse):
            _, then_fn, else_fn, then_args, else_args = node.op.split(node.inputs)
            found.append([(_ops(fn), list(args)) for fn, args in ((then_fn, then_args), (else_fn, else_args))])
    return found


def _ops(function):
    return [type(getattr(n.op, "scalar_op", n.op)).__name__ for n in scope_toposort(body_of(function).outputs)]


def _values(fgraph, before):
    """``fgraph``'s values against ``before``'s (uncompiled, unrewritten outputs) on both branches."""
    after = pytensor.function([a, b], fgraph.outputs)
    reference = pytensor.function([a, b], before)
    for args in ((1.5, np.array([0.0, 1.0, -0.5])), (-1.5, np.array([0.25, 2.0, 1.0]))):
        for got, want in zip(after(*args), reference(*args), strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-12)


def test_a_graph_without_a_conditional_counts_nothing():
    fg = _graph(pt.exp(b).sum() * a)
    assert share_branch_work(fg) == 0


def test_the_largest_shared_subexpression_is_passed_in_and_the_count_is_one_per_conditional():
    """The outer graph computes exp(b).sum(): the then branch gets it as an argument (the sum, not
    the exp only the sum reads), the else branch is left as it is; a second pass finds nothing."""
    shared = pt.exp(b).sum()
    outs = [ifelse(a > 0, shared * 2, (b**2).sum()) + shared]
    fg = _graph(*outs)
    assert share_branch_work(fg) == 1
    ((then, else_),) = _branches(fg)
    assert then[0] == ["Mul"] and else_ == (["DimShuffle", "Pow", "Add"], [b])
    assert equal_computations(then[1], [b, pt.exp(b).sum()])
    assert share_branch_work(fg) == 0
    _values(fg, outs)


def test_a_conditional_with_nothing_to_share_is_passed_over_and_the_next_one_changed():
    """Found first (the walk goes from the outputs in input order), a conditional whose branches
    share nothing; then one whose else branch does: 1, and only the second changed."""
    shared = pt.exp(b).sum()
    first = ifelse(a > 0, a * 2.0, a - 1.0)
    second = ifelse(a > 0, (b**2).sum(), shared * 3.0)
    outs = [first + second + shared]
    fg = _graph(*outs)
    assert share_branch_work(fg) == 1
    branches = _branches(fg)
    assert len(branches) == 2
    unchanged = [br for br in branches if br[0][1] == [a]]
    changed = [br for br in branches if br[0][1] == [b]]
    assert len(unchanged) == len(changed) == 1
    ((_, then_args), (else_ops, else_args)) = changed[0]
    assert then_args == [b] and else_ops == ["Mul"] and equal_computations(else_args, [b, pt.exp(b).sum()])
    _values(fg, outs)


def test_both_branches_passed_in():
    """Each branch reads a different value the outer graph computes: both become arguments."""
    outs = [ifelse(a > 0, pt.exp(b).sum() * 2.0, pt.sin(b).sum() - 1.0) + pt.exp(b).sum() + pt.sin(b).sum()]
    fg = _graph(*outs)
    assert share_branch_work(fg) == 1
    ((then, else_),) = _branches(fg)
    assert then[0] == ["Mul"] and else_[0] == ["Sub"]
    assert equal_computations(then[1], [b, pt.exp(b).sum()]) and equal_computations(else_[1], [b, pt.sin(b).sum()])
    _values(fg, outs)


def test_a_node_without_a_twin_before_one_with_does_not_stop_the_walk():
    """The branch's first nodes (sin(a) * 2: a product of a value the outer graph never computes)
    have no twin; the exp(b).sum() after them still has one and is passed in."""
    outs = [ifelse(a > 0, pt.sin(a) * 2.0 + pt.exp(b).sum(), a) + pt.exp(b).sum()]
    fg = _graph(*outs)
    assert share_branch_work(fg) == 1
    ((then, _),) = _branches(fg)
    assert "Exp" not in then[0] and "Sin" in then[0]
    assert equal_computations(then[1], [a, b, pt.exp(b).sum()])
    _values(fg, outs)


def test_a_value_also_read_by_untwinned_work_is_passed_in_beside_its_twinned_user():
    """exp(b) is read by its sum (which the outer graph computes) and by a subtensor (which it
    does not): both exp(b) and the sum are passed in; the branch returning the shared sum itself
    gets it as an argument too, and a param is never passed in again."""
    e = pt.exp(b)
    outs = [ifelse(a > 0, e.sum() * 2.0 + e[0], e.sum()) + e.sum()]
    fg = _graph(*outs)
    assert share_branch_work(fg) == 1
    ((then, else_),) = _branches(fg)
    assert "Exp" not in then[0] and "Exp" not in else_[0]
    assert equal_computations(then[1], [b, pt.exp(b), pt.exp(b).sum()])  # in the body's node order
    assert else_[0] == [] and equal_computations(else_[1], [b, pt.exp(b).sum()])
    _values(fg, outs)


def test_work_the_outer_graph_does_not_compute_stays():
    outs = [ifelse(a > 0, pt.exp(b).sum() * 2.0, (b**2).sum()) + b.sum()]
    fg = _graph(*outs)
    assert share_branch_work(fg) == 0
    ((then, _),) = _branches(fg)
    assert "Exp" in then[0] and then[1] == [b]
