"""Numba conversions of `SpecifyShape` and `Split` whose error messages are formatted in Python, not in compiled code.

Terms
-----
formatted in compiled code
    PyTensor's Numba conversions of `SpecifyShape` and `Split` raise with an f-string
    of run-time numbers (``f"... has shape {x.shape[0]}, expected {shape_0.item()}."``).
    Numba compiles such a message as code: integer formatting, string concatenation and
    their helpers, a dozen functions. A fresh process pays that the first time any
    function needs it, about 5 s on this machine (2026-11-30, Numba 0.68: a
    two-dimensional ``SpecifyShape`` alone, 6.9 s with the f-string against 1.4-1.5 s
    without, in a fresh process); PyMC's graphs hold ``SpecifyShape`` nodes, so every
    cold start of a model pays it (`design/benchmarks.md`, "Error messages formatted in
    Python").
formatted in Python
    The compiled code raises `ShapeMismatch` (or `SplitSizesMismatch`) with the numbers
    as the exception's arguments: Numba boxes them when the exception leaves compiled
    code, and the class's ``__init__`` writes PyTensor's own message from them. The
    message is PyTensor's, word for word; the exception is an `AssertionError`
    (`ValueError` for `Split`), as PyTensor's is.

The conversions are registered for `numba_funcify_and_cache_key` by records that
``innergraph.uninstall()`` reverts; their cache keys are their own (`MESSAGES_VERSION`),
so vanilla's entries and these never serve each other.
"""

from __future__ import annotations

from hashlib import sha256
from textwrap import dedent
from typing import Any, cast

import numpy as np
from pytensor.link.numba.cache import compile_numba_function_src
from pytensor.link.numba.dispatch import basic as numba_basic
from pytensor.link.numba.dispatch.basic import numba_funcify_and_cache_key
from pytensor.tensor.basic import Split
from pytensor.tensor.shape import SpecifyShape
from pytensor.tensor.type_other import NoneTypeT

from innergraph.core.hooks import DispatchPatch, apply_late

__all__ = ["MESSAGES_VERSION", "ShapeMismatch", "SplitSizesMismatch", "funcify_specify_shape", "funcify_split"]

#: The version of the code this module writes, part of its cache keys: raised when it changes.
MESSAGES_VERSION = 1


class ShapeMismatch(AssertionError):
    """`SpecifyShape`'s error under Numba: PyTensor's message, written from the numbers the compiled code passes."""

    def __init__(self, dim: int, actual: int, expected: int) -> None:
        super().__init__(f"SpecifyShape: dim {dim} of input has shape {actual}, expected {expected}.")


class SplitSizesMismatch(ValueError):
    """`Split`'s error when the sizes do not sum to the axis' length: PyTensor's message, written in Python."""

    def __init__(self, total: int, expected: int) -> None:
        super().__init__(f"Split sizes sum to {total}; expected {expected}")


def _key(*parts: Any) -> str:
    return sha256(str(("innergraph_messages", MESSAGES_VERSION, *parts)).encode()).hexdigest()


def funcify_specify_shape(op: SpecifyShape, node: Any, **kwargs: Any) -> tuple[Any, str]:
    """PyTensor's Numba `SpecifyShape` (the same checks, in the same order), raising `ShapeMismatch`."""
    checked = [not isinstance(v.type, NoneTypeT) for v in node.inputs[1:]]
    names = [f"shape_{i}" for i in range(len(checked))]
    checks = "".join(
        f"    if x.shape[{i}] != {name}:\n        raise ShapeMismatch({i}, x.shape[{i}], {name}.item())\n"
        for i, (name, check) in enumerate(zip(names, checked, strict=True))
        if check
    )
    src = f"def specify_shape(x, {', '.join(names)}):\n{checks}    return x\n"
    fn = compile_numba_function_src(src, "specify_shape", {"ShapeMismatch": ShapeMismatch, "__name__": __name__})
    return numba_basic.numba_njit(fn), _key("SpecifyShape", tuple(checked))


def funcify_split(op: Split, node: Any = None, **kwargs: Any) -> tuple[Any, str]:
    """PyTensor's Numba `Split` (the same checks and outputs), raising `SplitSizesMismatch` when the sizes' sum is not the axis' length."""
    n_splits = cast(int, op.len_splits)  # a Split always has its number of outputs
    outputs = ", ".join(f"outputs[{i}]" for i in range(n_splits)) + ("," if n_splits == 1 else "")
    src = dedent(
        f"""\
        def split(x, sizes):
            if len(sizes) != n_splits:
                raise ValueError("Length of splits is not equal to n_splits")
            if (sizes < 0).any():
                raise ValueError("Split sizes cannot be negative")
            split_indices = np.cumsum(sizes)
            if split_indices[-1] != x.shape[axis]:
                raise SplitSizesMismatch(split_indices[-1], x.shape[axis])
            outputs = np.split(x, split_indices[:-1], axis=axis)
            return ({outputs})
        """
    )
    env = {"np": np, "axis": op.axis, "n_splits": n_splits, "SplitSizesMismatch": SplitSizesMismatch, "__name__": __name__}
    fn = compile_numba_function_src(src, "split", env)
    return numba_basic.numba_njit(fn), _key("Split", op.axis, n_splits)


apply_late(DispatchPatch(numba_funcify_and_cache_key, SpecifyShape, funcify_specify_shape))
apply_late(DispatchPatch(numba_funcify_and_cache_key, Split, funcify_split))
