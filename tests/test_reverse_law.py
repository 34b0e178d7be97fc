"""Issue 24's law over random programs: clean reverse-mode loops.

After the rewrite pipeline, over the random user programs of
`innergraph.testing.programs` with their first or second derivatives taken:

* no loop, conditional, in-graph call or native `OpFromGraph` of the compiled graph
  has a dead output (`innergraph.stats`): the OpFromGraphs the pipeline keeps native
  (one holding another inner-graph Op, `design/opfromgraph.md`) are rebuilt without
  them (`innergraph.rewriting.ofg_outputs`), where vanilla PyTensor keeps them. Inside
  a native OpFromGraph's inner graph, which the outer pipeline does not rewrite (its
  own compilation does), dead outputs are not counted;
* no loop keeps an unread buffer, forward traces included (mit-mot buffers are
  carried, `carry.py`; unread sit-sot traces untraced, `untrace.py`), except
  inside such a native `OpFromGraph`, whose inner graph the outer pipeline does
  not rewrite (its own compilation runs the pipeline on it at link time), and
  except a native Scan's mit-sot trace: innergraph leaves those to PyTensor's
  save-memory pass, which does not always shrink them (in vanilla neither:
  `test_a_native_mit_sot_trace_is_left_as_vanilla_leaves_it`).
* no loop carries two duplicate states, and no consumer returns one output twice
  (`innergraph.rewriting.duplicates`; the compiled graph's native loops are lifted
  back to be read as slots).

Only the rewriter runs (nothing is linked), so the law is cheap; the numbers of
the same programs are compared with vanilla PyTensor by `tests/test_differential.py`.
"""

import pytensor
from hypothesis import given, settings
from profiles import examples
from pytensor.compile.aliasing import add_supervisor_to_fgraph
from pytensor.compile.builders import OpFromGraph
from pytensor.compile.io import In
from pytensor.compile.mode import Mode
from pytensor.compile.sharedvalue import SharedVariable
from pytensor.conditional.op import IfElse as NativeIfElse
from pytensor.graph.fg import FunctionGraph
from pytensor.graph.traversal import graph_inputs
from pytensor.scan.op import Scan as NativeScan

from innergraph.lifting.rules import lift_graph
from innergraph.ops.call import Call
from innergraph.rewriting.duplicates import _duplicates
from innergraph.protocol.signature import consumers
from innergraph.stats import graph_stats, unread_buffers
from innergraph.testing.programs import (
    Cond,
    Leaf,
    Loop,
    Program,
    State,
    build_program,
    programs,
)
from innergraph.testing.recipes import Param, Recipe, Step


def _exp(static, actual) -> Recipe:
    return Recipe((Param("float64", static, actual),), (Step("exp", (0,)),), (1,), ((static, actual),) * 2)


EXP = _exp((None, 3), (4, 3))

#: Programs under the ``ci`` profile (rewriting only: about a second each); the other
#: profiles set their own count (``tests/profiles.py``: ``thorough`` 3,000, ``repeat`` 25).
CI_EXAMPLES = 40
EXAMPLES = examples(ci=CI_EXAMPLES)


def rewritten(program: Program) -> FunctionGraph:
    """The program's graph after the default pipeline (``fast_run``), not linked."""
    inputs, outputs = build_program(program)
    shared = [v for v in graph_inputs(outputs) if isinstance(v, SharedVariable)]  # as pytensor.function adds them
    fgraph = FunctionGraph([*inputs, *shared], outputs, clone=True)
    add_supervisor_to_fgraph(fgraph, [In(v) for v in fgraph.inputs])  # as pytensor.function does, for in-place rewrites
    Mode(linker="py", optimizer="fast_run").optimizer.rewrite(fgraph)
    return fgraph


def duplicate_slots(fgraph: FunctionGraph) -> list[str]:
    """The consumers (native ones lifted) that repeat a state or an output."""
    lifted = FunctionGraph(fgraph.inputs, lift_graph(fgraph.outputs), clone=False)
    return [str(sig.node) for sig in consumers(lifted) if _duplicates(sig) is not None]


def native_call_nodes(fgraph: FunctionGraph) -> set:
    """The nodes inside native `OpFromGraph`s (nested scopes included): the pipeline leaves them as built."""
    found: set = set()
    todo = [n for n in fgraph.apply_nodes if isinstance(n.op, OpFromGraph)]
    while todo:
        inner = todo.pop().op.fgraph
        for node in inner.apply_nodes:
            if node not in found:
                found.add(node)
                todo += [node] if isinstance(node.op, OpFromGraph) else []
                nested = getattr(node.op, "fgraph", None)
                if nested is not None and not isinstance(node.op, OpFromGraph):
                    found.update(nested.apply_nodes)
    return found


def calls_dead(fgraph: FunctionGraph) -> list:
    """The calls of the outer graph (in-graph `Call`s and native `OpFromGraph`s) with an output nobody reads."""
    return [
        node for node in fgraph.apply_nodes
        if isinstance(node.op, Call | OpFromGraph) and any(not fgraph.clients.get(out) for out in node.outputs)
    ]


def native_mit_sot_trace(node, i: int) -> bool:
    """Whether output ``i`` of ``node`` is the trace of a native Scan's mit-sot (left to PyTensor's save-memory pass)."""
    if not isinstance(node.op, NativeScan):
        return False
    info = node.op.info
    return info.n_mit_mot <= i < info.n_mit_mot + info.n_mit_sot


def claimed_unread(fgraph: FunctionGraph) -> list:
    """The unread buffers innergraph claims to remove: all but a native Scan's mit-sot traces."""
    return [(node, i) for node, i in unread_buffers(fgraph) if not native_mit_sot_trace(node, i)]


def native_conditionals_dead(fgraph: FunctionGraph) -> int:
    """Dead outputs of PyTensor's own conditionals in the outer graph: since the port to PyTensor 3.3 the
    pipeline leaves them to PyTensor (no IfElse lift), which keeps them (`test_a_native_conditionals_dead_outputs_go`)."""
    return sum(
        not fgraph.clients.get(out)
        for node in fgraph.apply_nodes if isinstance(node.op, NativeIfElse)
        for out in node.outputs
    )


@settings(max_examples=EXAMPLES)
@given(programs(orders=(1, 2)))
def test_no_dead_output_unread_buffer_or_duplicate_state_after_the_pipeline(program):
    fgraph = rewritten(program)
    stats = graph_stats(fgraph)
    inside_native_calls = native_call_nodes(fgraph)
    unread = [(node.op, i) for node, i in claimed_unread(fgraph) if node not in inside_native_calls]
    # dead calls are counted in the outer graph (where the pipeline ran), the rest everywhere
    dead = {kind: n for kind, n in stats["dead_outputs_by_kind"].items() if kind != "call"}
    dead["ifelse"] = dead.get("ifelse", 0) - native_conditionals_dead(fgraph)
    dead = {kind: n for kind, n in dead.items() if n}
    assert (dead, unread, calls_dead(fgraph)) == ({}, [], []), pytensor.dprint(fgraph, file="str")
    assert duplicate_slots(fgraph) == []


#: ``ifelse(sum(x) > 0, exp(x), exp(x))`` differentiated once: the pipeline leaves a native IfElse with an
#: output nobody reads (found by the law when the program generator changed, issue 37).
EQUAL_BRANCHES = Program(
    inputs=(((None, 3), (4, 3)),),
    expr=Cond(cond=0, then=Leaf(EXP, (0,)), other=Leaf(EXP, (0,)), summed=False),
    order=1,
)


def test_native_conditionals_are_left_to_pytensor_with_vanillas_dead_outputs():
    """PyTensor 3.3's conditionals stay PyTensor's (no IfElse lift since the port): the dead outputs
    the pipeline leaves on them are exactly vanilla's, so the law above does not count them."""
    import innergraph

    with innergraph.uninstalled():
        vanilla = native_conditionals_dead(rewritten(EQUAL_BRANCHES))
    assert native_conditionals_dead(rewritten(EQUAL_BRANCHES)) == vanilla > 0


#: Found by the law on PyTensor 3.3 (seed changing each run, issue 37): the second derivative of a loop
#: with a three-tap mit-sot keeps a native ``grad_of_grad`` Scan whose mit-sot trace nobody reads.
THREE_TAP_SECOND_DERIVATIVE = Program(
    inputs=(((None,), (3,)),),
    expr=Loop(
        sequences=((0, (0,)), (0, (0,))),
        states=(State(init=0, taps=(-3, -2, -1), shared=False), State(init=0, taps=(-1,), shared=False)),
        non_sequences=((0, False),),
        bodies=(
            Cond(cond=1, then=Leaf(_exp((None,), (3,)), (5,)), other=Leaf(_exp((), ()), (2,)), summed=True),
            Leaf(_exp((), ()), (0,)),
        ),
        n_steps=1, explicit_n_steps=False, stop=0, threshold=0.0, summed=(False, True), result=0, last=False, all_live=False,
    ),
    order=2,
)


def test_a_native_mit_sot_trace_is_left_as_vanilla_leaves_it():
    """Innergraph removes what it claims (fewer unread buffers than vanilla), and the rest are mit-sot traces vanilla keeps too."""
    import innergraph

    with innergraph.uninstalled():
        vanilla = unread_buffers(rewritten(THREE_TAP_SECOND_DERIVATIVE))
    ours = unread_buffers(rewritten(THREE_TAP_SECOND_DERIVATIVE))
    assert claimed_unread(rewritten(THREE_TAP_SECOND_DERIVATIVE)) == []
    assert 0 < len(ours) < len(vanilla)
    assert all(native_mit_sot_trace(node, i) for node, i in ours)
