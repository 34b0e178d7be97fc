"""Assertions on alpha-equivalence, with failure messages that show where bodies differ.

Two bodies are *alpha-equivalent* when they compute the same graph up to the names
of their params, i.e. when their canonical encodings are equal (`Body.key`).
"""

from __future__ import annotations

from typing import Any

from pytensor.graph.basic import Variable

from innergraph.core.build import Closure
from innergraph.core.graph import body_of
from innergraph.core.instantiate import instantiate
from innergraph.core.types import Body

__all__ = ["alpha_equivalent", "assert_alpha_equivalent", "assert_not_alpha_equivalent"]


def _body(value: Variable | Body | Closure) -> Body:
    return body_of(value.function if isinstance(value, Closure) else value)


def alpha_equivalent(a: Variable | Body | Closure, b: Variable | Body | Closure) -> bool:
    """Whether two functions (variables, bodies or closures) are alpha-equivalent."""
    return _body(a) == _body(b)


def assert_alpha_equivalent(a: Variable | Body | Closure, b: Variable | Body | Closure) -> None:
    """Fail, showing both bodies and their first difference, unless ``a`` and ``b`` are alpha-equivalent."""
    if not alpha_equivalent(a, b):
        raise AssertionError("the bodies are not alpha-equivalent\n" + describe_difference(_body(a), _body(b)))


def assert_not_alpha_equivalent(a: Variable | Body | Closure, b: Variable | Body | Closure) -> None:
    """Fail, showing both bodies, if ``a`` and ``b`` are alpha-equivalent."""
    if alpha_equivalent(a, b):
        raise AssertionError("the bodies are alpha-equivalent\n" + _side_by_side(_body(a), _body(b)))


def describe_difference(a: Body, b: Body) -> str:
    """The first point where two bodies' canonical encodings differ, then both bodies side by side."""
    return f"{_first_difference(a.key(), b.key())}\n\n{_side_by_side(a, b)}"


def _first_difference(ka: Any, kb: Any) -> str:
    (ta, nodes_a, outs_a), (tb, nodes_b, outs_b) = ka, kb
    if ta != tb:
        return f"first difference: the signatures, {ta} vs {tb}"
    for k, (na, nb) in enumerate(zip(nodes_a, nodes_b)):
        if na != nb:
            return f"first difference: node {k} (in topological order), {_node(na)} vs {_node(nb)}"
    if len(nodes_a) != len(nodes_b):
        return f"first difference: {len(nodes_a)} nodes vs {len(nodes_b)} nodes"
    return f"first difference: the outputs, {outs_a} vs {outs_b}"


def _node(encoded: Any) -> str:
    op, refs, _ = encoded
    return f"{op}({', '.join(_ref(r) for r in refs)})"


def _ref(ref: Any) -> str:
    tag = ref[0]
    if tag == "p":
        return f"p{ref[1]}"
    if tag == "n":
        return f"node{ref[1]}.{ref[2]}"
    if tag == "c":
        return f"constant {ref[1][1]!r}"
    return "nested body"


def _printed(body: Body) -> list[str]:
    from pytensor.printing import debugprint

    named = [t(name=f"p{i}") for i, t in enumerate(body.param_types)]
    return str(debugprint(instantiate(body, named), file="str", print_type=False)).rstrip("\n").split("\n")


def _side_by_side(a: Body, b: Body) -> str:
    left, right = _printed(a), _printed(b)
    width = max(len(line) for line in left + ["first body"]) + 4
    rows = [f"{'first body':<{width}}second body", f"{'-' * (width - 4):<{width}}{'-' * 11}"]
    for k in range(max(len(left), len(right))):
        l_line = left[k] if k < len(left) else ""
        r_line = right[k] if k < len(right) else ""
        rows.append(f"{l_line:<{width}}{r_line}")
    return "\n".join(rows)
