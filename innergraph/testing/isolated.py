"""Bodies rewritten on their own, as PyTensor rewrites an `OpFromGraph`'s inner graph.

PyTensor rewrites the inner graph of its own control-flow Ops by itself, when it
compiles them: each inner graph goes through the mode's rewrites alone, with nothing
of the outer graph and nothing of the other inner graphs. innergraph instead rewrites
bodies together with the outer graph. ``mode.excluding("innergraph")`` is neither:
with innergraph's pipeline off, nothing rewrites a consumer's bodies in the graph
(they are graph inputs, not inner graphs PyTensor compiles); they are rewritten only
when compiled into thunks or code, where no structural check can see them.

`rewrite_bodies_in_isolation` makes the first, PyTensor's treatment, visible: the
outputs rebuilt with every body of every consumer rewritten on its own by the mode's
rewriter, nested bodies first. Compiled with ``mode.excluding("innergraph")``, that is
the "vanilla side" for a consumer that has no vanilla equivalent: what PyTensor would
do for an equivalent native Op (`check_inner_graph_op`'s ``against="isolated"``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pytensor.compile.mode import get_mode
from pytensor.graph.basic import Variable
from pytensor.graph.fg import FunctionGraph
from pytensor.graph.replace import clone_replace

from innergraph.core.build import inner_graph
from innergraph.core.fold import fold_function
from innergraph.core.graph import body_of, is_function, scope_leaves
from innergraph.core.instantiate import instantiate

__all__ = ["rewrite_bodies_in_isolation"]


def rewrite_bodies_in_isolation(outputs: Sequence[Variable], mode: Any = None) -> list[Variable]:
    """``outputs`` rebuilt with each consumer body rewritten alone by ``mode``'s rewriter (without innergraph's).

    Parameters
    ----------
    outputs
        Variables computed by consumers (and anything else); they are not changed.
    mode
        The mode whose rewrites a body goes through (default: PyTensor's default mode),
        innergraph's own rewrites excluded, and the in-place ones (the body is folded:
        whatever compiles it decides what may be destroyed, as for any body).

    Returns
    -------
    list of Variable
        The outputs over new nodes whose function inputs are the rewritten bodies, folded.
        A body whose rewritten outputs change type (a refined static shape) is converted
        back to the declared type.
    """
    replace = {f: _rewritten(f, mode) for f in scope_leaves(list(outputs)) if is_function(f)}  # not inside bodies
    return list(clone_replace(list(outputs), replace=replace)) if replace else list(outputs)


def _rewritten(function: Variable, mode: Any) -> Variable:
    """The folded function of ``function``'s body after ``mode``'s rewriter, its nested bodies first."""
    body = body_of(function)
    params = [t() for t in body.param_types]
    outputs = rewrite_bodies_in_isolation(instantiate(body, params), mode)
    fgraph = FunctionGraph(params, outputs, clone=True)
    get_mode(mode).excluding("innergraph", "inplace").optimizer.rewrite(fgraph)  # in place: when compiled
    fitted = [t.filter_variable(o, allow_convert=True) for t, o in zip(body.type.output_types, fgraph.outputs, strict=True)]
    return fold_function(inner_graph(fitted, fgraph.inputs).function)
