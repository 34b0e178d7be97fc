"""Gradient patch: a Scan's pullback goes through `innergraph.ops.checkpoint` when a policy applies.

Replaces PyTensor's ``Scan.pullback`` by a function that asks the node's checkpoint
policy (`innergraph.ops.checkpoint.policy_of`) first: with no policy, or for a Scan the
segmented form does not handle, it is PyTensor's own pullback, unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pytensor.graph.basic import Variable
from pytensor.scan.op import Scan as NativeScan

from innergraph.core.hooks import Patch, installed
from innergraph.ops import checkpoint

__all__ = ["checkpointed_pullback", "patches", "pullback"]

_original = vars(NativeScan)["pullback"]


def pullback(self: NativeScan, inputs: Sequence[Variable], outs: Sequence[Variable], dC_douts: Sequence[Variable]) -> Any:
    """`Scan.pullback` with PyTensor's signature (``dC_douts``: the cotangents), checkpointed where a policy applies."""
    grads = checkpointed_pullback(outs, dC_douts)
    return grads if grads is not None else _original(self, inputs, outs, dC_douts)


def checkpointed_pullback(outs: Sequence[Variable], cotangents: Sequence[Variable]) -> Any:
    """The checkpointed gradients of the Scan computing ``outs``, or None for PyTensor's own pullback.

    A patched PyTensor's ``Scan.pullback`` calls it first.
    """
    node = outs[0].owner
    if node is None or not installed():
        return None

    policy = checkpoint.policy_of(node)
    if policy is not None:
        return checkpoint.checkpointed_pullback(node, cotangents, policy)
    return None


def patches() -> list[Patch]:
    return [Patch(NativeScan, "pullback", pullback)]
