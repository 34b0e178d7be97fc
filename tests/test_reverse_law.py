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
  not rewrite (its own compilation runs the pipeline on it at link time).
* no loop carries two duplicate states, and no consumer returns one output twice
  (`innergraph.rewriting.duplicates`; the compiled graph's native loops are lifted
  back to be read as slots).

Only the rewriter runs (nothing is linked), so the law is cheap; the numbers of
the same programs are compared with vanilla PyTensor by `tests/test_differential.py`.
"""

import pytensor
from hypothesis import given, settings
from pytensor.compile.aliasing import add_supervisor_to_fgraph
from pytensor.compile.io import In
from pytensor.compile.mode import Mode
from pytensor.compile.builders import OpFromGraph
from pytensor.graph.fg import FunctionGraph

from innergraph.convert import lift_graph
from innergraph.ops.call import Call
from innergraph.rewriting.duplicates import _duplicates
from innergraph.rewriting.signature import consumers
from innergraph.stats import graph_stats, unread_buffers
from innergraph.testing.programs import Program, build_program, programs
from profiles import examples

#: Programs under the ``ci`` profile (rewriting only: about a second each); the other
#: profiles set their own count (``tests/profiles.py``: ``thorough`` 3,000, ``repeat`` 25).
EXAMPLES = examples(ci=40)


def rewritten(program: Program) -> FunctionGraph:
    """The program's graph after the default pipeline (``fast_run``), not linked."""
    inputs, outputs = build_program(program)
    fgraph = FunctionGraph(inputs, outputs, clone=True)
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


@settings(max_examples=EXAMPLES)
@given(programs(orders=(1, 2)))
def test_no_dead_output_unread_buffer_or_duplicate_state_after_the_pipeline(program):
    fgraph = rewritten(program)
    stats = graph_stats(fgraph)
    inside_native_calls = native_call_nodes(fgraph)
    unread = [(node.op, i) for node, i in unread_buffers(fgraph) if node not in inside_native_calls]
    # dead calls are counted in the outer graph (where the pipeline ran), the rest everywhere
    dead = {kind: n for kind, n in stats["dead_outputs_by_kind"].items() if kind != "call"}
    assert (dead, unread, calls_dead(fgraph)) == ({}, [], []), pytensor.dprint(fgraph, file="str")
    assert duplicate_slots(fgraph) == []
