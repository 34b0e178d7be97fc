"""`while_loop`, `do_while`, `fori_loop`: JAX's loops as in-graph consumers, with their derivatives.

Terms
-----
pytree
    A tensor, or a tuple, list or dict of pytrees (JAX's containers; dict keys in
    sorted order). A loop's state is one: its leaves are the carried values.

The loops are `innergraph.ops.loop`'s `WhileLoop` and `ForiLoop`, built by
`innergraph.ops.loop_build` from the flattened state; this module turns pytrees into
flat carried values and back, checks what the user's functions return, and tags the
nodes with their checkpoint policy. Their derivatives are
`innergraph.ops.loop_derivatives`: pushforward for every loop; pullback for a fori
loop, and for a while loop given ``max_steps`` (the bound of its carry history) or, with
`loop`, a ``reverse`` function (`innergraph.loops_reverse`); any other while loop raises
an error naming the loop and saying what to pass.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytensor
import pytensor.tensor as pt
from pytensor.graph.basic import Variable

from innergraph.core.errors import BodyTypeError
from innergraph.loops_reverse import reversible_while
from innergraph.ops import checkpoint
from innergraph.ops.loop_build import build_fori, build_while

__all__ = ["do_while", "fori_loop", "loop", "while_loop"]

Tree = Any


def flatten(tree: Tree) -> tuple[list[Variable], Any]:
    """The leaves of ``tree`` as tensors, and its structure."""
    if isinstance(tree, tuple | list):
        parts = [flatten(t) for t in tree]
        return [leaf for leaves, _ in parts for leaf in leaves], (type(tree), [d for _, d in parts])
    if isinstance(tree, dict):
        keys = sorted(tree)
        parts = [flatten(tree[k]) for k in keys]
        return [leaf for leaves, _ in parts for leaf in leaves], (dict, list(zip(keys, (d for _, d in parts), strict=True)))
    return [pt.as_tensor_variable(tree)], None


def unflatten(structure: Any, leaves: Sequence[Any]) -> Tree:
    """The pytree of ``structure`` (from `flatten`) holding ``leaves``."""
    it = iter(leaves)

    def build(d: Any) -> Tree:
        if d is None:
            return next(it)
        container, children = d
        if container is dict:
            return {k: build(c) for k, c in children}
        return container(build(c) for c in children)

    tree = build(structure)
    return tree


def _fitted(where: str, values: Tree, structure: Any, like: Sequence[Variable], name: str = "body_fun") -> list[Variable]:
    """``values`` flattened, checked to have ``structure``, each converted to its carried value's type.

    ``name`` is the argument of ``where`` that returned ``values``, named in the errors.
    """
    _refuse_strings(where, name, values)
    leaves, got = flatten(values)
    if got != structure:
        raise BodyTypeError(
            f"{where}: {name} returns {_describe(got)}, but the state (init_val) is {_describe(structure)}; "
            f"expected the next state, structured as init_val (the same containers, one value per carried value)"
        )
    out = []
    for i, (v, x) in enumerate(zip(leaves, like, strict=True)):
        if v.type == x.type:
            out.append(v)
            continue
        try:
            out.append(x.type.filter_variable(v, allow_convert=True))
        except TypeError:
            raise BodyTypeError(f"{where}: carried value {i} ({x}) has type {x.type}, {name} returns {v.type} ({v})") from None
    return out


def _refuse_strings(where: str, name: str, tree: Tree) -> None:
    """A `BodyTypeError` when a leaf of ``tree`` is a Python string (PyTensor's message would be "Cannot convert ...")."""
    if isinstance(tree, str | bytes):
        raise BodyTypeError(f"{where}: {name} returns the Python string {tree!r}; a state is tensors (or tuples, lists and dicts of them)")
    children = tree.values() if isinstance(tree, dict) else tree if isinstance(tree, tuple | list) else ()
    for child in children:
        _refuse_strings(where, name, child)


def _describe(structure: Any) -> str:
    """A `flatten` structure in words: ``"a single tensor"``, ``"a tuple (tensor, tensor)"``..."""
    if structure is None:
        return "a single tensor"
    return f"a {structure[0].__name__} {_shape(structure)}"


def _shape(structure: Any) -> str:
    if structure is None:
        return "tensor"
    container, children = structure
    if container is dict:
        return "{" + ", ".join(f"{k!r}: {_shape(c)}" for k, c in children) + "}"
    inner = ", ".join(_shape(c) for c in children)
    return f"[{inner}]" if container is list else f"({inner}{',' if len(children) == 1 else ''})"


def _then(step: Callable[[list[Variable]], list[Variable]], cond: Callable[[list[Variable]], Any]) -> Callable[[list[Variable]], tuple[list[Variable], Any]]:
    """A step that also returns ``cond`` of the values it computed (the post-condition)."""

    def both(xs: list[Variable]) -> tuple[list[Variable], Any]:
        new = step(xs)
        return new, cond(new)

    return both


def _state_step(
    where: str, body_fun: Callable[[Tree], Tree], structure: Any, init: list[Variable], name: str = "body_fun"
) -> Callable[[list[Variable]], list[Variable]]:
    return lambda xs: _fitted(where, body_fun(unflatten(structure, xs)), structure, init, name)


def _always(xs: list[Variable]) -> Variable:
    """The condition of a loop that has none: a boolean ``True`` (``pt.constant(True)`` would be an int8)."""
    return pt.constant(np.True_)


def _condition(where: str, cond_fun: Callable[[Tree], Any], structure: Any, name: str = "cond_fun") -> Callable[[list[Variable]], Variable]:
    """``cond_fun`` over the flat state, checked: a boolean scalar, as JAX's loops require (`BodyTypeError`, a `TypeError`).

    No conversion: a float or integer condition is refused rather than compared with
    zero behind the user's back (``lax.while_loop`` refuses it too).
    """

    def cond(xs: list[Variable]) -> Variable:
        value = cond_fun(unflatten(structure, xs))
        if isinstance(value, bool):  # `x != 0` on a PyTensor variable compares the objects: always True
            raise BodyTypeError(
                f"{where}: {name} must return a boolean scalar variable; it returns the Python bool {value} "
                "(`x != 0` and `x == y` compare PyTensor variables as objects: write `pt.neq(x, 0)`, `pt.eq(x, y)`)"
            )
        c = pt.as_tensor_variable(value)
        if c.ndim != 0 or c.dtype != "bool":
            raise BodyTypeError(
                f"{where}: {name} must return a boolean scalar; it returns {c} of type {c.type}. "
                "Write a comparison (e.g. `pt.lt(i, n)`, or `pt.neq(x, 0)` for a number meaning true when nonzero)"
            )
        return c

    return cond


def while_loop(
    cond_fun: Callable[[Tree], Any], body_fun: Callable[[Tree], Tree], init_val: Tree, *, max_steps: Any = None, checkpoint: Any = None
) -> Tree:
    """``while cond_fun(val): val = body_fun(val)``, in the graph (JAX's ``lax.while_loop``).

    Parameters
    ----------
    cond_fun
        The state -> a boolean scalar. Evaluated before every step: zero steps is allowed.
    body_fun
        The state -> the next state, of the same structure and types.
    init_val
        The initial state: a tensor, or tuples, lists and dicts of them.
    max_steps
        An optional integer bound: the loop stops after that many steps even if
        ``cond_fun`` still holds. Needed for reverse-mode derivatives.
    checkpoint
        This loop's checkpoint policy for reverse mode (`innergraph.ops.checkpoint`;
        needs ``max_steps``): ``"sqrt"`` or a segment length ``k``. The reverse pass
        then runs ``max_steps`` steps (those after the loop ended change nothing)
        and stores ``O(max_steps / k + k)`` carries instead of one per step taken.
        ``None`` leaves the current default (`innergraph.checkpointing`) in charge.

    Returns
    -------
    The final state, structured as ``init_val``.
    """
    where = "while_loop"
    policy = _while_policy(where, checkpoint, max_steps)
    init, structure = flatten(init_val)
    cond = _condition(where, cond_fun, structure)
    out = build_while(cond, _then(_state_step(where, body_fun, structure, init), cond), init, max_steps)
    if policy is not None:
        _tag_policy(out[0].owner, policy)
    return unflatten(structure, out)


def do_while(
    body_fun: Callable[[Tree], Tree], cond_fun: Callable[[Tree], Any], init_val: Tree, *, max_steps: Any = None, checkpoint: Any = None
) -> Tree:
    """``val = body_fun(val)`` repeated while ``cond_fun(val)`` holds: at least one step (as `while_loop` otherwise).

    ``checkpoint`` is as for `while_loop` (it needs ``max_steps``).
    """
    where = "do_while"
    policy = _while_policy(where, checkpoint, max_steps)
    init, structure = flatten(init_val)
    step = _then(_state_step(where, body_fun, structure, init), _condition(where, cond_fun, structure))
    out = build_while(_always, step, init, max_steps, do_while=True)
    if policy is not None:
        _tag_policy(out[0].owner, policy)
    return unflatten(structure, out)


def _while_policy(where: str, policy: Any, max_steps: Any) -> Any:
    """A while loop's own checkpoint policy, checked; a `ValueError` naming the loop without ``max_steps``."""
    checked = _checked_policy(where, policy)
    if checked is not None and max_steps is None:
        raise ValueError(f"{where}: checkpoint={policy!r} needs max_steps= (reverse mode re-runs up to max_steps steps)")
    return checked


def loop(
    pre_condition: Callable[[Tree], Any] | None,
    update: Callable[[Tree], Tree],
    post_condition: Callable[[Tree], Any] | None,
    init_val: Tree,
    *,
    max_steps: Any = None,
    reverse: Callable[[Tree], Tree] | None = None,
) -> Tree:
    """The design notes' ``Loop(pre_condition, update, post_condition, reverse)``.

    While ``pre_condition(val)`` holds (None: always), ``val = update(val)``, then stop
    unless ``post_condition(val)`` holds (None: always holds). `while_loop` is
    ``loop(c, f, c, ...)``, `do_while` ``loop(None, f, c, ...)``; with no condition at
    all, ``max_steps`` bounds the loop (a counted loop is better written `fori_loop`).

    ``reverse`` undoes ``update`` (``reverse(update(val)) == val``, same structure and
    types). Given, reverse mode needs no bound and stores no history: the loop runs
    again to count its steps, then backwards (`innergraph.loops_reverse`). Without it
    and without ``max_steps``, differentiating the loop raises an error saying so.
    """
    init, structure = flatten(init_val)
    where = "loop"
    if pre_condition is None and post_condition is None and max_steps is None:
        raise ValueError("loop: with neither a pre- nor a post-condition, pass max_steps (or use innergraph.fori_loop)")
    pre = _always if pre_condition is None else _condition(where, pre_condition, structure, "pre_condition")
    post = _always if post_condition is None else _condition(where, post_condition, structure, "post_condition")
    step = _then(_state_step(where, update, structure, init, "update"), post)
    if reverse is None:
        return unflatten(structure, build_while(pre, step, init, max_steps, do_while=pre_condition is None))
    out = reversible_while(
        lambda xs: build_while(pre, step, xs, max_steps, do_while=pre_condition is None),
        _state_step(where, reverse, structure, init, "reverse"), init, where,
    )
    return unflatten(structure, out)


def fori_loop(lower: Any, upper: Any, body_fun: Callable[[Variable, Tree], Tree], init_val: Tree, *, checkpoint: Any = None) -> Tree:
    """``for i in range(lower, upper): val = body_fun(i, val)``, in the graph (JAX's ``lax.fori_loop``).

    Parameters
    ----------
    lower, upper
        Integer scalars (constants or symbolic); no step runs when ``upper <= lower``.
        With both constant, the index is a sequence (``arange(lower, upper)``), so
        work on it alone can leave the loop; otherwise it is carried from ``lower``
        (every backend runs it, JAX included; under JAX, reverse mode with
        symbolic bounds runs eagerly: its history has a length ``jax.jit`` cannot know).
    body_fun
        ``(i, state) -> next state``, of the same structure and types.
    init_val
        The initial state: a tensor, or tuples, lists and dicts of them.
    checkpoint
        This loop's checkpoint policy for reverse mode (`innergraph.ops.checkpoint`):
        ``"sqrt"`` or a segment length ``k`` stores every k-th carry and recomputes
        the rest during the reverse pass (``O(n/k + k)`` carries instead of ``O(n)``).
        ``None`` leaves the current default (`innergraph.checkpointing`,
        ``INNERGRAPH_CHECKPOINT``) in charge.

    Returns
    -------
    The final state, structured as ``init_val``.
    """
    policy = _checked_policy("fori_loop", checkpoint)
    lower_v, upper_v = pt.as_tensor_variable(lower), pt.as_tensor_variable(upper)
    for name, v in (("lower", lower_v), ("upper", upper_v)):
        if v.ndim != 0 or v.dtype not in pt.type.integer_dtypes:
            raise TypeError(f"fori_loop: {name} ({v}) must be an integer scalar, got {v.type}")
    init, structure = flatten(init_val)
    n_steps = pt.cast(pt.maximum(upper_v - lower_v, 0), "int64")
    where = "fori_loop"
    if isinstance(lower_v, pt.TensorConstant) and isinstance(upper_v, pt.TensorConstant):
        # constant bounds: the index is a sequence, so row-wise work on it can leave the loop
        index = pt.arange(lower_v, pt.maximum(upper_v, lower_v))

        def step(rows: list[Variable], xs: list[Variable]) -> list[Variable]:
            return _fitted(where, body_fun(rows[0], unflatten(structure, xs)), structure, init)

        out = build_fori(n_steps, [index], step, init)
        if policy is not None:
            _tag_policy(out[0].owner, policy)
        return unflatten(structure, out)
    # symbolic bounds: the index is carried from ``lower`` (an arange of symbolic length
    # in the outer graph is refused by PyTensor's JAX backend); dead, it is removed
    i0 = pt.cast(lower_v, pytensor.scalar.upcast(lower_v.dtype, upper_v.dtype))

    def carried(rows: list[Variable], xs: list[Variable]) -> list[Variable]:
        i, state = xs[0], xs[1:]
        return [pt.cast(pt.add(i, 1), i0.dtype), *_fitted(where, body_fun(i, unflatten(structure, state)), structure, init)]

    out = build_fori(n_steps, [], carried, [i0, *init])
    if policy is not None:
        _tag_policy(out[0].owner, policy)
    return unflatten(structure, out[1:])


def _checked_policy(where: str, policy: Any) -> Any:
    """``policy`` checked (`innergraph.ops.checkpoint.checked`), or a `ValueError` naming the loop."""
    try:
        return checkpoint.checked(policy)
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from None


def _tag_policy(node: Any, policy: Any) -> None:
    """Give a loop's node its own checkpoint policy (the tag `innergraph.ops.checkpoint.mark` sets on a Scan)."""
    setattr(node.tag, checkpoint.TAG, policy)
