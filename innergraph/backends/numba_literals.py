"""``ord`` of a one-character string literal typed as its code point, so that no string code is compiled for it.

Terms
-----
string code
    Numba's ``ord`` takes a unicode string: it calls the string's length and reads the
    code point at index 0 through the helpers of Numba's unicode type (the storage's
    kind, its byte width, the code point), each a compiled function. PyTensor's LAPACK
    and BLAS wrappers pass their character arguments that way (``ord("N")``,
    ``ord("T")``, ``ord("L")``), so every function that calls one (a triangular solve,
    a matrix product, a Schur decomposition, and every loop or ``OpFromGraph`` body that
    calls those) links that code, and LLVM optimises it again inside each of them. On a
    cold start of pymc-extras' SARIMAX, 68 of 650 compilations linked it
    (``design/benchmarks.md``, "String code on a cold start").
literal ``ord``
    This module's overload of ``ord`` for a `numba.types.StringLiteral` of one
    character: Numba types a string written in the source as a literal first, and the
    overload answers with the code point itself, a constant computed when the call is
    typed. The compiled value and its type are Numba's (``ord`` of one character is its
    code point, an ``int64``); only the code that computes it is gone.

The overload is registered with Numba once, when innergraph's Numba backend loads, for
the CPU target (more specific than the generic target of Numba's own ``ord``, so it is
tried first). It answers only while innergraph is installed (`installed`): a function
typed after ``innergraph.uninstall()`` gets Numba's own ``ord``, as in a process that
never imported innergraph, with one exception Numba imposes: it caches an overload's
answer per argument type for the process, so a literal already typed while innergraph
was installed stays a constant after ``uninstall()`` (and one typed while uninstalled
keeps Numba's ``ord`` after a new install). Either way the value and its type are
Numba's; only whether the string code is compiled differs. Any other argument (a string of another length, a string
known only at run time) is left to Numba's implementation and its errors.
"""

from __future__ import annotations

from typing import Any

from numba import types
from numba.core.extending import overload

from innergraph.core.hooks import installed

__all__ = ["literal_ord"]


def literal_ord(c: Any) -> Any:
    """Numba's typing of ``ord(c)``: for a one-character literal while installed, a function returning its code point; else None.

    The function returns a Python ``int`` captured as a constant, which Numba types as
    ``int64``, the type of its own ``ord`` (a test checks that they agree).
    """
    if not installed() or not isinstance(c, types.StringLiteral):
        return None
    value = c.literal_value
    if not isinstance(value, str) or len(value) != 1:
        return None  # Numba's own ord raises its TypeError at run time
    code = ord(value)

    def code_point(c: Any) -> int:
        return code

    return code_point


overload(ord, target="cpu", prefer_literal=True)(literal_ord)
