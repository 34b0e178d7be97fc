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
is). Native Scan inner graphs are left alone: their constants are the Op's.
"""

from __future__ import annotations

import numpy as np
from pytensor.graph.basic import Variable
from pytensor.graph.fg import FunctionGraph
from pytensor.tensor.variable import TensorConstant

__all__ = ["contiguous_constants", "is_strided_constant"]


def is_strided_constant(var: Variable) -> bool:
    """Whether ``var`` is an array constant whose data is neither C- nor F-contiguous."""
    if not isinstance(var, TensorConstant):
        return False
    data = var.data
    return isinstance(data, np.ndarray) and not (data.flags.c_contiguous or data.flags.f_contiguous)


def contiguous_constants(fgraph: FunctionGraph) -> int:
    """Replace the non-contiguous array constants of ``fgraph`` by contiguous copies; return how many."""
    found: dict[TensorConstant, None] = {}  # ordered: the replacements are made in topological order
    for node in fgraph.toposort():
        found.update((v, None) for v in node.inputs if isinstance(v, TensorConstant) and is_strided_constant(v))
    found.update((v, None) for v in fgraph.outputs if isinstance(v, TensorConstant) and is_strided_constant(v))
    if not found:
        return 0
    replacements = [(v, TensorConstant(v.type, np.ascontiguousarray(v.data), name=v.name)) for v in found]
    fgraph.replace_all(replacements, reason="innergraph_contiguous_constants")
    return len(replacements)
