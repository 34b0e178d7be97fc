"""Batch loops that run one step body: K loops become one loop over a vectorised step.

Terms
-----
batchable loops
    Loops of the outer function with equal Ops, equal header inputs (the same
    ``n_steps``), the *same* function inputs (one body, shared: after
    MergeOptimizer alpha-equivalent bodies are one variable), outer inputs of equal
    types, no condition, and none reading another's results. A model written with a
    Python loop over K groups, one ``pytensor.scan`` per group, gives K such forward
    loops and K such gradient loops.
batched slot
    A slot whose K outer arguments differ, or a carried state whose next value
    reads a batched param. Its param and outputs gain a leading axis of length K;
    its argument is the K arguments stacked (on that axis for a value, on the axis
    after the rows for a sequence, a trace or a buffer) and loop ``i``'s result is
    slice ``i`` of the batched result. A slot whose K arguments are one variable
    stays as it is and its result serves all K loops.

The batched step is the step's graph vectorised (``pytensor.graph.replace.vectorize_graph``):
an Elemwise step becomes the same Elemwise over vectors. So the step is
compiled once whatever K is, the loop machinery (Numba's generated Scan, JAX's
``lax.scan``) handles one set of states instead of K, and the steady call runs the
step over contiguous vectors. This is the cold-start cost of grouped models
(issue 39: PyTensor 3.3's ``scan_merge`` gives one Scan whose body holds K copies
of the step and K states, whose Numba compilation grows with K).

A group is refused (and left to `innergraph.rewriting.merge_loops`, which puts
bodies side by side) when any body node would vectorise only as a ``Blockwise``
(a nested loop, an Op with no batched form), when a slot is not a tensor, when
the loops' per-step output row counts differ, or when a loop has a condition.
Stacking K slices ``x[:, i]`` of one result along the axis they were taken from
gives ``x`` itself, so a batched gradient loop reads the batched forward loop's
trace without a copy. What the K results feed is batched in turn (`_sink`): K
readers of one Op become the Op vectorised, and a chain of K increments at
constant indices becomes one increment (`_fold_increment_chain`).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np
import pytensor.tensor as pt
from pytensor.tensor.basic import Alloc, AllocEmpty
from pytensor.graph.basic import Apply, Constant, Variable
from pytensor.graph.fg import FunctionGraph
from pytensor.graph.replace import vectorize_graph
from pytensor.graph.traversal import ancestors, apply_ancestors, applys_between
from pytensor.tensor.blockwise import Blockwise
from pytensor.tensor.subtensor import IncSubtensor, Subtensor, get_idx_list
from pytensor.tensor.type import TensorType

from innergraph.core.fold import visible_nodes
from innergraph.core.graph import params
from innergraph.core.instantiate import instantiate
from innergraph.protocol.signature import Signature, Slot, consumers, rebuild
from innergraph.protocol.slots import Meaning
from innergraph.rewriting.merge_loops import loop_merge_key, reads_result_of

__all__ = ["batch_loops"]

#: The axis a slot's argument and result are stacked and sliced on, by meaning
#: (rows first for what is indexed by step).
_AXIS = {
    Meaning.INVARIANT: 0,
    Meaning.CARRY: 0,
    Meaning.SEQUENCE: 1,
    Meaning.TRACE: 1,
    Meaning.BUFFER: 1,
    Meaning.PER_STEP_OUTPUT: 1,
}
_STATES = (Meaning.CARRY, Meaning.TRACE, Meaning.BUFFER)


def _batched_type(t: TensorType, k: int) -> TensorType:
    return TensorType(t.dtype, shape=(k, *t.shape))


def _stacked(args: Sequence[Variable], axis: int) -> Any:
    """``args`` stacked on a new ``axis``, computed batched where they are one computation over slices.

    See `_lifted` and `_repeated`; what cannot be lifted is stacked as it is.
    """
    lifted = _lifted(list(args), depth=_MAX_LIFT_DEPTH)
    if lifted is None:
        return pt.stack(list(args), axis=axis)
    var, batched = lifted
    if not batched:  # one value for all K (a state batched because its step reads a batched param)
        var = _repeated(var, len(args))
    return var if axis == 0 else pt.moveaxis(var, 0, axis)


#: How many Ops deep `_lifted` looks through one computation applied K times.
_MAX_LIFT_DEPTH = 12


def _lifted(args: list[Variable], depth: int) -> tuple[Any, bool] | None:
    """``args`` stacked on a new leading axis without stacking them, or None.

    Returns ``(x, False)`` when the K are one value ``x`` (one variable, equal
    constants, or one Op applied to such values), ``(x, True)`` when ``x`` holds them
    on its leading axis: K constants stacked now; the K slices ``X[..., i]`` of one
    ``X`` on one axis, in any order (``X`` with that axis moved first, permuted when
    the order is not ``0..K-1``); or one Op applied to inputs that are themselves
    lifted (the Op vectorised; refused when that needs a ``Blockwise``). A batched
    gradient loop then reads the batched forward loop's trace through the same
    slicing and reversal, batched, instead of K copies joined.
    """
    first = args[0]
    if _one_value(args):
        return first, False
    if all(isinstance(a, Constant) for a in args):
        return pt.constant(np.stack([a.data for a in args])), True  # type: ignore[attr-defined]
    node = first.owner
    if node is None or depth == 0:
        return None
    if isinstance(node.op, Subtensor):
        sliced = _slices(args)
        if sliced is not None:
            return sliced, True
    if any(a.owner is None or a.owner.op != node.op or len(a.owner.inputs) != len(node.inputs) for a in args):
        return None
    index = node.outputs.index(first)
    inputs = []
    for column in zip(*(a.owner.inputs for a in args), strict=True):
        lifted = _lifted(list(column), depth - 1)
        if lifted is None:
            return None
        inputs.append(lifted)
    if not any(batched for _, batched in inputs):
        return first, False  # K equal computations that merging left apart
    outputs = _vectorized(node, inputs, len(args))
    return None if outputs is None else (outputs[index], True)


def _vectorized(node: Apply, inputs: list[tuple[Any, bool]], k: int) -> list[Any] | None:
    """``node``'s Op over ``inputs`` (``(variable, batched)``: batched ones have K first): its outputs, or None.

    Refused (None) when PyTensor can vectorise the Op only as a ``Blockwise``; an
    (Inc|Set)Subtensor is vectorised here (PyTensor has no rule for it).
    """
    if isinstance(node.op, IncSubtensor):
        new = _inc_subtensor_batched(node, inputs, k)
        return None if new is None else [new]
    placeholders = [v.type() for v in node.inputs]  # the Op alone, so vectorising walks no further
    try:
        outs = node.op.make_node(*placeholders).outputs
        new_outs = vectorize_graph(list(outs), replace=dict(zip(placeholders, (v for v, _ in inputs), strict=True)))
    except (NotImplementedError, TypeError, ValueError):
        return None
    if any(o.owner is not None and isinstance(o.owner.op, Blockwise) for o in new_outs) and not isinstance(node.op, Blockwise):
        return None
    return list(new_outs)


def _inc_subtensor_batched(node: Apply, inputs: list[tuple[Any, bool]], k: int) -> Any:
    """``node``'s (Inc|Set)Subtensor over a batched target or value (PyTensor vectorises it only as a Blockwise)."""
    (x, x_batched), (y, y_batched), *indices = inputs
    if any(batched for _, batched in indices):
        return None
    if not x_batched:
        x = _repeated(x, k)
    idx = get_idx_list([node.inputs[0], *node.inputs[2:]], node.op.idx_list)
    target = x[(slice(None), *idx)]
    if y_batched and y.type.ndim < target.type.ndim:  # keep the batch axis first when y broadcasts
        y = pt.shape_padaxis(y, 1) if y.type.ndim + 1 == target.type.ndim else None
        if y is None:
            return None
    return pt.set_subtensor(target, y) if node.op.set_instead_of_inc else pt.inc_subtensor(target, y)


def _repeated(x: Any, k: int, depth: int = _MAX_LIFT_DEPTH) -> Any:
    """``x`` K times on a new leading axis, with shapes as static as ``x``'s own (JAX needs them concrete).

    An ``Alloc`` (or ``AllocEmpty``) is allocated again with K first, and a
    (Inc)Subtensor of one is that Op over the repeated allocation: the zero
    cotangent buffers a gradient loop starts from cost no copy. Anything else is
    stacked K times.
    """
    node = x.owner
    if node is not None and depth > 0:
        if isinstance(node.op, Alloc):
            return pt.alloc(node.inputs[0], k, *node.inputs[1:])
        if isinstance(node.op, AllocEmpty):
            return node.op(k, *node.inputs)
        if isinstance(node.op, Subtensor):
            idx = get_idx_list(node.inputs, node.op.idx_list)
            return _repeated(node.inputs[0], k, depth - 1)[(slice(None), *idx)]
        if isinstance(node.op, IncSubtensor):
            inputs = [(_repeated(node.inputs[0], k, depth - 1), True), *((v, False) for v in node.inputs[1:])]
            new = _inc_subtensor_batched(node, inputs, k)
            if new is not None:
                return new
    return pt.stack([x] * k)


def _slices(args: Sequence[Variable]) -> Any:
    """The K slices ``args`` of one ``X`` on one axis, at constant indices, as one variable with that axis first.

    Each arg is ``X[a, b, ..., i]``, the same ``a, b, ...`` for all and a constant
    ``i`` on the last indexed axis. The result is ``X[a, b, ..., :]`` with that axis
    moved first: itself when the indices are ``0..K-1`` and it has K of them,
    otherwise indexed by the K indices (one advanced index, which fails as the K
    slices would on an index out of range).
    """
    node = args[0].owner
    assert node is not None
    x = node.inputs[0]
    idx = get_idx_list(node.inputs, node.op.idx_list)
    axis = sum(isinstance(entry, slice) for entry in idx[:-1])  # the axis the last index takes, in X[a, b, ...]
    order = [_slice_index(a, node) for a in args]
    if None in order or isinstance(idx[-1], slice):
        return None
    base = x[(*idx[:-1], slice(None))]
    moved = base if axis == 0 else pt.moveaxis(base, axis, 0)
    if order == list(range(len(args))) and base.type.shape[axis] == len(args):
        return moved
    return moved[np.array(order, dtype="int64")]


def _one_value(args: Sequence[Variable]) -> bool:
    """Whether ``args`` are one variable or equal constants."""
    first = args[0]
    return all(a is first for a in args) or all(isinstance(a, Constant) and a.equals(first) for a in args)


def _slice_index(var: Variable, like: Apply) -> int | None:
    """``i`` when ``var`` is ``like``'s indexing with its last index a constant ``i`` instead, else None."""
    node = var.owner
    if node is None or node.op != like.op or node.inputs[0] is not like.inputs[0]:
        return None
    if not all(_one_value([a, b]) for a, b in zip(node.inputs[1:-1], like.inputs[1:-1], strict=True)):
        return None
    index = node.inputs[-1]
    return int(index.data) if isinstance(index, Constant) else None


def _batchable(sigs: list[Signature]) -> list[Signature]:
    """The largest prefix-greedy set of ``sigs`` (one Op, one set of bodies) no two of which depend on each other."""
    chosen: list[Signature] = []
    for sig in sigs:
        if all(not reads_result_of(sig.node, c.node) and not reads_result_of(c.node, sig.node) for c in chosen):
            chosen.append(sig)
    return chosen


def _group_key(sig: Signature) -> Hashable | None:
    key = loop_merge_key(sig)
    if key is None or sig.is_while:
        return None
    node = sig.node
    return (key, node.op, tuple(sig.header), tuple(sig.form.functions(node)), tuple(v.type for v in node.inputs))


def _batch(fgraph: FunctionGraph, sigs: list[Signature]) -> bool:
    """Replace the loops ``sigs`` by one batched loop; False (nothing changed) when the group is refused."""
    k = len(sigs)
    first = sigs[0]
    meanings = [first.meaning(s) for s in first.slots]
    if any(m not in _AXIS for m in meanings):
        return False
    columns = list(zip(*(sig.slots for sig in sigs), strict=True))  # per slot: its K copies
    for slot in first.slots:
        if any(not isinstance(v.type, TensorType) for v in (*slot.args, *(p for _, p in slot.params))):
            return False

    # Fresh unbatched params and each body's outputs over them (as merge_loops instantiates).
    fresh: dict[tuple[int, Variable], Variable] = {}
    body_outputs: list[dict[Variable, Variable]] = []
    for b, body in enumerate(first.bodies):
        ps: list[Variable] = [t() for t in body.param_types]
        fresh.update(((b, p), q) for p, q in zip(params(body.param_types), ps, strict=True))
        body_outputs.append(dict(zip(body.outputs, instantiate(body, ps), strict=True)))

    def params_of(slot: Slot) -> list[Variable]:
        return [fresh[b, p] for b, p in slot.params]

    def outputs_of(slot: Slot) -> list[Variable]:
        return [body_outputs[b][v] for b, v in slot.outputs]

    batched = [not all(_one_value(col) for col in zip(*(s.args for s in column), strict=True)) for column in columns]
    for j, m in enumerate(meanings):
        if m is Meaning.PER_STEP_OUTPUT and batched[j]:
            return False  # different row counts: not one loop
    while True:  # a state whose next value reads a batched param is batched
        batched_params = {p for j, s in enumerate(first.slots) if batched[j] for p in params_of(s)}
        more = [
            j for j, s in enumerate(first.slots)
            if not batched[j] and meanings[j] in (*_STATES, Meaning.PER_STEP_OUTPUT)
            and batched_params & set(ancestors(outputs_of(s), blockers=[]))
        ]
        if not more:
            break
        for j in more:
            batched[j] = True

    new_params = {p: _batched_type(p.type, k)() for j, s in enumerate(first.slots) if batched[j] for p in params_of(s)}
    olds = [v for s in first.slots for v in outputs_of(s)]
    try:
        vectorized = vectorize_graph(olds, replace=new_params)
    except (NotImplementedError, TypeError, ValueError):
        return False
    inputs = [*fresh.values(), *new_params.values()]
    blockwise = lambda outs: sum(isinstance(n.op, Blockwise) for n in applys_between(inputs, outs))  # noqa: E731
    if blockwise(vectorized) > blockwise(olds):
        return False
    by_old = dict(zip(olds, vectorized, strict=True))

    slots: list[Slot] = []
    for j, slot in enumerate(first.slots):
        axis = _AXIS[meanings[j]]
        slot_params = tuple((b, new_params.get(fresh[b, p], fresh[b, p])) for b, p in slot.params)
        outs: list[Variable] = []
        types: list[Any] = []
        for old, declared in zip(outputs_of(slot), slot.output_types, strict=True):
            new: Any = by_old[old]
            t: Any = _batched_type(declared, k) if batched[j] else declared  # type: ignore[arg-type]
            if batched[j]:
                if new.type.ndim == old.type.ndim:  # reads no batched param: the same value K times
                    new = _repeated(new, k)
            if new.type != t:
                new = pt.specify_shape(new, t.shape)
                if new.type != t:
                    return False
            outs.append(new)
            types.append(t)
        args: tuple[Any, ...] = slot.args
        if batched[j] and meanings[j] is not Meaning.PER_STEP_OUTPUT:
            args = tuple(_stacked([s.args[a] for s in columns[j]], axis) for a in range(len(slot.args)))
        slots.append(
            slot.with_(
                args=args,
                params=slot_params,
                outputs=tuple((b, v) for (b, _), v in zip(slot.outputs, outs, strict=True)),
                output_types=tuple(types),
            )
        )
    try:
        node, mapping = rebuild(first, slots)
    except (TypeError, ValueError):
        return False
    pairs: list[tuple[Variable, Any]] = []
    groups: list[list[Variable]] = []  # each batched result's K slices, every one read
    for j, column in enumerate(columns):
        axis = _AXIS[meanings[j]]
        for r, template in enumerate(first.slots[j].results):
            whole: Any = mapping[template]
            results = [whole[(slice(None),) * axis + (i,)] if batched[j] else whole for i in range(k)]
            read = [(slot.results[r], new) for slot, new in zip(column, results, strict=True) if slot.results[r] in fgraph.clients]
            pairs += read
            if batched[j] and len(read) == k:
                groups.append(results)
    fgraph.replace_all(pairs, reason="batch_loops")
    _sink(fgraph, groups)
    return True


def _fold_increment_chain(fgraph: FunctionGraph, group: list[Variable], nodes: list[Apply], position: int) -> bool:
    """K increments ``acc[c_i] += slice_i``, one after the other, as one: ``acc[c] += X`` (True if done).

    The gradient of K groups' parameters indexed from one vector (``omega[g]``) adds
    each group's share at its index, a chain of K ``IncSubtensor``: with the K shares
    the slices of one batched result, it is one increment at the K (distinct,
    constant) indices. Each position is added to once, as in the chain.
    """
    if position != 1 or not isinstance(nodes[0].op, IncSubtensor) or nodes[0].op.set_instead_of_inc:
        return False
    if len(nodes[0].op.idx_list) != 1 or len(nodes[0].inputs) != 3:
        return False
    outputs = {n.outputs[0]: n for n in nodes}
    firsts = [n for n in nodes if n.inputs[0] not in outputs]
    if len(firsts) != 1:
        return False
    chain, node = [], firsts[0]
    while True:
        chain.append(node)
        readers = fgraph.clients[node.outputs[0]]
        nexts = [n for n, p in readers if isinstance(n, Apply) and n in nodes and p == 0]
        if not nexts:
            break
        if len(readers) != 1:
            return False  # an intermediate sum is read elsewhere
        node = nexts[0]
    indices = [n.inputs[2] for n in chain]
    if len(chain) != len(nodes) or not all(isinstance(i, Constant) for i in indices):
        return False
    where = [int(i.data) for i in indices]  # type: ignore[attr-defined]
    if len(set(where)) != len(where):
        return False
    lifted = _lifted([n.inputs[1] for n in chain], _MAX_LIFT_DEPTH)
    if lifted is None or not lifted[1]:
        return False
    acc: Any = chain[0].inputs[0]
    new = pt.inc_subtensor(acc[np.array(where, dtype="int64")], lifted[0])
    if new.type != chain[-1].outputs[0].type:
        return False
    fgraph.replace_all([(chain[-1].outputs[0], new)], reason="batch_loops")
    return True


def _stands_in(old: Variable, new: Variable) -> bool:
    """Whether ``new`` can replace ``old`` in a graph (what ``FunctionGraph.replace`` accepts, converted or not)."""
    try:
        old.type.filter_variable(new)  # converting as `FunctionGraph.replace` does
    except TypeError:
        return False
    return True


def _sink(fgraph: FunctionGraph, groups: list[list[Variable]]) -> None:
    """Batch what the K loops' results feed: K nodes of one Op reading slice ``i`` at one position become one.

    The readers of a batched loop's K slices are, in a grouped model, K copies of one
    computation (each group's likelihood, each group's share of the gradient). Where
    each slice ``i`` has a reader of one Op at one input position, whose other inputs
    lift (`_lifted`) and none of which depends on another, they become the Op
    vectorised once, read through K new slices; those are batched in turn, until the
    readers differ (a sum over the K terms, a chain of updates). The outer graph then
    holds each group's computation once, not K times.
    """
    work = list(groups)
    while work:
        group = work.pop(0)
        if any(v not in fgraph.clients for v in group):
            continue
        for client, position in list(fgraph.clients[group[0]]):
            if not isinstance(client, Apply) or client not in fgraph.apply_nodes:
                continue
            nodes = [client]
            for v in group[1:]:
                match = next(
                    (n for n, p in fgraph.clients[v] if isinstance(n, Apply) and p == position and n.op == client.op
                     and len(n.inputs) == len(client.inputs) and n not in nodes),
                    None,
                )
                if match is None:
                    break
                nodes.append(match)
            if len(nodes) != len(group):
                continue
            if set(apply_ancestors([i for n in nodes for i in n.inputs])) & set(nodes):
                if _fold_increment_chain(fgraph, group, nodes, position):
                    break
                continue  # one reads another's result
            lifted = [_lifted(list(column), _MAX_LIFT_DEPTH) for column in zip(*(n.inputs for n in nodes), strict=True)]
            if any(entry is None for entry in lifted):
                continue
            outputs = _vectorized(client, [entry for entry in lifted if entry is not None], len(group))
            if outputs is None:
                continue
            pairs, produced = [], []
            for o, batched in enumerate(outputs):
                slices = [batched[i] for i in range(len(group))]
                pairs += [(n.outputs[o], sl) for n, sl in zip(nodes, slices, strict=True) if n.outputs[o] in fgraph.clients]
                produced.append(slices)
            if not all(_stands_in(old, new) for old, new in pairs):
                continue  # e.g. K ScalarFromTensor: the vectorised form's slices are tensors, not scalars
            fgraph.replace_all(pairs, reason="batch_loops")
            work += [slices for slices in produced if all(sl in fgraph.clients for sl in slices)]
            work.append(group)  # its other readers
            break


def batch_loops(fgraph: FunctionGraph) -> int:
    """Batch each group of loops of ``fgraph`` that run one step body (module docstring); return how many groups."""
    batched = 0
    while True:
        groups: dict[Hashable, list[Signature]] = {}
        visible = visible_nodes(fgraph)
        for sig in consumers(fgraph):
            key = _group_key(sig) if sig.node in visible else None
            if key is not None:
                groups.setdefault(key, []).append(sig)
        for sigs in groups.values():
            chosen = _batchable(sigs) if len(sigs) > 1 else []
            if len(chosen) > 1 and _batch(fgraph, chosen):
                batched += 1
                break
        else:
            return batched
