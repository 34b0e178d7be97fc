"""PyTensor's and innergraph's builders whose annotations are unions, typed as the tests use them.

`pytensor.grad` returns one variable, a list or None, `pytensor.gradient.pushforward` one
variable or a list, and `innergraph.call` / `innergraph.ifelse` one variable or a list,
depending on arguments the test knows; their annotations are the union of all of them (and
`Variable` has no arithmetic), and `innergraph.param` a `NominalVariable` (no arithmetic
either), so mypy rejects ``[*grad(cost, [x, a])]`` or
``call(f, x) * 2``. For mypy these are typed ``Any`` here; at run time they are the
functions themselves.
"""

from typing import TYPE_CHECKING, Any

from pytensor.graph.basic import Variable
from pytensor.tensor.variable import TensorVariable

if TYPE_CHECKING:

    def grad(cost: Any, wrt: Any, *args: Any, **kwargs: Any) -> Any: ...

    def pushforward(f: Any, wrt: Any, eval_points: Any, *args: Any, **kwargs: Any) -> Any: ...

    def call(fn: Any, *args: Any, **kwargs: Any) -> Any: ...

    def ifelse(condition: Any, then_branch: Any, else_branch: Any, name: str | None = None) -> Any: ...

    def param(i: int, type_: Any) -> Any: ...

else:
    from pytensor.gradient import grad, pushforward

    from innergraph import call, ifelse, param

__all__ = ["call", "grad", "ifelse", "one_tensor", "param", "pushforward", "recording"]


def one_tensor(result: Variable | list[Variable]) -> TensorVariable:
    """The one tensor an Op call returned (PyTensor annotates `Op.__call__` as a variable or a list)."""
    assert isinstance(result, TensorVariable), f"expected one tensor, got {result!r}"
    return result


def recording(calls: list[Any], function: Any, whole: bool = False) -> Any:
    """``function``, appending each call's first argument (``whole``: its argument tuple) to ``calls``.

    For the tests that monkeypatch a function to count its calls (``lambda op: calls.append(op)
    or function(op)`` reads as a typo to mypy: ``append`` returns None).
    """

    def record(*args: Any, **kwargs: Any) -> Any:
        calls.append(args if whole else args[0])
        return function(*args, **kwargs)

    return record
