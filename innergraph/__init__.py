"""innergraph: control-flow bodies as real PyTensor graph inputs.

``import innergraph`` patches PyTensor (see `innergraph.patching`) and registers
innergraph's rewrites; `uninstall` restores PyTensor exactly. On a PyTensor built
from the upstream series (``patches/``) it applies no patch: ``innergraph`` is
PyTensor's own ``pytensor.innergraph`` (see `innergraph.startup.upstream`), and `form`
says which form is active. Unpickling
innergraph's objects imports its modules without running this package, so it
installs nothing (see `innergraph_pickle`); a later ``import innergraph`` runs
it, reusing those modules, and installs.

Public API
----------
inner_graph
    Build a closed body and its function variable from a callable or outputs.
call
    Apply a function to arguments in the graph (an in-graph OpFromGraph).
scan
    `pytensor.scan`, building the in-graph Scan (``checkpoint=`` for checkpointed gradients).
checkpointing
    Checkpoint the gradients of the Scans differentiated in a block (`innergraph.ops.checkpoint`).
lift, lower, lift_graph, lower_graph
    Convert PyTensor's own Scans to the in-graph form and back (a FunctionGraph
    in place, or a graph by rebuilding).
instantiate
    Scope-aware substitution of a body's params by values.
fold_inner_graphs, unfold_inner_graphs, fold_function
    Fold function variables into constants (outside the rewrite pipeline, and
    before linking), and unfold them into rewritable nodes (at its start).
while_loop, do_while, fori_loop, loop
    JAX's loops, and the design notes' Loop(pre_condition, update, post_condition) (pytrees of tensors as state) as in-graph consumers.
consumer
    The contributor API: declare a new consumer's slots and run its bodies.
graph_stats
    Node, body and consumer counts, for vanilla and in-graph graphs alike.
"""

import innergraph.startup.supported  # noqa: F401  library only (first: on an unsupported PyTensor, one ImportError and no patch)
from innergraph.startup.upstream import alias_upstream, patched_pytensor, refuse_partial_series  # library only

refuse_partial_series()  # library only: a PyTensor that enables a part of the upstream series
if patched_pytensor():  # library only
    alias_upstream()  # library only: ``innergraph`` is now ``pytensor.innergraph``, one copy of each class
from innergraph.core.build import Closure, inner_graph
from innergraph.builders import op_from_graph, scan
from innergraph.ops.checkpoint import checkpointing
from innergraph.lifting.rules import lift, lift_graph, lower, lower_graph
from innergraph.core.errors import ArityError, BodyTypeError, FreeVariableError, ParamError
from innergraph.core.fold import fold_function, fold_inner_graphs, unfold_inner_graphs, visible_nodes
from innergraph.core.graph import InnerGraph, body_of, is_function, param, params
from innergraph.core.instantiate import instantiate, substitute
from innergraph.core.interning import body_table_size, clear_body_cache
from innergraph.ops.call import Call, call
from innergraph.ops.ifelse import ifelse
from innergraph.loops import do_while, fori_loop, loop, while_loop
from innergraph import consumer  # noqa: F401  (the contributor API: innergraph.consumer)
from innergraph.patching import form, install, installed, uninstall, uninstalled
from innergraph.stats import graph_stats
from innergraph.core.types import Body, InnerGraphType

__all__ = [
    "ArityError",
    "Body",
    "BodyTypeError",
    "Call",
    "Closure",
    "FreeVariableError",
    "InnerGraph",
    "InnerGraphType",
    "ParamError",
    "body_of",
    "body_table_size",
    "call",
    "checkpointing",
    "clear_body_cache",
    "fold_function",
    "fold_inner_graphs",
    "form",
    "graph_stats",
    "consumer",
    "do_while",
    "fori_loop",
    "ifelse",
    "inner_graph",
    "install",
    "installed",
    "instantiate",
    "is_function",
    "param",
    "params",
    "lift",
    "lift_graph",
    "lower",
    "loop",
    "lower_graph",
    "op_from_graph",
    "scan",
    "substitute",
    "unfold_inner_graphs",
    "uninstall",
    "uninstalled",
    "visible_nodes",
    "while_loop",
]

__version__ = "0.1.0"


def _bind_loaded_submodules() -> None:
    """Bind the submodules that `innergraph_pickle` loaded before this package ran."""
    import sys

    package = sys.modules[__name__]
    for name, module in list(sys.modules.items()):
        parent, _, leaf = name.rpartition(".")
        if parent == __name__ and module is not None and not hasattr(package, leaf):
            setattr(package, leaf, module)


_bind_loaded_submodules()
install()
