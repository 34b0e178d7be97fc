"""Printing patch: `pytensor.dprint` shows every folded body once, params named.

Unfolded bodies already print inline, under their inner-graph node (PyTensor's
``···`` marks a repeat, so each prints once). Folded bodies — what a compiled
function holds — are constants, which `debugprint` would show as an opaque
value. The patched `debugprint` appends a ``Bodies:`` section listing each
distinct folded body once, labelled with the ``[id X]`` the main listing gave its
constant, its params printed as ``p0``, ``p1``... with their types.
"""

from __future__ import annotations

import io
import sys
from typing import Any

import pytensor.printing
from pytensor.graph.basic import Variable
from pytensor.graph.fg import FunctionGraph

from innergraph.core.fold import folded_bodies
from innergraph.core.instantiate import instantiate
from innergraph.core.hooks import Patch, installed

__all__ = ["bodies_section", "debugprint", "patches"]

_original_debugprint = pytensor.printing.debugprint


def debugprint(graph_like: Any, *args: Any, file: Any = None, **kwargs: Any) -> Any:
    """`pytensor.printing.debugprint`, followed by a ``Bodies:`` section when needed."""
    if file == "rich":
        return _original_debugprint(graph_like, *args, **{**kwargs, "file": file})
    ids: dict[Any, str] | None = kwargs.pop("used_ids", None)
    if ids is None:  # the caller's dict, even empty, is filled (PyTensor's get_node_by_id reads it)
        ids = {}
    buffer = io.StringIO()
    _original_debugprint(graph_like, *args, **{**kwargs, "file": buffer, "used_ids": ids})
    text = buffer.getvalue() + bodies_section(graph_like, ids)
    if file == "str":
        return text
    stream = sys.stdout if file is None else file
    stream.write(text)
    return stream


def _outputs_of(graph_like: Any) -> list[Variable]:
    items = graph_like if isinstance(graph_like, list | tuple) else [graph_like]
    outputs: list[Variable] = []
    for item in items:
        if hasattr(item, "maker"):
            outputs += item.maker.fgraph.outputs
        elif isinstance(item, FunctionGraph):
            outputs += item.outputs
        elif isinstance(item, Variable):
            outputs.append(item)
        elif hasattr(item, "outputs"):
            outputs += item.outputs
    return outputs


_printing_body = [False]


def bodies_section(graph_like: Any, ids: dict[Any, str]) -> str:
    """The ``Bodies:`` section of ``graph_like``'s listing (a patched PyTensor's `debugprint` appends it).

    ``ids`` are the ``[id X]`` labels the main listing gave; empty when no folded body shows
    (or innergraph is not installed, or this is the listing of a body itself).
    """
    if not installed() or _printing_body[0]:
        return ""
    bodies = folded_bodies(_outputs_of(graph_like))
    if not bodies:
        return ""
    _printing_body[0] = True
    try:
        return _listing(bodies, ids)
    finally:
        _printing_body[0] = False


def _listing(bodies: Any, ids: dict[Any, str]) -> str:
    lines = ["", "Bodies:", ""]
    for constant, body in bodies:
        named = [t(name=f"p{i}") for i, t in enumerate(body.param_types)]
        signature = ", ".join(f"{p.name}: {p.type}" for p in named)
        lines.append(f"Body {ids.get(constant, '')} ({signature})".replace("  ", " "))
        printed = str(_original_debugprint(instantiate(body, named), file="str", used_ids=ids))
        lines += _indent_outputs(printed.rstrip("\n").split("\n"))
        lines.append("")
    return "\n".join(lines)


def _indent_outputs(lines: list[str]) -> list[str]:
    """Mark each top-level line (a body output) with ``←``, as PyTensor does for inner graphs."""
    result, in_outputs = [], True
    for line in lines:
        in_outputs = in_outputs and line != "Inner graphs:"
        top_level = in_outputs and line and not line[0].isspace()
        result.append((" ← " if top_level else "   ") + line if line else "")
    return result


def patches() -> list[Patch]:
    import pytensor

    return [
        Patch(pytensor.printing, "debugprint", debugprint),
        Patch(pytensor, "dprint", debugprint),
    ]
