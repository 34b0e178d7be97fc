"""`innergraph.protocol.signature` called directly, fast (issue 47's mutation run).

Every rewrite that changes a consumer's signature reaches the module through
`replace_consumer`, on graphs compiled under several linkers; these tests call its
pieces on consumer nodes built here from explicit params (calls, conditionals, loops),
never compiled but by the py linker without rewrites: a consumer as slots
(`signature`, the `Signature` properties, the memo), `rebuild` (slots in any order,
dropped, added, params renumbered, replacements by leaves and by expressions, folding,
the refusal of a dropped param still read, shared functions within
`sharing_rebuilt_functions`), `replace_consumer` on a FunctionGraph, `consumers` (on a
stand-in graph whose node set is in a given order and whose toposort counts its calls)
and `mit_mot_taps_from_zero`, against literal slots and taps, the bodies they should
give (`equal_computations`), NumPy's values, and identity where the module promises
sharing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, cast

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.compile.mode import Mode
from pytensor.graph.basic import Apply, Constant, Variable, equal_computations
from pytensor.graph.fg import FunctionGraph
from pytensor.graph.traversal import apply_ancestors

import innergraph
from innergraph.core.graph import InnerGraph, body_of, param
from innergraph.ops.call import CALL_FORM, Call
from innergraph.ops.ifelse import IfElse
from innergraph.protocol.signature import (
    FORMS,
    Meaning,
    Signature,
    Slot,
    consumers,
    mit_mot_taps_from_zero,
    rebuild,
    remembering_consumer_order,
    replace_consumer,
    sharing_rebuilt_functions,
    signature,
)
from innergraph.protocol.slots import Capabilities

from consumer_nodes import K, call_node, function, ifelse_node

PY = Mode(linker="py", optimizer="None")
D: Any = pt.dscalar().type
P0: Any = param(0, D)
P1: Any = param(1, D)
P2: Any = param(2, D)
A: Any = pt.dscalar("a")
B: Any = pt.dscalar("b")
C: Any = pt.dscalar("c")
AV, BV, CV = 0.5, -1.25, 2.0


def f64(value: float) -> Any:
    """A float64 scalar constant (``pt.constant(2.0)`` is a float32)."""
    return pt.constant(np.float64(value))


def sig_of(node: Apply) -> Signature:
    sig = signature(node)
    assert sig is not None
    return sig


def outputs_of(function: Variable) -> tuple[Variable, ...]:
    return body_of(function).outputs


def values(outputs: Sequence[Variable], inputs: Sequence[Variable], *args: Any) -> list[Any]:
    """``outputs`` evaluated on ``args`` by the py linker, without rewrites."""
    fn = pytensor.function(list(inputs), list(outputs), mode=PY, on_unused_input="ignore")
    return [float(v) for v in cast(list[Any], fn(*args))]


def the_call(fgraph: FunctionGraph) -> Any:
    """The one call node of ``fgraph``."""
    (node,) = [n for n in fgraph.apply_nodes if isinstance(n.op, Call)]
    return node


def consumer_of(out: Variable) -> Apply:
    (node,) = [n for n in apply_ancestors([out]) if type(n.op) in FORMS]
    return node


# ---- a consumer as slots


def test_a_call_as_slots():
    node = call_node([P0 * 2.0 - P1, pt.exp(P1)], [A, B])
    sig = sig_of(node)
    assert sig.node is node and sig.header == ()
    assert [s.kind for s in sig.slots] == ["arg", "arg", "out", "out"]
    assert [(s.args, s.params) for s in sig.slots[:2]] == [((A,), ((0, P0),)), ((B,), ((0, P1),))]
    assert [s.results for s in sig.slots[2:]] == [(node.outputs[0],), (node.outputs[1],)]
    assert sig.n_bodies == 1 and sig.kind == "call" and sig.capabilities == Capabilities()
    assert [sig.meaning(s) for s in sig.slots] == [Meaning.INVARIANT, Meaning.INVARIANT, Meaning.OUTPUT, Meaning.OUTPUT]
    assert sig.having(Meaning.OUTPUT) == list(sig.slots[2:])
    assert sig.having(Meaning.OUTPUT, Meaning.INVARIANT) == list(sig.slots)  # in slot order
    assert sig.having(Meaning.CARRY) == [] and sig.having() == []
    (body,) = sig.bodies
    assert body is body_of(node.inputs[0])
    assert sig.is_while is False


def test_a_signature_is_frozen():
    sig = sig_of(call_node([P0 + 1.0], [A]))
    with pytest.raises(dataclasses.FrozenInstanceError):
        sig.header = (A,)  # type: ignore[misc]
    assert hash(sig) == hash(sig)


def test_a_conditional_as_slots_of_two_bodies():
    node = ifelse_node([P0 + P1], [A, B], [P0 * 3.0], [C])
    sig = sig_of(node)
    assert sig.header == (K,)
    assert [s.kind for s in sig.slots] == ["then_arg", "then_arg", "else_arg", "out"]
    assert sig.slots[2].params == ((1, P0),)
    assert sig.n_bodies == 2 and sig.kind == "ifelse" and sig.capabilities == Capabilities(lazy=True)
    then_body, else_body = sig.bodies
    assert then_body is body_of(node.inputs[1]) and else_body is body_of(node.inputs[2])
    assert sig.is_while is False


def test_is_while_only_with_a_condition():
    """A while loop has condition slots; a for-loop's carries (which sort before 'condition') and a call's inputs and outputs (after it) do not."""
    x = pt.dscalar("x")
    stopping = sig_of(consumer_of(innergraph.while_loop(lambda s: s < 10.0, lambda s: s * 2.0, x)))
    counted = sig_of(consumer_of(innergraph.fori_loop(0, 3, lambda i, s: s * 2.0, x)))
    assert stopping.is_while is True and stopping.capabilities.loop
    assert Meaning.CARRY in [counted.meaning(s) for s in counted.slots]
    assert counted.is_while is False and counted.capabilities.loop
    assert sig_of(call_node([P0 + 1.0], [A])).is_while is False


# ---- rebuild


def test_rebuild_takes_slots_in_any_order_and_renumbers_params():
    node = call_node([P0 * 2.0 - P1, pt.exp(P1)], [A, B])
    sig = sig_of(node)
    arg_a, arg_b, out0, out1 = sig.slots
    new, mapping = rebuild(sig, [out1, arg_b, out0, arg_a])  # each kind keeps its order
    assert new.inputs[1:] == [B, A]
    assert isinstance(new.inputs[0], Constant)  # folded, as the call's function was
    assert equal_computations(list(outputs_of(new.inputs[0])), [pt.exp(P0), P1 * 2.0 - P0])
    assert list(mapping.items()) == [(node.outputs[1], new.outputs[0]), (node.outputs[0], new.outputs[1])]
    np.testing.assert_allclose(values(new.outputs, [A, B], AV, BV), [np.exp(BV), AV * 2.0 - BV])


def test_rebuild_with_nothing_moved_keeps_the_body_outputs():
    node = call_node([P0 * 2.0 - P1, pt.exp(P1)], [A, B])
    sig = sig_of(node)
    new, mapping = rebuild(sig, sig.slots)
    assert new is not node and new.inputs[1:] == [A, B]
    assert all(a is b for a, b in zip(outputs_of(new.inputs[0]), outputs_of(node.inputs[0]), strict=True))
    assert mapping == dict(zip(node.outputs, new.outputs, strict=True))


def test_rebuild_drops_an_unread_slot():
    node = call_node([P0 + P2], [A, B, C])
    sig = sig_of(node)
    arg_a, _, arg_c, out = sig.slots
    new, _ = rebuild(sig, [arg_a, arg_c, out])
    assert new.inputs[1:] == [A, C]
    assert equal_computations(list(outputs_of(new.inputs[0])), [P0 + P1])
    np.testing.assert_allclose(values(new.outputs, [A, C], AV, CV), [AV + CV])


def test_rebuild_refuses_a_dropped_param_still_read():
    node = call_node([P0 * P1 + 1.5], [A, B])  # a constant leaf too: not a param
    sig = sig_of(node)
    arg_a, _, out = sig.slots
    with pytest.raises(RuntimeError, match=r"\(body 0\) would leave .* read"):
        rebuild(sig, [arg_a, out])
    # replaced by a constant, the param is no longer read
    new, _ = rebuild(sig, [arg_a, out], {0: {P1: f64(3.0)}})
    assert equal_computations(list(outputs_of(new.inputs[0])), [P0 * f64(3.0) + 1.5])
    np.testing.assert_allclose(values(new.outputs, [A], AV), [AV * 3.0 + 1.5])


def test_rebuild_refuses_in_the_body_that_reads_it():
    node = ifelse_node([P0 + 1.0], [A], [P0 * P1], [B, C])
    sig = sig_of(node)
    then_a, else_b, _, out = sig.slots
    with pytest.raises(RuntimeError, match=r"\(body 1\) would leave"):
        rebuild(sig, [then_a, else_b, out])


def test_rebuild_replaces_a_subexpression_by_a_new_param():
    """A new slot binds a fresh variable that replaces ``exp(b)``: the walk for stray params stops at it."""
    work = pt.exp(P1)
    node = call_node([work * P0], [A, B])
    sig = sig_of(node)
    arg_a, _, out = sig.slots
    fresh = D()
    added = Slot("arg", (pt.exp(B),), ((0, fresh),))
    new, _ = rebuild(sig, [arg_a, added, out], {0: {work: fresh}})
    assert new.inputs[1] is A and equal_computations([new.inputs[2]], [pt.exp(B)])
    assert equal_computations(list(outputs_of(new.inputs[0])), [P1 * P0])
    np.testing.assert_allclose(values(new.outputs, [A, B], AV, BV), [np.exp(BV) * AV])


def test_rebuild_renumbers_the_params_an_expression_replacement_reads():
    """A replacement value that is not a leaf reads params of the old numbering: substituted first, then renumbered."""
    work = pt.exp(P2)
    node = call_node([work * P1], [A, B, C])
    sig = sig_of(node)
    _, arg_b, arg_c, out = sig.slots
    new, _ = rebuild(sig, [arg_b, arg_c, out], {0: {work: P2 + P1}})
    assert new.inputs[1:] == [B, C]
    assert equal_computations(list(outputs_of(new.inputs[0])), [(P1 + P0) * P0])
    np.testing.assert_allclose(values(new.outputs, [B, C], BV, CV), [(CV + BV) * BV])


def test_rebuild_renumbers_a_param_that_replaces_another():
    """Duplicate arguments merged: ``c``'s param replaces ``a``'s, and then moves to position 1."""
    node = call_node([P0 * 2.0 + P2], [A, B, C])
    sig = sig_of(node)
    _, arg_b, arg_c, out = sig.slots
    new, _ = rebuild(sig, [arg_b, arg_c, out], {0: {P0: P2}})
    assert equal_computations(list(outputs_of(new.inputs[0])), [P1 * 2.0 + P1])


def test_rebuild_keeps_the_replacement_of_a_kept_param():
    """A kept slot's param replaced in the body (by a constant): it is not renumbered over its replacement."""
    node = call_node([P0 + P1 * 2.0], [A, B])
    sig = sig_of(node)
    _, arg_b, out = sig.slots
    new, _ = rebuild(sig, [arg_b, out], {0: {P0: f64(5.0), P1: f64(3.0)}})
    assert new.inputs[1:] == [B]
    assert equal_computations(list(outputs_of(new.inputs[0])), [f64(5.0) + f64(3.0) * 2.0])
    np.testing.assert_allclose(values(new.outputs, [B], BV), [11.0])


def test_rebuild_folds_as_the_consumer_did_unless_told():
    folded = sig_of(call_node([P0 + 1.0], [A]))
    unfolded = sig_of(call_node([P0 + 1.0], [A], fold=False))
    assert isinstance(rebuild(folded, folded.slots)[0].inputs[0], Constant)
    made = rebuild(unfolded, unfolded.slots)[0].inputs[0]
    assert not isinstance(made, Constant) and made.owner is not None and isinstance(made.owner.op, InnerGraph)
    assert isinstance(rebuild(unfolded, unfolded.slots, fold=True)[0].inputs[0], Constant)
    assert not isinstance(rebuild(folded, folded.slots, fold=False)[0].inputs[0], Constant)


def test_rebuild_gives_each_body_its_own_params_and_outputs():
    node = ifelse_node([P0 + P1, P1 * 2.0], [A, B], [P0 * 3.0, P0 - 1.0], [C])
    sig = sig_of(node)
    then_a, then_b, else_c, out0, out1 = sig.slots
    new, mapping = rebuild(sig, [out1, else_c, then_a, then_b])  # `out0` dropped; the else argument given first
    assert isinstance(new.op, IfElse) and new.op.n_then_args == 2
    assert new.inputs[0] is K and new.inputs[3:] == [A, B, C]
    assert equal_computations(list(outputs_of(new.inputs[1])), [P1 * 2.0])
    assert equal_computations(list(outputs_of(new.inputs[2])), [P0 - 1.0])
    assert body_of(new.inputs[1]).param_types == (D, D) and body_of(new.inputs[2]).param_types == (D,)
    assert mapping == {node.outputs[1]: new.outputs[0]}


def test_rebuild_replaces_in_one_body_only():
    node = ifelse_node([P0 + P1], [A, B], [P0 * 3.0], [C])
    sig = sig_of(node)
    then_a, _, else_c, out = sig.slots
    new, _ = rebuild(sig, [then_a, else_c, out], {0: {P1: f64(4.0)}})
    assert new.op.n_then_args == 1 and new.inputs[3:] == [A, C]
    assert equal_computations(list(outputs_of(new.inputs[1])), [P0 + f64(4.0)])
    assert outputs_of(new.inputs[2]) == outputs_of(node.inputs[2])  # the else body as it was
    k_true = values(new.outputs, [K, A, C], 1, AV, CV)
    k_false = values(new.outputs, [K, A, C], 0, AV, CV)
    assert k_true == [AV + 4.0] and k_false == [CV * 3.0]


def test_rebuild_refuses_a_form_that_makes_another_number_of_results():
    """The old results map to the new node's one by one: a form whose ``make`` drops a result is an error, not a shorter map."""
    node = call_node([P0 + 1.0, P0 * 2.0], [A])
    short = call_node([P0 + 1.0], [A])
    form = dataclasses.replace(CALL_FORM, make=lambda *args: short)
    sig = dataclasses.replace(sig_of(node), form=form)
    with pytest.raises(ValueError, match="zip"):
        rebuild(sig, sig.slots)


# ---- sharing_rebuilt_functions


def test_rebuilt_functions_are_shared_within_the_block_only():
    node = ifelse_node([P0 + P1], [A, B], [P0 * 3.0], [C])
    sig = sig_of(node)
    before = [rebuild(sig, sig.slots)[0] for _ in range(2)]
    assert before[0].inputs[1] is not before[1].inputs[1] and before[0].inputs[2] is not before[1].inputs[2]
    with sharing_rebuilt_functions():
        first, second = (rebuild(sig, sig.slots)[0] for _ in range(2))
        unfolded = rebuild(sig, sig.slots, fold=False)[0]
    assert first is not second
    assert first.inputs[1] is second.inputs[1] and first.inputs[2] is second.inputs[2]
    assert unfolded.inputs[1] is not first.inputs[1] and not isinstance(unfolded.inputs[1], Constant)
    after = rebuild(sig, sig.slots)[0]
    assert after.inputs[1] is not first.inputs[1] and after.inputs[2] is not first.inputs[2]


def test_rebuilt_functions_are_shared_by_equal_constants():
    """Inlined constants are fresh objects: equal ones (by type and data) share the new function, other values do not."""
    sig = sig_of(call_node([P0 * P1], [A, B]))
    arg_a, _, out = sig.slots
    two, other_two, three = f64(2.0), f64(2.0), f64(3.0)
    assert two is not other_two
    with sharing_rebuilt_functions():
        made = [rebuild(sig, [arg_a, out], {0: {P1: c}})[0].inputs[0] for c in (two, other_two, three)]
        by_param = [rebuild(sig, [arg_a, out], {0: {P1: P0}})[0].inputs[0] for _ in range(2)]
    assert made[0] is made[1] and made[2] is not made[0]
    assert equal_computations(list(outputs_of(made[2])), [P0 * f64(3.0)])
    assert by_param[0] is by_param[1]


def test_rebuilt_functions_are_shared_by_the_callers_key():
    """``same_as``: bodies the caller vouches for share the first one's function, body by body."""
    doubling, tripling = sig_of(call_node([P0 * 2.0], [A])), sig_of(call_node([P0 * 3.0], [A]))
    with sharing_rebuilt_functions():
        first = rebuild(doubling, doubling.slots, same_as={0: "scaling"})[0]
        second = rebuild(tripling, tripling.slots, same_as={0: "scaling"})[0]
        third = rebuild(tripling, tripling.slots)[0]
    assert second.inputs[0] is first.inputs[0]
    assert third.inputs[0] is not first.inputs[0]
    assert equal_computations(list(outputs_of(third.inputs[0])), [P0 * 3.0])
    then_out = P0 + 1.0
    left, right = ifelse_node([then_out], [A], [P0 * 3.0], [C]), ifelse_node([then_out], [A], [P0 * 4.0], [C])
    with sharing_rebuilt_functions():
        one = rebuild(sig_of(left), sig_of(left).slots, same_as={1: "else"})[0]
        two = rebuild(sig_of(right), sig_of(right).slots, same_as={1: "else"})[0]
    assert two.inputs[2] is one.inputs[2]  # the else body by the key
    assert two.inputs[1] is one.inputs[1]  # the then body by its params, outputs and replacements


# ---- replace_consumer


def test_replace_consumer_replaces_the_results_in_the_graph():
    node = call_node([P0 * 2.0, P1 + 1.0], [A, B])
    fgraph = FunctionGraph([A, B], [node.outputs[0] + 1.0, node.outputs[1] * 3.0], clone=False)
    sig = sig_of(node)
    arg_a, arg_b, out0, out1 = sig.slots
    replace_consumer(fgraph, sig, [arg_b, arg_a, out1, out0], reason="test")
    assert node not in fgraph.apply_nodes
    new = the_call(fgraph)
    assert new.inputs[1:] == [B, A]
    assert equal_computations(list[Any](fgraph.outputs), [new.outputs[1] + 1.0, new.outputs[0] * 3.0])
    np.testing.assert_allclose(values(fgraph.outputs, [A, B], AV, BV), [AV * 2.0 + 1.0, (BV + 1.0) * 3.0])


def test_replace_consumer_forwards_dropped_results():
    """A dropped result stands for a value reading the node's other results: it reads the new node's."""
    node = call_node([P0 * 2.0, P0 * 4.0], [A])
    fgraph = FunctionGraph([A], [node.outputs[0] + 1.0, node.outputs[1] * 3.0], clone=False)
    sig = sig_of(node)
    arg_a, out0, _ = sig.slots
    placeholder = Slot("out", outputs=((0, P0 - 1.0),), output_types=(D,), results=(D(),))  # a new output: no result yet
    replace_consumer(fgraph, sig, [arg_a, out0, placeholder], forwarded={node.outputs[1]: node.outputs[0] * 2.0}, reason="test")
    assert node not in fgraph.apply_nodes
    new = the_call(fgraph)
    assert len(new.outputs) == 2
    assert equal_computations(list[Any](fgraph.outputs), [new.outputs[0] + 1.0, (new.outputs[0] * 2.0) * 3.0])
    np.testing.assert_allclose(values(fgraph.outputs, [A], AV), [AV * 2.0 + 1.0, AV * 2.0 * 2.0 * 3.0])


def test_replace_consumer_takes_what_follows_the_slots_by_keyword_only():
    node = call_node([P0 * 2.0], [A])
    fgraph = FunctionGraph([A], [node.outputs[0] + 1.0], clone=False)
    sig = sig_of(node)
    with pytest.raises(TypeError, match="positional"):
        replace_consumer(fgraph, sig, sig.slots, "test")  # type: ignore[call-arg]
    assert node in fgraph.apply_nodes
    replace_consumer(fgraph=fgraph, sig=sig, slots=sig.slots, reason="test")
    assert node not in fgraph.apply_nodes


# ---- signature


def test_signature_is_memoized_while_the_node_stays_the_same():
    node = call_node([P0 * 2.0 - P1], [A, B])
    first = sig_of(node)
    assert signature(node) is first
    x = pt.dscalar("x")
    fgraph = FunctionGraph([A, B, x], node.outputs, clone=False)
    fgraph.replace(A, x, reason="test")  # the node's inputs change in place
    moved = sig_of(node)
    assert moved is not first and moved.slots[0].args == (x,)
    assert signature(node) is moved
    # a body equal to the old one (alpha-equivalent), but another: its outputs are the slots'
    again = function([P0 * 2.0 - P1], [D, D])
    assert body_of(again) == body_of(node.inputs[0]) and body_of(again) is not body_of(node.inputs[0])
    fgraph.replace(node.inputs[0], again, reason="test")
    renewed = sig_of(node)
    assert renewed is not moved and renewed.slots[2].outputs[0][1] is outputs_of(again)[0]


def test_signature_of_what_is_no_rebuildable_consumer_is_none():
    assert signature(pt.exp(A).owner) is None
    fixed = Call(connection=((True,), (True,))).make_node(function([P0 + P1], [D, D]), A, B)
    assert type(fixed.op) in FORMS
    assert signature(fixed) is None and signature(fixed) is None  # also once memoized


# ---- consumers


class StandInGraph:
    """What `consumers` reads of a FunctionGraph: its node set, in a given order, and a toposort that counts its calls."""

    def __init__(self, nodes: Sequence[Apply], order: Sequence[Apply]):
        self.apply_nodes = list(nodes)
        self.order = list(order)
        self.sorts = 0

    def toposort(self) -> list[Apply]:
        self.sorts += 1
        return list(self.order)


def found(graph: Any) -> list[Apply]:
    return [sig.node for sig in consumers(graph)]


def test_consumers_sorts_two_or_more_consumers_only():
    first = call_node([P0 * 2.0], [A])
    second = Call().make_node(function([P0 + 1.0], [D]), first.outputs[0])
    third = call_node([P0 - 1.0], [B])
    other = pt.exp(A).owner
    none, one = StandInGraph([other], [other]), StandInGraph([other, first], [first, other])
    assert found(none) == [] and found(one) == [first]
    assert none.sorts == 0 and one.sorts == 0  # a lone consumer needs no toposort
    two = StandInGraph([second, other, first], [first, other, second])
    assert found(two) == [first, second] and two.sorts == 1
    three = StandInGraph([third, second, first], [first, second, third])
    assert found(three) == [first, second, third] and three.sorts == 1
    fixed = Call(connection=((True,),)).make_node(function([P0 + 1.0], [D]), A)
    skipped = StandInGraph([second, fixed, first], [fixed, first, second])
    assert found(skipped) == [first, second]  # a consumer of fixed signature is no rebuildable one


def test_consumers_skips_nodes_removed_meanwhile():
    first, second = call_node([P0 * 2.0], [A]), call_node([P0 + 1.0], [B])
    graph = StandInGraph([second, first], [first, second])
    walk = consumers(cast(Any, graph))
    assert next(walk).node is first
    graph.apply_nodes.remove(second)  # a rewrite replaced it
    assert list(walk) == []


def test_consumers_remember_their_order_within_the_block():
    first, second, third = call_node([P0 * 2.0], [A]), call_node([P0 + 1.0], [B]), call_node([P0 - 1.0], [C])
    graph, other = StandInGraph([second, first], [first, second]), StandInGraph([third, first], [third, first])
    with remembering_consumer_order() as changed:
        assert found(graph) == [first, second] and found(graph) == [first, second]
        assert graph.sorts == 1
        assert found(other) == [third, first] and other.sorts == 1  # each graph its own order
        graph.apply_nodes.remove(first)
        assert found(graph) == [second]
        graph.apply_nodes.append(third)
        graph.order = [second, third]
        assert found(graph) == [second] and graph.sorts == 1  # not told of the change yet
        changed()
        assert found(graph) == [second, third] and graph.sorts == 2
    found(graph)
    found(graph)
    assert graph.sorts == 4  # outside the block, sorted on every walk


def test_consumers_of_a_function_graph_inputs_before_users():
    first = call_node([P0 * 2.0], [A])
    second: Any = Call().make_node(function([P0 + 1.0], [D]), first.outputs[0])
    fgraph = FunctionGraph([A], [second.outputs[0] * 3.0], clone=False)
    assert found(fgraph) == [first, second]


# ---- mit_mot_taps_from_zero


def test_mit_mot_taps_shift_so_that_the_oldest_input_tap_is_zero():
    assert mit_mot_taps_from_zero((-1, 0), (0,)) == ((0, 1), (1,))
    assert mit_mot_taps_from_zero((2, 5), (3, 7)) == ((0, 3), (1, 5))
    assert mit_mot_taps_from_zero((-3, -1), (-2, 0)) == ((0, 2), (1, 3))
    taps = ((0, 1), (1,))
    got = mit_mot_taps_from_zero(*taps)
    assert got == taps and got[0] is taps[0] and got[1] is taps[1]  # already from zero: as given
