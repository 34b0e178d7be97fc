"""Loop work computed outside the loop, for all steps at once (vectorized).

Terms
-----
after-loop value
    For a param of a loop body, an outer variable that holds its value at every
    step, leading axis = step: a sequence's rows ``seq[:n_steps]`` (the sequence
    itself when it is that slice already, as ``pytensor.scan`` passes it), a
    non-sequence's argument (the same at every step, no step axis), and a mit-mot
    input tap whose slot no later step overwrites (tap ``k`` of a state whose
    output taps are all ``> k`` reads row ``t + k - min(in_taps)`` of the state's
    final buffer).
row-wise work
    Body nodes that are ``Elemwise`` or ``DimShuffle``, read a sequence's row
    (directly or through other row-wise work) and otherwise only non-sequences
    and constants. Computed outside over all rows at once, they are one large
    operation instead of ``n_steps`` small ones.

Three rewrites. The last two are the in-graph counterparts of PyTensor's push-out
passes (``scan_eqopt1``, which finds no native Scan once the loops are lifted;
`innergraph.rewriting.licm` is the third):

* `push_out_per_step_outputs`: a nit-sot output (one value per step, fed back
  nowhere) that reads a mit-mot tap and otherwise only after-loop values and
  constants is computed after the loop; its state's buffer is then read by the
  outer graph instead of being an unused result. PyTensor has no such pass.
* `push_out_sequence_work` (PyTensor's ``scan_push_out_seq``): a loop whose every
  live result is a nit-sot of row-wise work, or of a value that is the same
  every step (an ``alloc`` of it), is replaced by those results computed
  outside. In any other loop, the row-wise work the rest of the body reads
  becomes new sequences; the outputs stay, as PyTensor's pass leaves them (its
  tests check the loop it leaves).
* `push_out_dot_sums`: an untraced state updated as ``s + dot(a, b)``, where
  ``a`` and ``b`` are matrix rows of sequences and ``s`` is read nowhere else,
  is the initial value plus one ``dot`` of the concatenated rows (PyTensor's
  ``scan_push_out_add``); one updated as ``s + r``, ``r`` a row of a sequence
  (what remains once the sequence push-out moved a term's work out), is the
  initial value plus the sequence's sum. `innergraph.rewriting.untrace` makes
  such states untraced when only their last step is read.

Outputs computed outside are vectorized with `pytensor.graph.replace.vectorize_graph`,
once per body: when several loops share the body, the vectorized work is one call
body applied to each loop's values (`innergraph.rewriting.outlined`), so it is
fused and converted once, not once per loop.
A buffer longer than the step count is padded with zeros, which is what the loop
leaves in rows it never writes; an output whose vectorized form needs a
``Blockwise`` (an op with no batched form of its own) stays in the loop. Loops
with an ``until`` condition are left alone: they may stop before the last
row, and work computed for rows they never reach could fail or be wasted.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping
from typing import Any, cast

import numpy as np
import pytensor.tensor as pt
from pytensor.graph.basic import Apply, Constant, Variable
from pytensor.graph.fg import FunctionGraph
from pytensor.graph.replace import vectorize_graph
from pytensor.scalar import Add, Mul
from pytensor.tensor.basic import ScalarFromTensor
from pytensor.tensor.blockwise import Blockwise
from pytensor.tensor.elemwise import DimShuffle, Elemwise
from pytensor.tensor.math import Dot
from pytensor.tensor.subtensor import Subtensor, set_subtensor

from innergraph.core.fold import always_computed
from innergraph.core.graph import is_function, scope_leaves, scope_toposort
from innergraph.core.instantiate import substitute
from innergraph.rewriting.outer import rows_of
from innergraph.rewriting.outlined import outline, readers
from innergraph.rewriting.push_out_cost import pays
from innergraph.protocol.signature import Signature, Slot, consumers, replace_consumer
from innergraph.protocol.slots import Meaning

__all__ = ["fold_constant_work", "push_out_dot_sums", "push_out_per_step_outputs", "push_out_sequence_work"]


class AfterLoop(Mapping[Variable, Variable]):
    """One loop's params -> their after-loop values, each built on first use.

    Most loops have nothing to push out, and building ``seq[:n_steps]`` for every
    sequence of every loop in every round would cost more than the analysis.
    """

    def __init__(self, sig: Signature, *, mit_mot: bool = True, shared: bool = False):
        self._shared = shared
        self._n_steps: Any = sig.header[0]
        self._recipes: dict[Variable, tuple[Any, int | None]] = {}  # param -> (outer variable, first row, or None: itself)
        self._built: dict[Variable, Variable] = {}
        for slot in sig.slots:
            meaning = sig.meaning(slot)
            if meaning is Meaning.INVARIANT or (meaning is Meaning.SEQUENCE and _first_rows_already(slot.args[0], self._n_steps)):
                self._recipes[slot.params[0][1]] = (slot.args[0], None)  # the value itself
            elif meaning is Meaning.SEQUENCE:
                self._recipes[slot.params[0][1]] = (slot.args[0], 0)
            elif meaning is Meaning.BUFFER and mit_mot:
                low = min(slot.in_taps)
                for tap, (_, p) in zip(slot.in_taps, slot.params, strict=True):
                    if all(o > tap for o in slot.out_taps):
                        self._recipes[p] = (slot.results[0], tap - low)

    def __getitem__(self, param: Variable) -> Variable:
        if param not in self._built:
            var, start = self._recipes[param]
            self._built[param] = _rows(var, start, self._n_steps)
        return self._built[param]

    def __iter__(self) -> Iterator[Variable]:
        return iter(self._recipes)

    def __len__(self) -> int:
        return len(self._recipes)

    def __contains__(self, param: object) -> bool:
        return param in self._recipes

    def vectorized(self, outputs: list[Variable], templates: dict[Any, Any]) -> list[Variable] | None:
        """``vectorize_graph(outputs, self)``, made once per body and argument types.

        The first loop of a body vectorizes ``outputs`` over its own outer variables
        and step count, and the result is kept as the template (in ``templates``)
        for later loops of the body with other variables of the same types: they
        copy that graph over their own, which is much cheaper than vectorizing
        again (each vectorized node is made anew). The first loop pays no copy
        (most bodies are vectorized for one loop only). When the loop's body is
        shared with other loops, every loop calls one body made of that graph
        instead (`innergraph.rewriting.outlined`). None when the vectorized graph
        needs a ``Blockwise`` (an op with no batched form of its own).
        """
        leaves = [p for p in scope_leaves(outputs) if p in self._recipes]
        if self._shared:
            return self._outlined(outputs, leaves, templates)
        outer = [self._recipes[p] for p in leaves]
        key = (tuple(outputs), tuple((p, _template_key(var), start) for p, (var, start) in zip(leaves, outer, strict=True)), _template_key(self._n_steps))
        if key in templates:
            if templates[key] is None:
                return None
            firsts, n, template = templates[key]
            bind = {a: var for a, (var, _) in zip(firsts, outer, strict=True) if a is not var}
            if n is not self._n_steps:
                bind[n] = self._n_steps
            return substitute(template, bind) if bind else list(template)
        # constants stay themselves, so that the broadcasts of them vectorizing makes fold here
        # (left for PyTensor's second Scan pass to fold, they make it run again over the whole graph)
        vectorized = vectorize_graph(outputs, {p: _rows(var, start, self._n_steps) for p, (var, start) in zip(leaves, outer, strict=True)})
        reads = {var for var, _ in outer} | {self._n_steps}  # the walks stay out of the outer graph
        if any(isinstance(node.op, Blockwise) for node in scope_toposort(vectorized, stop=reads)):
            templates[key] = None
            return None
        folded = _fold_broadcast_constants(vectorized, stop=reads)
        bound = [var for var, _ in outer if not isinstance(var, Constant)]
        bound += [] if isinstance(self._n_steps, Constant) else [self._n_steps]
        if len(set(bound)) == len(bound):  # each variable stands for one thing: a later loop can rebind them
            templates[key] = (tuple(var for var, _ in outer), self._n_steps, folded)
        return folded

    def _outlined(self, outputs: list[Variable], leaves: list[Variable], templates: dict[Any, Any]) -> list[Variable] | None:
        """`vectorized` for a loop whose body other loops share: one call body, applied to this loop's rows.

        The body's params are the after-loop values themselves (``seq[:n_steps]`` is
        built in the outer graph, where the shape feature can tell it is ``seq``).
        """
        rows = [self[p] for p in leaves]
        key = ("outline", tuple(outputs), tuple(r.type for r in rows))
        if key not in templates:
            stand_ins = [r.type() for r in rows]
            vectorized = vectorize_graph(outputs, dict(zip(leaves, stand_ins, strict=True)))
            blockwise = any(isinstance(node.op, Blockwise) for node in scope_toposort(vectorized))
            templates[key] = None if blockwise else outline(_fold_broadcast_constants(vectorized), stand_ins)
        return None if templates[key] is None else templates[key].apply(rows)


def _fold_broadcast_constants(outputs: list[Variable], stop: Collection[Variable] = ()) -> list[Variable]:
    """``outputs`` with each ``DimShuffle`` or ``Elemwise`` of constants alone (vectorizing broadcasts them) a constant.

    Canonicalize has run by the time loops are pushed out of; left alone, these
    nodes make PyTensor's second Scan pass fold them and then run again over
    every loop. The walk stops at ``stop`` (outer variables the outputs read).
    """
    folded: dict[Variable, Variable] = {}
    for node in scope_toposort(outputs, stop=stop):
        inputs: list[Any] = [folded.get(v, v) for v in node.inputs]
        if not isinstance(node.op, DimShuffle | Elemwise) or len(node.outputs) != 1 or not all(isinstance(v, Constant) for v in inputs):
            continue
        out: list[list[Any]] = [[None]]
        try:
            node.op.perform(node, [v.data for v in inputs], out)
        except Exception:  # noqa: BLE001 -- folding is only a saving: the node stays for constant folding
            continue
        result: Any = node.outputs[0]
        folded[result] = result.type.filter_variable(pt.constant(np.asarray(out[0][0], dtype=result.dtype), dtype=result.dtype))
    return substitute(outputs, folded) if folded else outputs


def _template_key(var: Variable) -> Any:
    """What a template depends on of ``var``: a constant's identity, else its type."""
    return ("constant", var) if isinstance(var, Constant) else var.type


def fold_constant_work(outputs: list[Variable], stop: Collection[Variable]) -> list[Variable]:
    """``outputs`` with their elementwise work on constants alone folded, walking no further than ``stop``.

    For values a rewrite builds in the outer graph after canonicalize (the loop
    invariants `innergraph.rewriting.licm` hoists when an argument is a constant).
    """
    return _fold_broadcast_constants(outputs, stop)


def _rows(var: Any, start: int | None, n_steps: Any) -> Variable:
    """Rows ``start, ..., start + n_steps - 1`` of ``var`` (``var`` itself if ``start`` is None).

    A constant step count is used as a number: a tensor one would leave a
    ``ScalarFromTensor`` of a constant in the graph, for a later pass to fold.
    """
    if isinstance(n_steps, Constant):
        n_steps = int(n_steps.data)
        if isinstance(var, Constant) and start is not None:  # rows of a constant: a constant
            return rows_of(var, slice(start, start + n_steps))
    return var if start is None else var[:n_steps] if start == 0 else var[start : start + n_steps]


def _first_rows_already(var: Variable, n_steps: Variable) -> bool:
    """Whether ``var`` is ``x[:n_steps]``, as ``pytensor.scan`` passes its sequences."""
    node = var.owner
    if node is None or not isinstance(node.op, Subtensor) or len(node.op.idx_list) != 1:
        return False
    (index,) = node.op.idx_list
    if not isinstance(index, slice) or index.start is not None or index.step is not None or index.stop is None:
        return False
    stop = node.inputs[1]
    return stop is n_steps or (stop.owner is not None and isinstance(stop.owner.op, ScalarFromTensor) and stop.owner.inputs[0] is n_steps)


def _all_steps(out: Variable, values: AfterLoop, n_steps: Any, length: Any, templates: dict[Any, Any]) -> Variable | None:
    """``out`` for every step, as the loop's nit-sot buffer of ``length`` rows holds it, or None."""
    if any(is_function(v) or not (isinstance(v, Constant) or v in values) for v in scope_leaves([out])):
        return None
    vectorized = values.vectorized([out], templates)
    if vectorized is None:
        return None
    new: Any = vectorized[0]
    if new.ndim == out.type.ndim:  # read nothing per-step: the same value every step
        new = pt.alloc(new, n_steps, *(new.shape[i] for i in range(new.ndim)))
    if length is not n_steps:  # rows the loop never writes stay zero
        new = set_subtensor(pt.zeros((length, *(new.shape[i] for i in range(1, new.ndim))), dtype=new.dtype)[:n_steps], new)
    return new


def _pushed_outputs(
    fgraph: FunctionGraph, sig: Signature, values: AfterLoop, row_wise: bool, templates: dict[Any, Any]
) -> dict[Variable, Variable]:
    """Result -> its value computed after the loop, for the nit-sots this rewrite moves.

    With ``row_wise`` false: the outputs that read a mit-mot tap. With ``row_wise``
    true: the outputs that are row-wise work or the same every step, and only
    when every live result of the loop is one of them (the whole loop goes).
    """
    state_taps = {p for s in sig.having(Meaning.BUFFER) for _, p in s.params if p in values}
    live = [s for s in sig.slots if s.results and fgraph.clients.get(s.results[0])]
    per_step = set(sig.having(Meaning.PER_STEP_OUTPUT))
    if (not row_wise and not state_taps) or (row_wise and any(s not in per_step for s in live)):
        return {}
    pushed: dict[Variable, Variable] = {}
    for slot in live:
        if slot not in per_step:
            continue
        ((_, out),) = slot.outputs
        if bool(state_taps & set(scope_leaves([out]))) == row_wise:
            continue
        if row_wise and not all(isinstance(n.op, Elemwise | DimShuffle) for n in scope_toposort([out], stop=set(values))):
            continue
        new = _all_steps(out, values, sig.header[0], slot.args[0], templates)
        if new is not None:
            pushed[slot.results[0]] = slot.results[0].type.filter_variable(new)
    return pushed if not row_wise or len(pushed) == len(live) else {}


def _push_out(fgraph: FunctionGraph, sig: Signature, pushed: dict[Variable, Variable], reason: str) -> None:
    kept = [s for s in sig.slots if not (sig.meaning(s) is Meaning.PER_STEP_OUTPUT and s.results[0] in pushed)]
    replace_consumer(fgraph, sig, kept, forwarded=pushed, reason=reason)


def _applies(sig: Signature) -> bool:
    """The push-outs move work across steps: a counted, single-body loop with no condition."""
    return sig.capabilities.counted and sig.n_bodies == 1 and not sig.is_while


def push_out_per_step_outputs(fgraph: FunctionGraph) -> int:
    """Compute nit-sot outputs reading final mit-mot taps after the loop; return how many loops changed."""
    changed = 0
    templates: dict[Any, Any] = {}  # one vectorization per body (`AfterLoop.vectorized`)
    for sig in consumers(fgraph):
        if not _applies(sig):
            continue
        pushed = _pushed_outputs(fgraph, sig, AfterLoop(sig), row_wise=False, templates=templates)
        if pushed:
            _push_out(fgraph, sig, pushed, "push_out_per_step_outputs")
            changed += 1
    return changed


def _row_wise_targets(outputs: list[Variable], rows: set[Variable], invariant: set[Variable]) -> tuple[list[Variable], set[Variable]]:
    """The largest row-wise subexpressions that the rest of the body (or an output) reads.

    Also returns the rows the body still reads once those are params. ``invariant``
    holds the non-sequence params; nodes computing from those and constants alone
    count as invariant too (they are `hoist_invariants`' to move).
    """
    eager = always_computed(outputs)
    invariant = set(invariant)
    row_wise: set[Variable] = set()
    users: list[Apply] = []
    order = scope_toposort(outputs)
    for node in order:
        known = all(v in rows or v in row_wise or v in invariant or isinstance(v, Constant) for v in node.inputs)
        if not known or node not in eager or any(is_function(v) for v in node.inputs):
            users.append(node)
        elif not any(v in rows or v in row_wise for v in node.inputs):
            invariant.update(node.outputs)
            users.append(node)
        elif isinstance(node.op, Elemwise | DimShuffle):
            row_wise.update(node.outputs)
        else:
            users.append(node)
    used = {v for n in users for v in n.inputs} | set(outputs)
    return [v for n in order for v in n.outputs if v in row_wise and v in used], rows & used


def push_out_sequence_work(fgraph: FunctionGraph) -> int:
    """Move the row-wise work of every loop out of it; return how many loops changed.

    A loop whose every live result is a nit-sot of row-wise work (or one the
    same every step) is replaced by those results computed outside; in any
    other loop, the row-wise work the rest of the body reads becomes new
    sequences.
    """
    changed = 0
    placeholders: dict[Variable, Variable] = {}  # one per target: loops sharing a body share the new one
    analysed: dict[Any, tuple[list[Variable], set[Variable]]] = {}  # ... and one analysis
    templates: dict[Any, Any] = {}  # ... and one vectorization (`AfterLoop.vectorized`)
    paying: dict[Any, bool] = {}  # ... and one cost decision
    sharing = readers(fgraph)  # counted before any loop is rebuilt
    for sig in consumers(fgraph):
        sequence = sig.form.kind_for(Meaning.SEQUENCE, (0,))
        if not _applies(sig) or sequence is None:
            continue
        values = AfterLoop(sig, mit_mot=False, shared=sharing[sig.node.inputs[0]] > 1)
        whole_loop = _pushed_outputs(fgraph, sig, values, row_wise=True, templates=templates)
        if whole_loop:
            _push_out(fgraph, sig, whole_loop, "push_out_sequence_work")
            changed += 1
            continue
        rows = {p for s in sig.having(Meaning.SEQUENCE) for _, p in s.params}
        outputs = [v for s in sig.slots for _, v in s.outputs]
        key = (tuple(outputs), frozenset(rows), frozenset(values))
        if key not in analysed:
            analysed[key] = _row_wise_targets(outputs, rows, set(values) - rows)
        targets, still_read = analysed[key]
        if not targets:
            continue
        if key not in paying:  # the work moved out against the reads added (`innergraph.rewriting.push_out_cost`)
            paying[key] = pays(targets, stop=set(values), dropped=list(rows - still_read))  # a sum: order-free
        if not paying[key]:
            continue
        outer = values.vectorized(targets, templates)
        if outer is None:  # the targets did not vectorize (found by the differential test): leave the loop
            continue
        new = [placeholders.setdefault(t, t.type()) for t in targets]
        kept = [s for s in sig.slots if sig.meaning(s) is not Meaning.SEQUENCE or s.params[0][1] in still_read]
        slots = [*kept, *(Slot(sequence, (o,), ((0, p),)) for o, p in zip(outer, new, strict=True))]
        replace_consumer(fgraph, sig, slots, replace={0: dict(zip(targets, new, strict=True))}, reason="push_out_sequence_work")
        changed += 1
    return changed


def _summed_term(out: Variable, state: Variable, rows: Collection[Variable], product_rows: Collection[Variable]) -> Callable[[AfterLoop], Variable] | None:
    """What ``state`` accumulates after the loop, when ``out`` is ``state`` plus a term of rows alone; else None.

    Two terms: ``dot(a, b)`` of matrix rows (the sum over steps is one ``dot`` of the
    flattened sequences, PyTensor's ``scan_push_out_add``), and a row of the state's
    rank of a sequence of *products* (`products`; the sum of the sequence over
    steps): what is left of a ``dot`` once canonicalize has made a ``dot`` of a
    column and a row their product (PyTensor 3.3) and the sequence push-out has moved
    it out of the body. A state that accumulates a plain sequence (``acc + x_t``) is
    left as PyTensor leaves it: vanilla keeps that loop, and summing it at once
    would add its terms in another order than vanilla does.
    """
    node = out.owner
    if node is None or not isinstance(node.op, Elemwise) or not isinstance(node.op.scalar_op, Add) or len(node.inputs) != 2:
        return None
    if state not in node.inputs:
        return None
    term = node.inputs[1 - node.inputs.index(state)]
    if term in product_rows and term is not state and term.type.ndim == state.type.ndim:
        return lambda values: cast(Any, values[term]).sum(axis=0)
    dot = term.owner
    if dot is None or not isinstance(dot.op, Dot) or not all(v in rows and v.type.ndim == 2 for v in dot.inputs):
        return None
    a_row, b_row = dot.inputs

    def dot_of_sequences(values: AfterLoop) -> Variable:
        a: Any = values[a_row]  # (steps, m, k)
        b: Any = values[b_row]  # (steps, k, n)
        flat_a = a.dimshuffle(1, 0, 2).reshape((a.shape[1], -1))
        flat_b = b.reshape((-1, b.shape[2]))
        return cast(Variable, pt.dot(flat_a, flat_b))

    return dot_of_sequences


def products(sig: Signature) -> set[Variable]:
    """The params of ``sig``'s one-tap sequences whose outer sequence is an elementwise product (through views)."""
    found = set()
    for slot in sig.having(Meaning.SEQUENCE):
        if len(slot.params) != 1:
            continue
        outer: Variable = slot.args[0]
        while outer.owner is not None and isinstance(outer.owner.op, Subtensor | DimShuffle):
            outer = outer.owner.inputs[0]
        if outer.owner is not None and isinstance(outer.owner.op, Elemwise) and isinstance(outer.owner.op.scalar_op, Mul):
            found.add(slot.params[0][1])
    return found


def _reads(outputs: list[Variable]) -> dict[Variable, int]:
    """How many times the body's nodes and outputs read each variable."""
    reads: dict[Variable, int] = {}
    for v in [*(v for node in scope_toposort(outputs) for v in node.inputs), *outputs]:
        reads[v] = reads.get(v, 0) + 1
    return reads


def push_out_dot_sums(fgraph: FunctionGraph) -> int:
    """Replace untraced accumulators of a term of rows (``s + dot(a, b)``, ``s + r`` with ``r`` a row of products) by their sum after the loop.

    Returns how many loops changed.
    """
    changed = 0
    for sig in consumers(fgraph):
        if not _applies(sig):
            continue
        rows = {p for s in sig.having(Meaning.SEQUENCE) for _, p in s.params}
        product_rows = products(sig)
        found: dict[Slot, Callable[[AfterLoop], Variable]] = {}
        for slot in sig.having(Meaning.CARRY):
            summed = _summed_term(slot.outputs[0][1], slot.params[0][1], rows, product_rows) if len(slot.params) == 1 else None
            if summed is not None:
                found[slot] = summed
        if not found:
            continue
        reads = _reads([v for s in sig.slots for _, v in s.outputs])
        values = AfterLoop(sig, mit_mot=False)
        finals: dict[Variable, Variable] = {}
        for slot, summed in found.items():
            # the state is read by its own update only, and the update is the state's next value only
            # (another output reading the running sum needs every step's value)
            if reads[slot.params[0][1]] != 1 or reads[slot.outputs[0][1]] != 1:
                continue
            finals[slot.results[0]] = slot.results[0].type.filter_variable(cast(Any, slot.args[0]) + summed(values))
        if finals:
            kept = [s for s in sig.slots if not (sig.meaning(s) is Meaning.CARRY and s.results[0] in finals)]
            replace_consumer(fgraph, sig, kept, forwarded=finals, reason="push_out_dot_sums")
            changed += 1
    return changed
