"""Loops that share a body, with the outer nodes around them, outlined as one call body.

Terms
-----
copy
    One loop of a group of loops that read the same function variable with equal
    Ops (K loops over one step function), together with the outer nodes around it.
scaffolding
    The outer nodes ``pytensor.scan`` builds around each loop: the sequence slice,
    the step count, the state buffer (``AllocEmpty``, ``SetSubtensor``), the reads
    of the result (``[1:][-1]``). About 16 nodes per loop, equal from copy to copy
    up to the variables they start from.
region
    The nodes found by walking the K copies in lockstep, from the loops up their
    inputs and down their single readers, for as long as the K nodes met at one
    step apply equal Ops to corresponding variables (`_Region`). A node is in the
    region of one copy only.
leaf
    Where the lockstep walk stops: a variable the copies do not compute alike (each
    loop's own sequence) or the very same variable in every copy. Every leaf but a
    constant becomes a param of the call body, and each copy passes its own.

With the body of K loops merged into one function, the per-loop cost of a
compilation is the scaffolding: K equal outer neighbourhoods, each canonicalized,
simplified, shape-inferred, lowered, made in place and converted on its own
(issue 22, about 20 ms per loop on a 50-op step). `outline_loops` builds the
region of one copy once, as a body, and replaces each copy by a `Call` of it over
that copy's leaves: the passes up to the fold rewrite one loop and its scaffolding,
its save-memory and in-place decisions are taken once when the call body is
compiled, and the Numba backend converts the call body once (a call's code is
cached on its `Body`). Each copy's loop still runs on its own values.

It runs right after the lift (``innergraph_outline_loops``, 0.043), for graphs
compiled with the Numba linker only: under PyTensor's own runtime a call is a
Python-level dispatch per loop per call (a steady-call cost on small loops), and
PyTensor's own tests inspect the native Scans of graphs compiled with the other
linkers. Loops that may run the same steps (the same ``n_steps``) are left to loop
merging, which makes them one loop (PyTensor's ``ScanMerge`` does the same). A group is left alone (the loops stay where they are) when outlining it
would make a cycle (a copy's leaf computed from a region node) or a leaf reads a
param of an enclosing body.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any

from pytensor.graph.basic import Apply, Constant, NominalVariable, Variable, equal_computations
from pytensor.graph.fg import FunctionGraph, Output

from pytensor.scan.op import Scan as NativeScan
from pytensor.tensor.basic import get_underlying_scalar_constant_value
from pytensor.tensor.exceptions import NotScalarConstantError
from pytensor.tensor.basic import ScalarFromTensor, TensorFromScalar
from pytensor.tensor.elemwise import Elemwise
from pytensor.tensor.shape import Shape, Shape_i

from innergraph.core.build import inner_graph
from innergraph.core.dispatch import compiling_for_numba
from innergraph.core.graph import InnerGraph, body_of, is_function, scope_toposort
from innergraph.core.instantiate import instantiate
from innergraph.ops.call import Call
from innergraph.protocol.signature import signature
from innergraph.protocol.slots import form_of

__all__ = ["inline_outlined_loops", "loop_groups", "outline_loops"]

#: Graphs `outline_loops` outlined loops of: `inline_outlined_loops` inlines their loop calls.
_outlined: weakref.WeakSet[FunctionGraph] = weakref.WeakSet()

#: Fewest loops sharing a body worth a call: one loop has nothing to share.
MIN_LOOPS = 2


def loop_groups(fgraph: FunctionGraph) -> list[list[Apply]]:
    """The groups of two or more loops of ``fgraph`` with equal Ops over the same function variables.

    In the graph's topological order: deterministic for a given graph.
    """
    groups: dict[tuple[Any, ...], list[Apply]] = {}
    for node in fgraph.toposort():
        form = form_of(node.op)
        if form is not None and form.capabilities.loop:
            groups.setdefault((node.op, *form.functions(node)), []).append(node)
    return [nodes for nodes in groups.values() if len(nodes) >= MIN_LOOPS and not _might_merge(nodes)]


def _might_merge(loops: Sequence[Apply]) -> bool:
    """Whether two of ``loops`` may run the same steps: loop merging makes them one loop instead.

    Their headers (a Scan's ``n_steps``) are the same variables, or constants of equal
    values once shapes known statically are read (PyTensor's ``ScanMerge`` merges such
    loops, and its tests count the Scans left).
    """
    headers = []
    for node in loops:
        sig = signature(node)
        if sig is None:
            return True  # no header to tell them apart: leave them to the other rewrites
        headers.append(tuple(_value(h) for h in sig.header))
    return len(set(headers)) < len(headers)


def _value(variable: Variable) -> Any:
    try:
        return ("constant", int(get_underlying_scalar_constant_value(variable)))
    except (NotScalarConstantError, TypeError, ValueError):
        return variable


#: How many views (`_is_view`) above a variable every copy reads are built into the body.
_VIEW_DEPTH = 6


def _is_view(node: Apply) -> bool:
    """A view, a shape, or scalar bookkeeping: free to compute once per call."""
    if getattr(node.op, "view_map", None) or isinstance(node.op, (Shape, Shape_i, ScalarFromTensor, TensorFromScalar)):
        return True
    return isinstance(node.op, Elemwise) and all(getattr(v.type, "ndim", None) == 0 for v in node.inputs)


def _constant_only(variable: Variable, limit: int = 32) -> bool:
    """Whether ``variable`` is computed from constants alone (looking at ``limit`` nodes at most)."""
    todo, seen = [variable], set()
    while todo:
        var = todo.pop()
        if var in seen:
            continue
        seen.add(var)
        if var.owner is None:
            if not isinstance(var, Constant):
                return False
            continue
        if len(seen) > limit or is_function(var):
            return False
        todo.extend(var.owner.inputs)
    return True


def _equal_constants(variables: Sequence[Variable]) -> bool:
    """Constants of one value (equal small constants are not always one object): built into the body."""
    first = variables[0]
    return isinstance(first, Constant) and all(v is first or (isinstance(v, Constant) and v.equals(first)) for v in variables)


def outline_loops(fgraph: FunctionGraph, *, force: bool = False) -> int:
    """Outline each group of loops sharing a body, with its scaffolding, as one call body.

    Parameters
    ----------
    fgraph
        A graph the pipeline lifted.
    force
        Outline whatever linker is being compiled for (tests); by default only for
        the Numba linker.

    Returns
    -------
    int
        How many groups were outlined.
    """
    if not force and not compiling_for_numba(fgraph):
        return 0
    if sum(1 for node in fgraph.apply_nodes if _is_loop(node)) < MIN_LOOPS:
        return 0  # most graphs: no toposort spent finding it out
    outlined = 0
    refused: set[tuple[Apply, ...]] = set()
    while True:
        todo = [g for g in loop_groups(fgraph) if tuple(g) not in refused]
        if not todo:
            return outlined
        group = todo[0]
        if _Region(fgraph, group).outline():
            outlined += 1
        else:
            refused.add(tuple(group))


class _Region:
    """The lockstep walk of one group of loops, and its replacement by calls."""

    def __init__(self, fgraph: FunctionGraph, loops: Sequence[Apply]):
        self.fgraph = fgraph
        self.k = len(loops)
        self.tuples: list[tuple[Apply, ...]] = []
        self.where: dict[Apply, tuple[int, int]] = {}  # node -> (tuple index, copy index)
        self.leaves: list[tuple[Variable, ...]] = []
        self._leaf_keys: set[tuple[Variable, ...]] = set()
        self._add(tuple(loops))
        self._walk(down_from=len(self.tuples) - 1)

    # --- the walk ------------------------------------------------------------------------

    def _add(self, nodes: tuple[Apply, ...]) -> int:
        index = len(self.tuples)
        self.tuples.append(nodes)
        for copy, node in enumerate(nodes):
            self.where[node] = (index, copy)
        return index

    def _alike(self, nodes: Sequence[Apply]) -> bool:
        first = nodes[0]
        return (
            len(set(nodes)) == self.k
            and not isinstance(first.op, (InnerGraph, Output))
            and all(n.op == first.op and len(n.inputs) == len(first.inputs) for n in nodes)
            # equal Ops of consumers over different bodies (a call of ``exp(v) * 2`` and one of
            # ``exp(v) * 3``) compute different things: alike only over the same function variables
            and all(n.inputs[j] is u for n in nodes for j, u in enumerate(first.inputs) if is_function(u))
            and all(
                len(n.outputs) == len(first.outputs) and all(o.type == p.type for o, p in zip(n.outputs, first.outputs))
                for n in nodes
            )
        )

    def _leaf(self, variables: tuple[Variable, ...]) -> None:
        if variables not in self._leaf_keys:
            self._leaf_keys.add(variables)
            self.leaves.append(variables)

    def _shared_leaf(self, variable: Variable, depth: int = 0) -> None:
        """A variable every copy reads: a leaf, or, computed by a view, the view's inputs.

        A view (``a[None]``: the state's initial row) costs nothing per call and is
        what the rewrites of the scaffolding read through (``buffer[0]`` is ``a``).
        """
        owner = variable.owner
        if owner is not None and _constant_only(variable):
            return  # computed from constants alone: built into the body, where constant folding reaches it
        if owner is not None and depth < _VIEW_DEPTH and not is_function(variable) and owner not in self.where and _is_view(owner):
            for var in owner.inputs:
                self._shared_leaf(var, depth + 1)
        else:
            self._leaf((variable,) * self.k)

    def _same_tuple(self, variables: tuple[Variable, ...]) -> bool:
        """Whether ``variables`` are one output of one region tuple, copy by copy."""
        owners = [v.owner for v in variables]
        spots = [self.where.get(o) if o is not None else None for o in owners]
        first = spots[0]
        if first is None or any(o is None for o in owners):
            return False
        positions = {o.outputs.index(v) for o, v in zip(owners, variables) if o is not None}
        return len(positions) == 1 and all(s == (first[0], copy) for copy, s in enumerate(spots))

    def _up(self, index: int, pending: list[int]) -> None:
        for j in range(len(self.tuples[index][0].inputs)):
            variables = tuple(n.inputs[j] for n in self.tuples[index])
            if self._same_tuple(variables):
                continue
            first = variables[0]
            if all(v is first for v in variables):
                self._shared_leaf(first)
                continue
            if _constant_only(first) and all(_constant_only(v) and equal_computations([v], [first]) for v in variables):
                continue  # one value computed from constants alone: the body builds the first copy's
            owners = [v.owner for v in variables]
            if any(o is None or o in self.where for o in owners):
                self._leaf(variables)
                continue
            nodes: list[Apply] = [o for o in owners if o is not None]
            positions = {n.outputs.index(v) for n, v in zip(nodes, variables)}
            if len(positions) != 1 or not self._alike(nodes):
                self._leaf(variables)
                continue
            pending.append(self._add(tuple(nodes)))

    def _down(self, index: int, pending: list[int]) -> None:
        nodes = self.tuples[index]
        for p in range(len(nodes[0].outputs)):
            clients = [self.fgraph.clients.get(n.outputs[p], []) for n in nodes]
            if any(len(c) != 1 for c in clients):
                continue
            readers = [c[0][0] for c in clients]
            if len({c[0][1] for c in clients}) != 1 or any(r in self.where for r in readers) or not self._alike(readers):
                continue
            for j in range(len(readers[0].inputs)):
                variables = tuple(r.inputs[j] for r in readers)
                if not (self._same_tuple(variables) or all(v is variables[0] for v in variables)):
                    break
            else:
                pending.append(self._add(tuple(readers)))

    def _walk(self, down_from: int) -> None:
        pending = [down_from]
        downward = {down_from}
        while pending:
            index = pending.pop(0)
            before = len(self.tuples)
            if index in downward:
                self._down(index, pending)
                downward.update(range(before, len(self.tuples)))
            self._up(index, pending)

    # --- the replacement -------------------------------------------------------------------

    def _outputs(self) -> list[tuple[Variable, ...]]:
        """Region variables read outside the region of their copy (or outputs of the graph)."""
        result = []
        for nodes in self.tuples:
            for p in range(len(nodes[0].outputs)):
                variables = tuple(n.outputs[p] for n in nodes)
                if any(self._read_outside(client, copy) for copy, v in enumerate(variables) for client, _ in self.fgraph.clients.get(v, [])):
                    result.append(variables)
        return result

    def _read_outside(self, client: Apply, copy: int) -> bool:
        spot = self.where.get(client)
        return isinstance(client.op, Output) or spot is None or spot[1] != copy

    def _params(self) -> list[tuple[Variable, ...]] | None:
        params = [leaf for leaf in self.leaves if not _equal_constants(leaf)]
        params = [leaf for leaf in params if not (is_function(leaf[0]) and all(v is leaf[0] for v in leaf))]
        if len({leaf[0] for leaf in params}) != len(params):
            return None  # copy 0 passes one variable as two params: no stand-ins to build the body over
        for leaf in params:
            if any(isinstance(v, NominalVariable | Constant) or v.type != leaf[0].type for v in leaf):
                return None  # a constant differing between copies (e.g. n_steps) cannot be a param
        return params

    def _acyclic(self, params: list[tuple[Variable, ...]]) -> bool:
        """Whether no leaf is computed from a region node (of any copy: conservative)."""
        seen: set[Variable] = set()
        todo = [v for leaf in params for v in leaf]
        while todo:
            var = todo.pop()
            if var in seen or var.owner is None:
                continue
            seen.add(var)
            if var.owner in self.where:
                return False
            todo.extend(var.owner.inputs)
        return True

    def outline(self) -> bool:
        """Replace each copy by a call of one body; whether it was done."""
        if len(self.tuples) < 2:
            return False  # the loops alone: no scaffolding to share
        params = self._params()
        if params is None or not self._acyclic(params):
            return False
        outputs = self._outputs()
        if not outputs:
            return False
        closure = inner_graph([v[0] for v in outputs], [leaf[0] for leaf in params])
        if closure.captured:
            return False
        replacements: list[tuple[Variable, Variable]] = []
        for copy in range(self.k):
            result: Any = Call()(closure.function, *(leaf[copy] for leaf in params))
            results = [result] if isinstance(result, Variable) else list(result)
            replacements += [(v[copy], r) for v, r in zip(outputs, results, strict=True)]
        self.fgraph.replace_all(replacements, reason="innergraph_outline_loops", import_missing=True)
        _outlined.add(self.fgraph)
        return True


def inline_outlined_loops(fgraph: FunctionGraph) -> int:
    """Replace the loop calls of a graph `outline_loops` changed by their bodies, after the fold and body fusion.

    A loop call is a visible `Call` whose body runs a loop at its top scope (the
    consumers `outline_loops` made; their nodes may have been rebuilt since, by the
    argument rewrites, so they are found by what they hold). The body went through
    every pass up to the fold once; the copies inlined here are what the outer graph
    would hold had the loops not been outlined (native Scans, one Op for all), so
    PyTensor's later passes (in place) and its tests see native Scans, and Numba
    converts equal nodes once (`innergraph.backends.numba_code.convert_once`).
    Returns how many calls were inlined.
    """
    if fgraph not in _outlined:
        return 0
    nodes = [node for node in fgraph.toposort() if isinstance(node.op, Call) and _runs_a_loop(node)]
    for node in nodes:
        outputs = instantiate(node.inputs[0], node.inputs[1:])
        fgraph.replace_all(list(zip(node.outputs, outputs, strict=True)), reason="innergraph_inline_outlined_loops", import_missing=True)
    return len(nodes)


def _runs_a_loop(node: Apply) -> bool:
    function = node.inputs[0]
    if not is_function(function):
        return False
    outputs = body_of(function).outputs
    return any(isinstance(n.op, NativeScan) or _is_loop(n) for n in scope_toposort(outputs))


def _is_loop(node: Apply) -> bool:
    form = form_of(node.op)
    return form is not None and form.capabilities.loop
