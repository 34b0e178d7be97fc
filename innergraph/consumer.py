"""The public API for writing a new consumer (a control-flow Op whose bodies are graph inputs).

A consumer is an Op that takes function variables as inputs. To write one:

1. build its bodies with `inner_graph` and pass them folded (`fold_function`);
2. run them: `compiled_function` under the Python-thunk linkers (``py``, ``cvm``,
   ``vm``; `make_body_thunk` for a thunk), `numba_body_code` to inline a body's
   code into the consumer's own Numba function (`numba_function` jits it, with a
   disk-cache key);
3. declare its slots with `register_consumer` (`Form`, `SlotKind`, `Meaning`,
   `Capabilities`): every generic rewrite of innergraph — dead slots, duplicate
   and constant arguments, loop-invariant code motion, loop merging, forwarding,
   untracing, push-outs — then applies to it by those declarations; a consumer that
   also declares its step semantics (``Form(semantics=...)``: `Iterate` for a loop,
   `Branch` for a conditional, `Once` for a call) gets its Numba and JAX code
   generated, its bodies inline, with no backend code of its own;
4. check it with `innergraph.testing.check_inner_graph_op`.

``design/contributing.md`` explains each step and has a complete worked example.
Everything here is re-exported from the modules that implement it; this module
is the one contributors import from.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from innergraph.core.compat import pushforward as _pushforward
from innergraph.core.build import Closure, inner_graph
from innergraph.core import dispatch as _dispatch
from innergraph.core.errors import ArityError, BodyTypeError
from innergraph.core.fold import fold_function
from innergraph.core.graph import body_nodes, body_of, body_ops, is_function, params
from innergraph.core.instantiate import body_output_shapes, carried_shapes, fit_arguments, instantiate, same_shape
from innergraph.protocol.runtime import CheckedFunction, body_value, compiled_function, linker_for, make_body_thunk
from innergraph.protocol.semantics import Branch, Iterate, Once
from innergraph.protocol.shapes import declared_shapes
from innergraph.protocol.slots import Capabilities, Form, Meaning, Slot, SlotKind, form_of, register_consumer
from innergraph.core.types import Body

__all__ = [
    "ArityError",
    "Body",
    "BodyTypeError",
    "Branch",
    "Capabilities",
    "CheckedFunction",
    "Closure",
    "Form",
    "Iterate",
    "Meaning",
    "Once",
    "Slot",
    "SlotKind",
    "body_nodes",
    "body_of",
    "body_ops",
    "body_output_shapes",
    "body_value",
    "carried_shapes",
    "compiled_function",
    "declared_shapes",
    "fit_arguments",
    "fold_function",
    "form_of",
    "inner_graph",
    "instantiate",
    "is_function",
    "jax_body",
    "jvp",
    "linker_for",
    "make_body_thunk",
    "numba_body_code",
    "numba_function",
    "params",
    "load_on_link",
    "register_consumer",
    "register_numba",
    "same_shape",
]


def jvp(outputs: Sequence[Any], wrt: Sequence[Any], tangents: Sequence[Any]) -> list[Any]:
    """Jacobian-vector products of ``outputs`` (zeros where an output depends on no ``wrt``)."""
    return _pushforward(list(outputs), list(wrt), list(tangents))


def numba_body_code(body: Body) -> Any:
    """The body's Numba code (`innergraph.backends.numba_code.BodyCode`), made once per body.

    ``code.render(prefix, arg_names)`` gives the assignments computing the body from
    variables named ``arg_names`` (`Rendering`: ``lines``, ``outputs``, ``env``);
    ``code.key`` is its disk-cache key (None when a node cannot be cached).
    """
    from innergraph.backends.numba import numba_body_code as make

    return make(body)


def jax_body(body: Body) -> Callable[..., tuple[Any, ...]]:
    """The body's JAX function: its params' values in, a tuple of its outputs out (made once per body).

    For a consumer's own ``jax_funcify`` registration (in a module `load_on_link`
    imports on the first JAX link); importing JAX happens here, not at import time.
    """
    from innergraph.backends.jax import jax_body as make

    return make(body)


def numba_function(
    name: str, params: Sequence[str], lines: Sequence[str], env: dict[str, Any], keys: Sequence[str | None]
) -> tuple[Callable[..., Any], str | None]:
    """``def name(*params): *lines`` jitted, and its cache key from its source and ``keys``.

    ``keys`` are the keys of the code it inlines (each `numba_body_code`'s ``key``);
    the result is what a function registered with `register_numba` returns.
    """
    from innergraph.backends.numba import jitted

    return jitted(name, params, lines, env, keys)


def register_numba(op_class: type) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator registering ``funcify(op, node=None, **kwargs) -> (jitted, cache_key)`` for ``op_class``.

    The function receives the node's inputs in order; a function input reaches it
    as ``None`` (read the body from the node at funcify time with `body_value`), a
    tensor as an array (0-d for a scalar: ``index.item()`` reads it). ``jitted``
    returns the node's output, or a tuple of them when the node has several. A
    registration covers subclasses (PyTensor's dispatch follows the class's MRO).
    """
    from pytensor.link.numba.dispatch.basic import register_funcify_and_cache_key

    import innergraph.backends.numba  # noqa: F401  (typify of bodies)

    return register_funcify_and_cache_key(op_class)


def load_on_link(backend: str, module: str) -> None:
    """Import ``module`` on the first link with ``backend`` (``"numba"`` or ``"jax"``).

    Where a consumer's backend implementation lives (its `register_numba`
    registrations), so that importing the consumer imports no Numba or JAX.
    Recorded once per process; it survives ``innergraph.uninstall()``/``install()``.
    """
    if backend not in _dispatch.BACKEND_LINKERS:
        raise ValueError(f"load_on_link: backend must be one of {sorted(_dispatch.BACKEND_LINKERS)}, got {backend!r}")
    _dispatch.load_on_link(_dispatch.BACKEND_LINKERS[backend], module)
