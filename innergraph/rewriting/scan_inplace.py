"""PyTensor's in-place pass for native Scans, with the decision taken once for the Scans that share an Op.

Terms
-----
copies
    Native Scan nodes of one graph that apply the very same Op instance: the K
    loops `innergraph.rewriting.outline_loops` inlined back from one call body, or
    the loops of one merged body after lowering.
candidates
    The outputs of a Scan that may be computed in place on their initial-state
    input, as PyTensor's ``ScanInplaceOptimizer`` chooses them: every recurrent
    (and untraced) state whose input a fresh allocation computes, or that nothing
    else destroys already.
protected
    An input of the graph that the function must not overwrite (PyTensor's
    ``Supervisor``), and every variable that is a view of one. Making a Scan destroy
    it always fails validation.

PyTensor's ``scan_make_inplace`` (50.5) tries each Scan on its own: it clones the
Op (a Scan's clone copies its inner graph), builds a node and validates the whole
graph, and when that fails (a state starting from an input of the function, the
commonest case) tries once more per output. For K copies that is 2K clones and
2K validations of a graph that grows with K: the largest per-loop cost left once
the loops are outlined (``design/shared-bodies.md``).

`SharedScanInplace` takes its place while innergraph is installed. For graphs
innergraph's pipeline did not lift it *is* PyTensor's pass. For lifted graphs it
takes the same decisions with less work:

* a candidate that is protected is dropped before any attempt (its attempt cannot
  succeed), so a Scan whose states all start from inputs costs no clone and no
  validation;
* the copies of one Op with the same candidates are made in place together: the
  in-place Op is built once, every copy gets a node of it, and one validation
  checks them all. Validity is monotone (fewer destroyers never make a valid
  graph invalid), so when the batch is valid, each copy's own decision is valid,
  as PyTensor's one-by-one pass would have found;
* when the batch is not valid, each copy is tried on its own as PyTensor does,
  with the in-place Op of each decision built once (`_OpCache`).
"""

from __future__ import annotations

from collections.abc import Sequence
from copy import copy as shallow_copy
from itertools import chain
from typing import Any

from pytensor.compile.aliasing import Supervisor
from pytensor.compile.ops import deep_copy_op
from pytensor.graph.basic import Apply, Constant, Variable
from pytensor.graph.fg import FunctionGraph
from pytensor.graph.utils import InconsistencyError
from pytensor.scan.op import Scan as NativeScan
from pytensor.scan.rewriting.inplace import ScanInplaceOptimizer

from innergraph.rewriting.lift import was_lifted
from innergraph.rewriting.stand_in import StandIn

__all__ = ["SharedScanInplace"]


class SharedScanInplace(ScanInplaceOptimizer):
    """``scan_make_inplace`` deciding once per group of copies in graphs innergraph lifted."""

    def apply(self, fgraph: FunctionGraph) -> None:
        if not was_lifted(fgraph):
            super().apply(fgraph)
            return
        _Pass(self, fgraph).run()


class _OpCache:
    """The in-place Op of each (Op, outputs made in place) decision, built once."""

    def __init__(self) -> None:
        self._ops: dict[tuple[int, tuple[int, ...]], NativeScan] = {}
        self._keep: list[NativeScan] = []

    def get(self, op: NativeScan, output_indices: Sequence[int]) -> NativeScan:
        key = (id(op), tuple(output_indices))
        new_op = self._ops.get(key)
        if new_op is None:
            new_op = self._ops[key] = _inplace_op(op, output_indices)
            self._keep.append(op)  # the id stays this Op's while the pass runs
        return new_op


def _tap_outputs(op: NativeScan) -> int:
    info = op.info
    return int(info.n_mit_mot + info.n_mit_sot + info.n_sit_sot)


def _untraced_start(op: NativeScan) -> int:
    return _tap_outputs(op) + int(op.info.n_nit_sot)


def _inplace_op(op: NativeScan, output_indices: Sequence[int]) -> NativeScan:
    """``op`` computing ``output_indices`` in place on their initial-state inputs (PyTensor's construction)."""
    n_tap_outs, untraced_start = _tap_outputs(op), _untraced_start(op)
    new_op = shallow_copy(op)  # a Scan is immutable (its ``clone`` is itself): a shallow copy gets its own maps
    new_op._fn = None  # the compiled inner function depends on the destroy map
    destroy_map = op.destroy_map.copy()
    for out_idx in output_indices:
        if out_idx < n_tap_outs:
            destroy_map[out_idx] = [out_idx + 1 + op.info.n_seqs]
        else:
            destroy_map[out_idx] = [op.untraced_sit_sot_arg_offset + out_idx - untraced_start]
    new_op.destroy_map = destroy_map
    if hasattr(new_op, "view_map"):
        new_op.view_map = {k: v for k, v in new_op.view_map.items() if k not in destroy_map}
    return new_op


class _Pass:
    """One run of the pass over a lifted graph."""

    def __init__(self, rewriter: ScanInplaceOptimizer, fgraph: FunctionGraph):
        self.rewriter = rewriter
        self.fgraph = fgraph
        self.ops = _OpCache()
        self.protected: set[Variable] = set(chain.from_iterable(f.protected for f in fgraph._features if isinstance(f, Supervisor)))

    def run(self) -> None:
        order = [node for node in reversed(self.fgraph.toposort()) if isinstance(node.op, NativeScan)]
        copies: dict[int, list[Apply]] = {}
        for node in order:
            copies.setdefault(id(node.op), []).append(node)
        done: set[int] = set()
        for node in order:
            if id(node.op) in done:
                continue
            done.add(id(node.op))
            group = [n for n in copies[id(node.op)] if n in self.fgraph.apply_nodes]
            if len(group) > 1 and self._together(group):
                continue
            for copy in group:
                self._alone(copy)

    # --- PyTensor's choice of candidates ------------------------------------------------

    def _input_index(self, op: NativeScan, out_idx: int) -> int:
        if out_idx < _tap_outputs(op):
            return int(1 + op.info.n_seqs + out_idx)
        return int(op.untraced_sit_sot_arg_offset + out_idx - _untraced_start(op))

    def _candidates(self, node: Apply) -> list[int]:
        """PyTensor's candidate outputs of ``node``, without those whose input is protected."""
        op = node.op
        untraced_start = _untraced_start(op)
        possible = list(range(_tap_outputs(op))) + list(range(untraced_start, untraced_start + op.info.n_untraced_sit_sot))
        result = []
        for out_idx in possible:
            inp = node.inputs[self._input_index(op, out_idx)]
            if self._protected(inp):
                continue
            if inp.owner is not None and isinstance(inp.owner.op, self.rewriter.alloc_ops):
                result.append(out_idx)
            elif not self._destroyed(inp):
                result.append(out_idx)
        return result

    def _protected(self, variable: Variable) -> bool:
        """Whether ``variable`` is a protected input or a view of one (destroying it cannot be valid)."""
        if isinstance(variable, Constant) or not self.protected:
            return False
        view_i = getattr(self.fgraph, "destroy_handler").view_i
        seen = variable
        while True:
            if seen in self.protected:
                return True
            if seen not in view_i:
                return False
            seen = view_i[seen]

    def _destroyed(self, variable: Variable) -> bool:
        """Whether a client of ``variable`` already destroys it (PyTensor then leaves it alone)."""
        for client, _ in self.fgraph.clients[variable]:
            destroy_map = getattr(client.op, "destroy_map", None)
            if destroy_map and any(client.inputs[i] is variable for i in chain.from_iterable(destroy_map.values())):
                return True
        return False

    # --- the attempts --------------------------------------------------------------------

    def _new_node(self, node: Apply, output_indices: Sequence[int]) -> Apply:
        """A node of the in-place Op over ``node``'s inputs, fresh allocations duplicated as PyTensor does."""
        op = node.op
        ls_begin = node.inputs[: 1 + op.info.n_seqs]
        ls = op.outer_mitmot(node.inputs) + op.outer_mitsot(node.inputs) + op.outer_sitsot(node.inputs)
        ls_end = op.outer_untraced_sit_sot(node.inputs) + op.outer_nitsot(node.inputs) + op.outer_non_seqs(node.inputs)
        for i, inp in enumerate(ls):
            if len(self.fgraph.clients[inp]) > 1 and inp.owner is not None and isinstance(inp.owner.op, self.rewriter.alloc_ops):
                ls[i] = inp.owner.op.make_node(*inp.owner.inputs).outputs[0]
        for i in range(len(ls)):
            if ls[i] in ls[:i]:
                ls[i] = deep_copy_op(ls[i])
        new_op = self.ops.get(op, output_indices)
        result: Apply = new_op.make_node(*ls_begin, *ls, *ls_end)
        return result

    def _attempt(self, nodes: Sequence[Apply], output_indices: Sequence[int]) -> list[Apply] | None:
        """Replace ``nodes`` by in-place nodes in one validated step; the new nodes, or None."""
        new_nodes = [self._new_node(node, output_indices) for node in nodes]
        replacements: list[tuple[Any, Any]] = [pair for old, new in zip(nodes, new_nodes) for pair in zip(old.outputs, new.outputs, strict=True)]
        try:
            self.fgraph.replace_all_validate_remove(replacements, remove=list(nodes), reason="scan_make_inplace")
        except InconsistencyError:
            return None
        return new_nodes

    def _together(self, group: Sequence[Apply]) -> bool:
        """Make every copy of one Op in place at once; whether that was done (or nothing was to do)."""
        candidates = [self._candidates(node) for node in group]
        if any(c != candidates[0] for c in candidates):
            return False
        if not candidates[0]:
            return True
        return self._attempt(group, candidates[0]) is not None

    def _alone(self, node: Apply) -> None:
        """PyTensor's decision for one Scan: all candidates at once, else one by one."""
        candidates = self._candidates(node)
        if not candidates or self._attempt([node], candidates) is not None:
            return
        for out_idx in candidates:
            new = self._attempt([node], [out_idx])
            if new is not None:
                node = new[0]


#: PyTensor's name of the pass replaced.
PASS_NAME = "scan_make_inplace"

#: PyTensor's ``scan_make_inplace`` in ``optdb``, and its stand-in.
STAND_IN = StandIn(PASS_NAME, ScanInplaceOptimizer, SharedScanInplace)


def replace_pytensor_pass() -> None:
    """Put a `SharedScanInplace` in ``optdb`` in place of PyTensor's ``scan_make_inplace`` (same name, tags, position)."""
    STAND_IN.replace()


def restore_pytensor_pass() -> None:
    """Undo `replace_pytensor_pass`: PyTensor's own rewriter object back in every tag."""
    STAND_IN.restore()
