"""Errors raised when a body or a consumer is built from bad input.

Every error names the offending variable or Op and its position, so the user can
find it in their own code. All of them subclass `TypeError` or `ValueError`, the
exceptions PyTensor itself raises for ill-formed graphs, so existing ``except``
clauses keep working.
"""

from __future__ import annotations

__all__ = [
    "ArityError",
    "BodyTypeError",
    "FreeVariableError",
    "ParamError",
]


class FreeVariableError(ValueError):
    """A body reads a variable that is neither one of its params nor a constant.

    Bodies are closed: every runtime value enters as an explicit argument of the
    consumer. `innergraph.inner_graph` performs that closure conversion for you.
    """


class ParamError(ValueError):
    """A body uses a param outside its signature.

    Raised for an id that is out of range, an id used with another type than the
    one the body declares, or two builder inputs that are the same variable.
    """


class ArityError(TypeError):
    """A consumer applies a function to the wrong number of arguments, or a body returns the wrong number of outputs."""


class BodyTypeError(TypeError):
    """An argument or a body output does not have the type the signature declares."""
