"""Gradient patch: a Scan's pullback goes through `innergraph.checkpoint` when a policy applies.

Replaces PyTensor's ``Scan.pullback`` by a function that asks the node's checkpoint
policy (`innergraph.checkpoint.policy_of`) first: with no policy, or for a Scan the
segmented form does not handle, it is PyTensor's own pullback, unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pytensor.graph.basic import Variable
from pytensor.scan.op import Scan as NativeScan

from innergraph.patching import Patch

__all__ = ["patches"]

_original = vars(NativeScan)["pullback"]


def pullback(self: NativeScan, inputs: Sequence[Variable], outs: Sequence[Variable], cotangents: Sequence[Variable]) -> Any:
    from innergraph import checkpoint

    node = outs[0].owner
    policy = checkpoint.policy_of(node) if node is not None else None
    if policy is not None:
        grads = checkpoint.checkpointed_pullback(node, cotangents, policy)
        if grads is not None:
            return grads
    return _original(self, inputs, outs, cotangents)


def patches() -> list[Patch]:
    return [Patch(NativeScan, "pullback", pullback)]
