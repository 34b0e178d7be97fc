"""Skip the walking rewrites a graph cannot trigger: those whose tracked Ops it lacks.

Terms
-----
tracks
    The Op classes, Op instances or `OpPattern`\\ s a node rewriter declares it
    applies to (``NodeRewriter.tracks()``). PyTensor's equilibrium and Op-key
    rewriters hand a node rewriter only the nodes it tracks, so a node rewriter
    never changes any other node.
walking member
    A `WalkingGraphRewriter` in a `SequentialGraphRewriter`: it visits every node
    and applies one node rewriter. When no node of the graph has a tracked Op it
    can change nothing, yet it costs a toposort and an updater attached and
    detached: 0.02-0.05 ms per pass on a body of a few nodes. PyTensor's in-place
    passes for one Op class (``InplaceGraphOptimizer``) are guarded the same way.

A body's late passes (in-place, the backend's) are about twenty; most of them track
Ops a given body does not contain (``IncSubtensor``, ``RandomVariable``, Gemm,
typed lists, ...). `skipping_untracked` wraps each such member in a guard
(`UnlessUntracked`) that looks for a tracked node when the member's turn comes:
after the members before it ran, so a node one of them introduced is seen.
"""

from __future__ import annotations

import sys
from typing import Any, TextIO

from pytensor.graph.fg import FunctionGraph
from pytensor.graph.op import Op
from pytensor.graph.rewriting.basic import GraphRewriter, SequentialGraphRewriter, WalkingGraphRewriter

from innergraph.core.compat import InplaceGraphOptimizer

__all__ = ["UnlessUntracked", "skipping_untracked", "tracked_classes"]

#: id of a sequence -> (that sequence, its guarded copy).
_guarded: dict[int, tuple[SequentialGraphRewriter, SequentialGraphRewriter]] = {}


def tracked_classes(rewriter: Any) -> tuple[type, ...] | None:
    """The Op classes a member can change, or ``None`` if it may change any node.

    For a walking member, an Op instance tracked stands for its class, an
    `OpPattern` for its Op type. PyTensor's in-place passes of one Op class
    (``inplace_elemwise``, ``blockwise_inplace``) visit only nodes of that class.
    """
    if InplaceGraphOptimizer is not None and isinstance(rewriter, InplaceGraphOptimizer):
        return (rewriter.op,)
    if not isinstance(rewriter, WalkingGraphRewriter) or rewriter.node_rewriter is None:
        return None
    tracks = rewriter.node_rewriter.tracks()
    if not tracks:
        return None
    classes: list[type] = []
    for track in tracks:
        if isinstance(track, type):
            classes.append(track)
        elif isinstance(track, Op):
            classes.append(type(track))
        elif isinstance(getattr(track, "op_type", None), type | tuple):  # an OpPattern
            op_type = track.op_type
            classes.extend(op_type if isinstance(op_type, tuple) else (op_type,))
        else:
            return None
    return tuple(classes)


class UnlessUntracked(GraphRewriter):
    """Apply ``member`` only if some node of the graph has an Op of one of ``classes``.

    Its profile is ``(member, the member's profile)`` when the member ran and
    ``None`` (nothing to print) when it was skipped.
    """

    def __init__(self, member: GraphRewriter, classes: tuple[type, ...]):
        self.member = member
        self.classes = classes
        self.name = getattr(member, "name", None)

    def add_requirements(self, fgraph: FunctionGraph) -> None:
        self.member.add_requirements(fgraph)

    def apply(self, fgraph: FunctionGraph) -> Any:
        if any(isinstance(node.op, self.classes) for node in fgraph.apply_nodes):
            return self.member, self.member.apply(fgraph)
        return None

    @classmethod
    def print_profile(cls, stream: TextIO, prof: Any, level: int = 0) -> None:
        member, member_prof = prof
        if member_prof:
            member.print_profile(stream, member_prof, level)

    def print_summary(self, stream: TextIO = sys.stdout, level: int = 0, depth: int = -1) -> None:
        self.member.print_summary(stream, level, depth)


def skipping_untracked(rewriter: SequentialGraphRewriter) -> SequentialGraphRewriter:
    """``rewriter`` with each member of known tracks guarded by `UnlessUntracked` (made once per ``rewriter``).

    Over any graph it changes exactly what ``rewriter`` changes.
    """
    cached = _guarded.get(id(rewriter))
    if cached is None or cached[0] is not rewriter:
        members = []
        for member in rewriter.data:
            classes = tracked_classes(member)
            members.append(member if classes is None else UnlessUntracked(member, classes))
        guarded = SequentialGraphRewriter(*members, failure_callback=rewriter.failure_callback)
        guarded.name = getattr(rewriter, "name", None)
        cached = _guarded[id(rewriter)] = (rewriter, guarded)
    return cached[1]
