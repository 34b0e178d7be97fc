"""DebugMode patch: an in-place rewrite the graph refused is not checked.

``DebugMode`` evaluates every variable the graph ever held and checks every
replacement a rewrite made: the replacement's type must fit the replaced one's
(``assert r.type.is_super(new_r.type)`` in ``_find_bad_optimizations``) and its
value must equal it. An in-place rewrite whose change the graph refuses (the
destroy handler finds a conflict) is *reverted* by PyTensor's history feature, and
the revert is recorded as one more replacement, reason ``("Revert", rewrite)``:
the original variable put back in place of the in-place one. That record then
has DebugMode check the refused in-place node, which is wrong in two ways:

* the node was refused *because* running it in place is unsound here — say it
  would destroy a buffer another input of the same node reads. DebugMode runs it
  anyway, on one copy per input variable, and finds a value that never reaches a
  result (AR(2)'s gradient: a merged Scan made in place, then reverted, gave -9.96
  against 1.89);
* the node was made afresh, so its type can be narrower than the original's stale
  one (``(5,)`` against ``(?,)``), and the type assertion fails with a bare
  ``AssertionError``. PyTensor's #1669 graph (second derivative of a scan) does this
  with PyTensor alone, innergraph uninstalled.

This patch leaves out the records of a *refused in-place variable* — one a revert
took out of the graph, computed by a node that destroys one of its inputs: the
revert itself, and the rewrite that had put it in. The original variable is the
one the graph keeps, and it is checked against its own replacements as before;
every other record is checked unchanged.

``pytensor.compile.debug.debugmode`` loads on demand (``mode="DebugMode"``); the
patched `Linker.schedule` imports this module when a DebugMode linker schedules,
which applies the patch (`innergraph.patching.apply_late`).
"""

from __future__ import annotations

from typing import Any

from pytensor.compile.debug import debugmode

from innergraph.core.hooks import Patch, apply_late, installed

__all__ = ["find_bad_optimizations", "without_refused_in_place"]

_original = debugmode._find_bad_optimizations


def find_bad_optimizations(order: list[Any], reasons: dict[Any, list[Any]], r_vals: dict[Any, Any]) -> None:
    """DebugMode's check of every replacement, without those of in-place rewrites the graph refused."""
    _original(order, without_refused_in_place(order, reasons), r_vals)


def without_refused_in_place(order: list[Any], reasons: dict[Any, list[Any]]) -> dict[Any, list[Any]]:
    """``reasons`` without the records of refused in-place variables (a patched DebugMode's check calls it first)."""
    if not installed():
        return reasons
    outputs = [out for node in order for out in node.outputs]
    refused = {r for out in outputs for why, r, _, _ in reasons[out] if _revert_of_in_place(why, r)}
    return {out: [] if out in refused else [t for t in reasons[out] if t[1] not in refused] for out in outputs}


def _revert_of_in_place(reason: str, reverted: Any) -> bool:
    """Whether a record is the revert of an in-place rewrite: ``reverted`` is the refused in-place variable."""
    node = reverted.owner
    return reason.startswith("('Revert',") and node is not None and bool(node.op.destroy_map)


apply_late(Patch(debugmode, "_find_bad_optimizations", find_bad_optimizations))
