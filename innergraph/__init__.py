"""innergraph: control-flow bodies as real PyTensor graph inputs.

``import innergraph`` patches PyTensor (see `innergraph.patching`) and registers
innergraph's rewrites; `uninstall` restores PyTensor exactly.

Public API
----------
inner_graph
    Build a closed body and its function variable from a callable or outputs.
call
    Apply a function to arguments in the graph (an in-graph OpFromGraph).
instantiate
    Scope-aware substitution of a body's params by values.
fold_inner_graphs
    Fold function variables into constants (what the linker schedule does).
graph_stats
    Node, body and consumer counts, for vanilla and in-graph graphs alike.
"""

from innergraph.build import Closure, inner_graph
from innergraph.errors import ArityError, BodyTypeError, FreeVariableError, ParamError
from innergraph.fold import fold_inner_graphs, visible_nodes
from innergraph.graph import InnerGraph, body_of, is_function, param, params
from innergraph.instantiate import instantiate, substitute
from innergraph.ops.call import Call, call
from innergraph.patching import install, installed, uninstall
from innergraph.stats import graph_stats
from innergraph.types import Body, InnerGraphType

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
    "call",
    "fold_inner_graphs",
    "graph_stats",
    "inner_graph",
    "install",
    "installed",
    "instantiate",
    "is_function",
    "param",
    "params",
    "substitute",
    "uninstall",
    "visible_nodes",
]

__version__ = "0.1.0"

install()
