"""Issue 24's law over random programs: clean reverse-mode loops.

After the rewrite pipeline, over the random user programs of
`innergraph.testing.programs` with their first or second derivatives taken:

* no loop has a dead output (`innergraph.stats`). Calls are left out: a native
  `OpFromGraph` the pipeline keeps native (one holding another inner-graph Op,
  `design/opfromgraph.md`) keeps its dead outputs, as in vanilla PyTensor;
* no reverse-mode loop keeps an unread buffer: no mit-mot buffer that nothing
  reads after the loop. (Forward traces are PyTensor's save-memory pass's to
  shrink; it leaves some mit-sot traces full length, in vanilla PyTensor too:
  those of a while loop recomputed inside a gradient body, and those of a
  mit-sot a carried cotangent with taps ``-2, -1`` became, where vanilla keeps
  the mit-mot's buffer instead. The count of unread buffers is then vanilla's.)
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
from pytensor.graph.fg import FunctionGraph

from innergraph.convert import lift_graph
from innergraph.rewriting.duplicates import _duplicates
from innergraph.rewriting.signature import consumers
from innergraph.stats import graph_stats, unread_buffers
from innergraph.testing.programs import Program, build_program, programs

#: Programs under the ``ci`` profile (rewriting only: about a second each).
EXAMPLES = 40


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


@settings(max_examples=EXAMPLES)
@given(programs(orders=(1, 2)))
def test_no_dead_output_unread_buffer_or_duplicate_state_after_the_pipeline(program):
    fgraph = rewritten(program)
    stats = graph_stats(fgraph)
    dead_in_loops = stats["dead_outputs_by_kind"].get("scan", 0)
    unread = [(node.op, i) for node, i in unread_buffers(fgraph) if i < node.op.info.n_mit_mot]
    assert (dead_in_loops, unread) == (0, []), pytensor.dprint(fgraph, file="str")
    assert duplicate_slots(fgraph) == []
