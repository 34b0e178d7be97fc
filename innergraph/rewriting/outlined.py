"""Work moved out of a shared body, built once: one call body applied per consumer.

Terms
-----
shared body
    A function variable that several consumers read (K loops over one step
    function, merged by MergeOptimizer).
moved work
    What a rewrite takes out of a body and computes in the outer graph instead:
    the push-outs (`innergraph.rewriting.push_out`) vectorize a body's row-wise
    work over the whole sequence. The rewrite builds it once per body, as a
    *template* over stand-ins for each consumer's outer variables.
outlined work
    The template as a body of its own (`outline`), applied by an
    `innergraph.ops.call.Call` to each consumer's outer variables.

Without outlining, each of the K consumers gets its own copy of the template in
the outer graph: K equal subgraphs that are rewritten, fused and converted to
backend code one by one (issue 22: ``elemwise_fusion`` about 17 ms and Numba's
conversion of the fused ``Composite`` about 40 ms per loop for a 50-op step).
Outlined, the work is one body: fused once (`innergraph_fusion` fuses each folded
body), converted once (a call's code is cached on its `Body`), and still done
over the whole sequence at once, so the run-time benefit of the push-out stays.

A template moved out of a body read by one consumer stays inline in the outer
graph, where outer fusion may combine it with the work around it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from pytensor.graph.basic import Variable
from pytensor.graph.fg import FunctionGraph

from innergraph.core.build import inner_graph
from innergraph.core.graph import scope_leaves
from innergraph.ops.call import Call
from innergraph.protocol.slots import form_of

__all__ = ["Outline", "outline", "readers"]


def readers(fgraph: FunctionGraph) -> Counter[Variable]:
    """How many loops (consumers whose form says so) read each function variable of ``fgraph``."""
    counts: Counter[Variable] = Counter()
    for node in fgraph.apply_nodes:
        form = form_of(node.op)
        if form is not None and form.capabilities.loop:
            counts.update(form.functions(node))
    return counts


class Outline:
    """A template as one function, applied to each consumer's values of its stand-ins.

    Parameters
    ----------
    template
        The moved work, computed from ``stand_ins`` and constants.
    stand_ins
        The variables a consumer binds: each application passes its own values
        for them, in this order. Those the template does not read are not params.
    """

    def __init__(self, template: Sequence[Variable], stand_ins: Sequence[Variable]):
        read = set(scope_leaves(list(template)))
        self.used = [i for i, v in enumerate(stand_ins) if v in read]
        closure = inner_graph(list(template), [stand_ins[i] for i in self.used])
        if closure.captured:  # a template reads only its stand-ins and constants
            raise AssertionError(f"outline: the moved work reads {list(closure.captured)}, which no consumer binds")
        self.function = closure.function

    def apply(self, values: Sequence[Variable]) -> list[Variable]:
        """The template over ``values`` (one per stand-in): a call of the one function."""
        out: Any = Call()(self.function, *(values[i] for i in self.used))
        return [out] if isinstance(out, Variable) else list(out)


def outline(template: Sequence[Variable], stand_ins: Sequence[Variable]) -> Outline:
    """`Outline` of ``template`` over ``stand_ins``."""
    return Outline(template, stand_ins)
