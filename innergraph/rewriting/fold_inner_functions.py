"""Constant inner-function nodes folded as PyTensor folds any other node: without compiling C.

An *inner-function node* is an Apply of an ``OpFromGraph`` or a subclass
(``AllocDiag``, ``KroneckerProduct``...), whose ``perform`` runs a linked function of
its inner graph (PyTensor's ``HasInnerFunction``). When all its inputs are constants,
PyTensor's constant folding (``unconditional_constant_folding``) asks the node for a
thunk with ``impl="py"``, as it does for every node, but this Op links its inner graph
with the ``vm`` linker, which makes a C thunk of every inner node. On an empty compile cache
that is a C compilation per inner node kind: folding ``AllocDiag([0., 0.])`` in the
gradient loop of the VARMAX model compiles 7 C modules, 5.5 s of a 12 s compile
under load (2026-11-29), where the same node's inner graph folds in Python in
milliseconds. PyTensor's SARIMAX gradient folds such a node too, vanilla or not;
innergraph's body rewrites make one more of them in VARMAX (a zero cotangent reaches
the loop's body as a constant, where vanilla keeps it a loop input).

* `local_fold_inner_function`: an inner-function node of constants that PyTensor would
  fold (its ``do_constant_folding``) becomes the constants PyTensor's folding would make,
  computed inner node by inner node with PyTensor's own rule for a node: its Python
  implementation, its default one where it has none. A nested inner-function node is
  evaluated the same way. It declines (and leaves the node to PyTensor) when an inner
  node destroys an input, is another kind of inner graph (a Scan, a SciPy optimizer),
  or cannot be evaluated.
* `replace_folding_passes`: PyTensor's ``topo_constant_folding``, the final pass of
  canonicalize, uncanonicalize, stabilize and specialize, replaced under the same name
  and tags by the same walk with `local_fold_inner_function` tried before PyTensor's
  ``constant_folding`` on each node (`restore_folding_passes` puts PyTensor's back, on
  uninstall). It must be in that walk, not a node rewriter of those databases: the
  walk folds a node's inputs and then the node, so an ``AllocDiag`` whose input was
  ``zeros(2)`` when the pass began is folded in it. Both cases in the models above are
  of that kind.

Values are those of PyTensor's folding of each inner node, so where PyTensor would have
linked the inner graph with C thunks an elementwise transcendental may differ in the
last bit, as PyTensor's own folding of a node (Python) and its compiled code (C) may.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from pytensor.compile.builders import OpFromGraph
from pytensor.graph.basic import Apply, Constant, Variable
from pytensor.graph.fg import FunctionGraph
from pytensor.graph.op import HasInnerGraph
from pytensor.graph.rewriting.basic import in2out, node_rewriter

from innergraph.core.hooks import installed
from innergraph.rewriting.copies import swap_registered

__all__ = ["evaluate_inner_function", "local_fold_inner_function", "replace_folding_passes", "restore_folding_passes"]


def _run(node: Apply, values: list[Any]) -> list[Any] | None:
    """``node``'s outputs for input ``values``, as PyTensor's constant folding computes them (None: it cannot)."""
    if isinstance(node.op, OpFromGraph):
        return evaluate_inner_function(node.op, values)
    if isinstance(node.op, HasInnerGraph) or getattr(node.op, "destroy_map", None):
        return None
    storage_map: dict[Variable, list[Any]] = {var: [value] for var, value in zip(node.inputs, values)}
    compute_map: dict[Variable, list[bool]] = {var: [True] for var in node.inputs}
    for out in node.outputs:
        storage_map[out], compute_map[out] = [None], [False]
    try:
        try:
            node.op.make_thunk(node, storage_map, compute_map, no_recycling=[], impl="py")()
        except NotImplementedError:  # PyTensor's rule: an Op without a Python implementation runs its own
            node.op.make_thunk(node, storage_map, compute_map, no_recycling=[])()
    except NotImplementedError:
        return None
    # a lazy thunk (an inner ifelse) computes its outputs here, its inputs being all known
    if not all(compute_map[out][0] for out in node.outputs):
        return None
    return [storage_map[out][0] for out in node.outputs]


def evaluate_inner_function(op: OpFromGraph, values: list[Any]) -> list[Any] | None:
    """The outputs of ``op`` applied to ``values``, evaluated inner node by inner node without linking (None: not evaluable so)."""
    inner = op.fgraph
    known: dict[Variable, Any] = dict(zip(inner.inputs, values))
    for node in inner.toposort():
        results = _run(node, [_known(var, known) for var in node.inputs])
        if results is None:
            return None
        known.update(zip(node.outputs, results))
    return [_known(out, known) for out in inner.outputs]


def _known(var: Variable, known: dict[Variable, Any]) -> Any:
    """``var``'s value: a constant's data, or computed (or given); every other variable of an inner graph is one of these."""
    return var.data if isinstance(var, Constant) else known[var]


def _constant(output: Variable, data: Any) -> Constant:
    """The constant PyTensor's folding makes of ``output``'s value (a tensor constant narrows its type to the value's shape itself)."""
    return output.type.make_constant(data)


@node_rewriter([OpFromGraph])
def local_fold_inner_function(fgraph: FunctionGraph, node: Apply) -> list[Variable] | None:
    """An inner-function node of constants that PyTensor would fold -> its values as constants, folded in Python (see the module)."""
    constants = [var for var in node.inputs if isinstance(var, Constant)]
    if not installed() or len(constants) != len(node.inputs) or not node.op.do_constant_folding(fgraph, node):
        return None
    values = evaluate_inner_function(node.op, [var.data for var in constants])
    if values is None:
        return None
    return [_constant(out, data) for out, data in zip(node.outputs, values)]


#: PyTensor's name of the folding pass replaced, and the databases it is the final pass of.
PASS_NAME = "topo_constant_folding"
DATABASES = ("canonicalize", "uncanonicalize", "stabilize", "specialize")

_swapped: list[Any] = []  # the databases whose folding pass is innergraph's


@cache
def _folding_pass() -> Any:
    """innergraph's folding pass: one object for every install, as PyTensor's is one."""
    from pytensor.tensor.rewriting.basic import constant_folding, topo_constant_folding

    ours = in2out(local_fold_inner_function, constant_folding, ignore_newtrees=True, name=PASS_NAME)
    # the name a database's registration would have set: an EquilibriumDB finds its final
    # passes by it (unnamed, the pass ran first in each round, as a global rewriter)
    ours.name = topo_constant_folding.name
    return ours


def replace_folding_passes() -> None:
    """Put innergraph's folding pass in place of PyTensor's ``topo_constant_folding`` (same name and tags) in `DATABASES`."""
    from pytensor.compile.mode import optdb
    from pytensor.tensor.rewriting.basic import topo_constant_folding

    if _swapped:
        return
    for name in DATABASES:
        if name in optdb and topo_constant_folding in optdb[name].__db__.get(PASS_NAME, ()):
            swap_registered(optdb[name], topo_constant_folding, _folding_pass())
            _swapped.append(optdb[name])


def restore_folding_passes() -> None:
    """Undo `replace_folding_passes`: PyTensor's own pass back in every tag."""
    from pytensor.tensor.rewriting.basic import topo_constant_folding

    while _swapped:
        swap_registered(_swapped.pop(), _folding_pass(), topo_constant_folding)
