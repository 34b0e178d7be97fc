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
    (``design/benchmarks.md``, "The cold-start targets on a quiet machine").
literal ``ord``
    This module's typing and lowering of ``ord`` for a `numba.types.StringLiteral` of
    one character (`LiteralOrd`, `lower_literal_ord`): Numba types a string written in
    the source as a literal first, and the call is lowered to the code point itself, a
    constant in the caller's code. The value and its type are Numba's (``ord`` of one
    character is its code point, an ``int64``); the string code is gone, and so is any
    function call: no library is linked for it at all. (An ``@overload`` would compile
    and link a small function per literal, which measured no cheaper for a caller than
    Numba's own ``ord``: about 35 ms more per caller to compile than a constant, against
    6-9 ms for this lowering.)

Both are registered with Numba once, when innergraph's Numba backend loads; the typing
for the CPU target, more specific than the generic target of Numba's own ``ord``, so it
is tried first. It answers only while innergraph is installed (`installed`), and Numba
asks it again at every typing (a template's answers are not cached): a function typed
after ``innergraph.uninstall()`` gets Numba's own ``ord``, as in a process that never
imported innergraph. Any other argument (a string of another length, a string
known only at run time) is left to Numba's implementation and its errors.
"""

from __future__ import annotations

from typing import Any

from numba import types
from numba.core.extending import lower_builtin
from numba.core.typing.templates import AbstractTemplate, Signature, infer_global, signature

from innergraph.core.hooks import installed

__all__ = ["LiteralOrd", "lower_literal_ord"]


class LiteralOrd(AbstractTemplate):
    """Numba's typing of ``ord(c)`` for a one-character literal while installed: ``int64``; for anything else, no answer."""

    key = ord
    prefer_literal = True
    metadata = {"target": "cpu"}

    def generic(self, args: tuple[Any, ...], kws: dict[str, Any]) -> Signature | None:
        if not installed() or kws or len(args) != 1:
            return None
        (c,) = args
        if not isinstance(c, types.StringLiteral) or len(c.literal_value) != 1:
            return None  # Numba's own ord: a string known at run time, or its TypeError for another length
        return signature(types.int64, c)


infer_global(ord, types.Function(LiteralOrd))


@lower_builtin(ord, types.StringLiteral)
def lower_literal_ord(context: Any, builder: Any, sig: Signature, args: Any) -> Any:
    """The code point of the call's literal, a constant in the caller's code."""
    return context.get_constant(types.int64, ord(sig.args[0].literal_value))
