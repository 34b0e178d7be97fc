"""Numba conversions of `Alloc` of a 0-d value and of a 1-d `SortOp` and `ArgSortOp` that assign no array to a slice.

Terms
-----
slice assignment of an array
    ``res[...] = val`` or ``result[:, i] = a`` with an array on the right. Numba checks at
    run time that the shapes agree and, when they do not, raises a message it formats from
    the shapes (``numba.np.arrayobj.raise_with_shape_context``): integer formatting,
    string joining and concatenation, about twenty compiled functions of Numba's string
    code. A fresh process pays for compiling them the first time any function needs them
    (about 5 s on this machine, 2026-12-01: an `Alloc` of a 0-d view into a 3-d array, a
    cold compile directory, 6.8 s against 1.6-2.0 s for the same function without it),
    and LLVM optimises that code again inside every function that links it.
    ``design/benchmarks.md``, "Slice assignments without a shape check", has the
    measurements.
the two sources
    On pymc-extras' SARIMAX (its cold start at 0.62x vanilla's before this module), the
    only conversions that still linked Numba's string code were PyTensor's `Alloc` of a
    0-d value of layout ``A`` (``res[...] = val``: a fill that cannot mismatch, checked
    anyway) and its `ArgSortOp` (``np.swapaxes``, whose implementation with axes copies
    through a slice assignment, then one slice assignment per sorted line), which LU
    decompositions' pivots reach, in the model's function and in an `OpFromGraph` body.
    PyTensor's `SortOp` swaps axes the same way.

What this module registers, while innergraph is installed, for `numba_funcify_and_cache_key`:

- `funcify_alloc`: for a 0-d value, PyTensor's code with the fill written
  ``res[...] = val.item()``: a scalar on the right, which Numba fills without a shape check.
  The value is the same element, the output the same dtype (an `Alloc`'s output has its
  value's dtype), so every element is the same bits. ``.item()`` takes both a 0-d array and
  a scalar, which Numba may hand the conversion for a 0-d value (PyTensor's comment on
  its own fill). Any other value is PyTensor's conversion.
- `funcify_argsort`: for a 1-d input and a kind Numba sorts by (``quicksort``,
  ``mergesort``), ``np.argsort(x, kind=kind)``: what PyTensor's loop computes for its only
  line (``np.swapaxes`` of a 1-d array over axis 0 is the array itself), by the same Numba
  function, without the copies. Any other input is PyTensor's conversion, with its warning
  for another kind.
- `funcify_sort`: for a 1-d input and the kind ``quicksort``, ``np.sort(x)``: what PyTensor's
  ``np.sort`` of the array swapped with itself computes. Any other input is PyTensor's
  conversion (which warns for any other kind and sorts by quicksort).

Their cache keys are their own (`SLICES_VERSION`), so vanilla's entries and these never serve
each other; ``innergraph.uninstall()`` reverts the three registrations.
"""

from __future__ import annotations

from hashlib import sha256
from typing import Any

import numpy as np
from pytensor.link.numba.cache import compile_numba_function_src
from pytensor.link.numba.dispatch import basic as numba_basic
from pytensor.link.numba.dispatch import tensor_basic as numba_tensor_basic
from pytensor.link.numba.dispatch.basic import numba_funcify_and_cache_key
from pytensor.tensor.basic import Alloc
from pytensor.tensor.sort import ArgSortOp, SortOp

from innergraph.core.hooks import DispatchPatch, apply_late, original

__all__ = ["SLICES_VERSION", "alloc_source", "funcify_alloc", "funcify_argsort", "funcify_sort"]

#: The version of the code this module writes, part of its cache keys: raised when it changes.
SLICES_VERSION = 1

#: The kinds Numba's ``np.argsort`` implements (PyTensor's conversion warns and sorts any other by quicksort).
NUMBA_SORT_KINDS = ("quicksort", "mergesort")


#: PyTensor's conversion of `Alloc`, registered for the class itself (a patched PyTensor keeps it as
#: ``_numba_funcify_Alloc_base`` and delegates to `funcify_alloc`).
_pytensors_alloc = original(numba_tensor_basic, "numba_funcify_Alloc")


def _key(*parts: Any) -> str:
    return sha256(str(("innergraph_slices", SLICES_VERSION, *parts)).encode()).hexdigest()


def _jitted(src: str, name: str) -> Any:
    """PyTensor's Numba function of the source ``src`` defining ``name`` (with ``np`` in its globals)."""
    return numba_basic.numba_njit(compile_numba_function_src(src, name, {"np": np, "__name__": __name__}))


def alloc_source(out_ndim: int, dtype: str) -> str:
    """The source of `funcify_alloc`'s function for a 0-d value filling ``out_ndim`` dimensions of ``dtype``."""
    shapes = [f"sh{i}" for i in range(out_ndim)]
    items = "".join(f"    {name}_item = {name}.item()\n" for name in shapes)
    shape = "(" + "".join(f"{name}_item, " for name in shapes) + ")"
    return (
        f"def alloc(val{''.join(', ' + name for name in shapes)}):\n"
        f"{items}"
        f"    res = np.empty({shape}, dtype=np.{dtype})\n"
        "    res[...] = val.item()\n"
        "    return res\n"
    )


def funcify_alloc(op: Alloc, node: Any, **kwargs: Any) -> tuple[Any, str | None]:
    """An `Alloc` of a 0-d value filled by its element (module docstring); any other, PyTensor's conversion."""
    val = node.inputs[0]
    if val.type.ndim != 0:
        return _pytensors_alloc(op, node, **kwargs)
    out_ndim = len(node.inputs) - 1
    return _jitted(alloc_source(out_ndim, val.type.dtype), "alloc"), _key("Alloc", out_ndim, val.type.dtype)


def funcify_argsort(op: ArgSortOp, node: Any, **kwargs: Any) -> tuple[Any, str | None]:
    """A 1-d `ArgSortOp` as one ``np.argsort`` (module docstring); any other, PyTensor's conversion."""
    if node.inputs[0].type.ndim != 1 or op.kind not in NUMBA_SORT_KINDS:
        return _ARGSORT.original(op, node, **kwargs)
    return _jitted(f"def argsort(x):\n    return np.argsort(x, kind={op.kind!r})\n", "argsort"), _key("ArgSortOp", op.kind)


def funcify_sort(op: SortOp, node: Any, **kwargs: Any) -> tuple[Any, str | None]:
    """A 1-d quicksort `SortOp` as one ``np.sort`` (module docstring); any other, PyTensor's conversion."""
    if node.inputs[0].type.ndim != 1 or op.kind != "quicksort":
        return _SORT.original(op, node, **kwargs)
    return _jitted("def sort(x):\n    return np.sort(x)\n", "sort"), _key("SortOp")


_ALLOC = DispatchPatch(numba_funcify_and_cache_key, Alloc, funcify_alloc)
_ARGSORT = DispatchPatch(numba_funcify_and_cache_key, ArgSortOp, funcify_argsort)
_SORT = DispatchPatch(numba_funcify_and_cache_key, SortOp, funcify_sort)
apply_late(_ALLOC)
apply_late(_ARGSORT)
apply_late(_SORT)
