"""Contiguous constants: copy every non-contiguous array constant of the outer graph.

Constant folding of a strided slice of a constant (``y[::-1]``, which PyTensor's
Scan gradient takes of an observed series) makes a constant whose data is a
*view* with negative or non-unit strides. The Numba backend embeds a constant
array in the compiled code only if it is C- or F-contiguous (and at most 1 MB);
any other becomes a "dynamic global" (its address in this process), and Numba
refuses to cache a function with one. The whole outer function is then compiled
again in every process, warm disk cache or not (PyMC's CustomDist GARCH, issue 21:
1.5 s instead of 0.02 s at the first call).

innergraph's rewrites move more work onto such constants than vanilla PyTensor
does (pushed-out loop-invariant work folds to constants that feed outer nodes),
so this pass, run after everything that folds constants, replaces each
non-contiguous array constant by a contiguous copy of equal type and values. It
is tagged ``innergraph`` (``mode.excluding("innergraph")`` leaves vanilla as it
is). Native Scan inner graphs are left alone: their constants are the Op's. It
copies only when the graph is compiled for Numba: the other linkers read a strided
constant as it is, and a copy would only cost memory.

A constant over `NUMBA_EMBED_LIMIT` bytes is left as it is: Numba makes any array
above that size a dynamic global, contiguous or not, so a copy would not make the
function cacheable. It would only cost memory and time. A ``np.broadcast_to`` view,
for instance, would be materialized in full (a PyMC ``Mixture`` with broadcast weights).
"""

from __future__ import annotations

from typing import TypeGuard

import numpy as np
from pytensor.graph.basic import Variable
from pytensor.graph.fg import FunctionGraph
from pytensor.tensor.variable import TensorConstant

__all__ = ["NUMBA_EMBED_LIMIT", "contiguous_constants", "is_strided_constant"]

#: Numba embeds a constant array in the compiled code only up to this many bytes
#: (``numba.core.base.BaseContext.make_constant_array``'s ``size_limit``).
NUMBA_EMBED_LIMIT = 10**6


def is_strided_constant(var: Variable) -> bool:
    """Whether ``var`` is an array constant whose data is neither C- nor F-contiguous."""
    if not isinstance(var, TensorConstant):
        return False
    data = var.data
    return isinstance(data, np.ndarray) and not (data.flags.c_contiguous or data.flags.f_contiguous)


def _copied(var: Variable) -> TypeGuard[TensorConstant]:
    """Whether `contiguous_constants` replaces ``var``: strided, and small enough for Numba to embed."""
    return isinstance(var, TensorConstant) and is_strided_constant(var) and var.data.nbytes <= NUMBA_EMBED_LIMIT


def contiguous_constants(fgraph: FunctionGraph) -> int:
    """Replace the non-contiguous array constants of ``fgraph`` by contiguous copies; return how many.

    Constants over `NUMBA_EMBED_LIMIT` bytes are not copied, and nothing is unless
    the graph is compiled for Numba (see the module docstring).
    """
    from innergraph.dispatch import compiling_for_numba

    if not compiling_for_numba(fgraph):
        return 0
    if not any(_copied(v) for node in fgraph.apply_nodes for v in node.inputs) and not any(map(_copied, fgraph.outputs)):
        return 0  # a look at the node set, not a sort of it
    found: dict[TensorConstant, None] = {}  # ordered: the replacements are made in topological order
    for node in fgraph.toposort():
        found.update((v, None) for v in node.inputs if _copied(v))
    found.update((v, None) for v in fgraph.outputs if _copied(v))
    if not found:
        return 0
    replacements = [(v, TensorConstant(v.type, np.ascontiguousarray(v.data), name=v.name)) for v in found]
    fgraph.replace_all(replacements, reason="innergraph_contiguous_constants")
    return len(replacements)
