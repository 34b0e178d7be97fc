"""`while_loop`, `do_while`, `fori_loop`: JAX's loops as in-graph consumers, with their derivatives.

Terms
-----
pytree
    A tensor, or a tuple, list or dict of pytrees (JAX's containers; dict keys in
    sorted order). A loop's state is one: its leaves are the carried values.

The loops are `innergraph.ops.loop`'s `WhileLoop` and `ForiLoop`, built with the
public consumer API (`innergraph.consumer`) only. Pushforward is defined for
every loop. Pullback needs what reverse mode reads: a fori loop has it (its
trip count, static or symbolic); a while loop has it when given ``max_steps``,
the bound of its carry history (the design notes' tracing while loop); any other
while loop raises an error naming the loop and saying what to pass. Reverse mode
re-runs the loop as the equivalent Scan, which stores every step's state.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytensor
import pytensor.tensor as pt
from pytensor.scan.utils import until
from pytensor.gradient import DisconnectedType, disconnected_type
from pytensor.graph.basic import Variable
from pytensor.graph.null_type import NullType

from innergraph import consumer as api
from innergraph.ops.loop import ForiLoop, WhileLoop

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


def _fitted(where: str, values: Tree, structure: Any, like: Sequence[Variable]) -> list[Variable]:
    """``values`` flattened, checked to have ``structure``, each converted to its carried value's type."""
    leaves, got = flatten(values)
    if got != structure:
        raise api.BodyTypeError(f"{where}: the body returns a state shaped {got}, the initial state is {structure}")
    out = []
    for i, (v, x) in enumerate(zip(leaves, like, strict=True)):
        if v.type == x.type:
            out.append(v)
            continue
        try:
            out.append(x.type.filter_variable(v, allow_convert=True))
        except TypeError:
            raise api.BodyTypeError(f"{where}: carried value {i} ({x}) has type {x.type}, the body returns {v.type} ({v})") from None
    return out


def _closed(fn: Callable[[list[Variable]], list[Variable]], like: Sequence[Variable], shared: Sequence[Variable] = ()) -> tuple[Variable, list[Variable]]:
    """A folded function of fresh carried values, ``shared`` and what else it captures; and those others."""
    xs = [x.type() for x in like]
    outs = fn(xs)
    first = api.inner_graph(outs, xs, capture="leaves")
    own = [v for v in first.captured if not any(v is s for s in shared)]
    closure = api.inner_graph(outs, [*xs, *own, *shared], capture="leaves")
    assert not closure.captured
    return api.fold_function(closure.function), own


def _captures(fn: Callable[[list[Variable]], list[Variable]], like: Sequence[Variable]) -> list[Variable]:
    xs = [x.type() for x in like]
    return list(api.inner_graph(fn(xs), xs, capture="leaves").captured)


def _as_bool(c: Any) -> Variable:
    c = pt.as_tensor_variable(c)
    return c if c.dtype == "bool" else pt.neq(c, 0)


def _while(
    pre: Callable[[list[Variable]], Any],
    step: Callable[[list[Variable]], tuple[list[Variable], Any]],
    init: list[Variable],
    max_steps: Any = None,
    do_while: bool = False,
) -> list[Variable]:
    """The results of a `WhileLoop` over flat carried values.

    ``pre(carry)`` is the pre-condition; ``step(carry)`` gives the next carried
    values and the post-condition (whether another step runs).
    """

    def cond_outs(xs: list[Variable]) -> list[Variable]:
        return [_as_bool(pre(xs))]

    def step_outs(xs: list[Variable]) -> list[Variable]:
        new, post = step(xs)
        return [*new, _as_bool(post)]

    in_cond, in_step = _captures(cond_outs, init), _captures(step_outs, init)
    shared = [v for v in in_cond if any(v is w for w in in_step)]
    cond_fn, cond_args = _closed(cond_outs, init, shared)
    step_fn, step_args = _closed(step_outs, init, shared)
    op = WhileLoop(len(init), len(cond_args), len(step_args), do_while, max_steps is not None)
    header = [] if max_steps is None else [pt.as_tensor_variable(max_steps)]
    out = op(cond_fn, step_fn, *header, *init, *cond_args, *step_args, *shared)
    return [out] if isinstance(out, Variable) else list(out)


def _then(step: Callable[[list[Variable]], list[Variable]], cond: Callable[[list[Variable]], Any]) -> Callable[[list[Variable]], tuple[list[Variable], Any]]:
    """A step that also returns ``cond`` of the values it computed (the post-condition)."""

    def both(xs: list[Variable]) -> tuple[list[Variable], Any]:
        new = step(xs)
        return new, cond(new)

    return both


def _state_step(where: str, body_fun: Callable[[Tree], Tree], structure: Any, init: list[Variable]) -> Callable[[list[Variable]], list[Variable]]:
    return lambda xs: _fitted(where, body_fun(unflatten(structure, xs)), structure, init)


def _condition(where: str, cond_fun: Callable[[Tree], Any], structure: Any) -> Callable[[list[Variable]], Variable]:
    def cond(xs: list[Variable]) -> Variable:
        c = pt.as_tensor_variable(cond_fun(unflatten(structure, xs)))
        if c.ndim != 0:
            raise api.BodyTypeError(f"{where}: cond_fun must return a scalar, it returns {c.type} ({c})")
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
    out = _while(cond, _then(_state_step(where, body_fun, structure, init), cond), init, max_steps)
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
    out = _while(lambda xs: pt.constant(True), step, init, max_steps, do_while=True)
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
    true = lambda xs: pt.constant(True)  # noqa: E731
    pre = true if pre_condition is None else _condition(where, pre_condition, structure)
    post = true if post_condition is None else _condition(where, post_condition, structure)
    step = _then(_state_step(where, update, structure, init), post)
    if reverse is None:
        return unflatten(structure, _while(pre, step, init, max_steps, do_while=pre_condition is None))
    from innergraph.loops_reverse import reversible_while

    out = reversible_while(
        lambda xs: _while(pre, step, xs, max_steps, do_while=pre_condition is None),
        _state_step(f"{where} reverse", reverse, structure, init), init, where,
    )
    return unflatten(structure, out)


def _fori(n_steps: Variable, seqs: list[Variable], step: Callable[[list[Variable], list[Variable]], list[Variable]], init: list[Variable]) -> list[Variable]:
    """The results of a `ForiLoop`: ``step(rows, carry)`` over the rows of ``seqs``."""
    rows = [q.type.clone(shape=q.type.shape[1:])() for q in seqs]
    fn, args = _closed(lambda xs: step(xs[: len(rows)], xs[len(rows) :]), [*rows, *init])
    out = ForiLoop(len(seqs), len(init))(fn, n_steps, *seqs, *init, *args)
    return [out] if isinstance(out, Variable) else list(out)


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

        out = _fori(n_steps, [index], step, init)
        if policy is not None:
            _tag_policy(out[0].owner, policy)
        return unflatten(structure, out)
    # symbolic bounds: the index is carried from ``lower`` (an arange of symbolic length
    # in the outer graph is refused by PyTensor's JAX backend); dead, it is removed
    i0 = pt.cast(lower_v, pytensor.scalar.upcast(lower_v.dtype, upper_v.dtype))

    def carried(rows: list[Variable], xs: list[Variable]) -> list[Variable]:
        i, state = xs[0], xs[1:]
        return [pt.cast(pt.add(i, 1), i0.dtype), *_fitted(where, body_fun(i, unflatten(structure, state)), structure, init)]

    out = _fori(n_steps, [], carried, [i0, *init])
    if policy is not None:
        _tag_policy(out[0].owner, policy)
    return unflatten(structure, out[1:])


def _checked_policy(where: str, policy: Any) -> Any:
    """``policy`` checked (`innergraph.ops.checkpoint.checked`), or a `ValueError` naming the loop."""
    from innergraph.ops import checkpoint

    try:
        return checkpoint.checked(policy)
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from None


def _tag_policy(node: Any, policy: Any) -> None:
    """Give a loop's node its own checkpoint policy (the tag `innergraph.ops.checkpoint.mark` sets on a Scan)."""
    from innergraph.ops import checkpoint

    setattr(node.tag, checkpoint.TAG, policy)


def _carry_policy(node: Any, scan_outputs: Sequence[Variable]) -> None:
    """Pass a loop node's own checkpoint policy, if any, to the Scan its pullback re-runs it as."""
    from innergraph.ops import checkpoint

    own = getattr(getattr(node, "tag", None), checkpoint.TAG, None)
    if own is not None:
        checkpoint.mark(list(scan_outputs), None if own == "none" else own)


# --- derivatives ------------------------------------------------------------------


def _live(t: Variable) -> bool:
    return not isinstance(t.type, DisconnectedType | NullType)


def _or_zeros(t: Variable, like: Variable) -> Variable:
    return t if _live(t) else pt.zeros_like(like)


def _jvp(outputs: list[Variable], wrt: list[Variable], tangents: list[Variable]) -> list[Variable]:
    """`innergraph.consumer.jvp` over the continuous ``wrt`` only (integers have no tangent)."""
    kept = [(w, t) for w, t in zip(wrt, tangents, strict=True) if getattr(w.type, "dtype", "float") in pt.type.continuous_dtypes]
    if not kept:
        return [pt.zeros_like(o) for o in outputs]
    return api.jvp(outputs, [w for w, _ in kept], [t for _, t in kept])


def _as_tangent(d: Variable, dx: Variable) -> Variable:
    """The tangent ``d`` of a carried value, as its carried tangent ``dx``'s type (zeros for an integer carry)."""
    if d.type == dx.type:
        return d
    if getattr(dx.type, "dtype", None) in pt.type.discrete_dtypes:
        return pt.zeros_like(dx)  # an integer (e.g. a carried index) has no tangent
    return dx.type.filter_variable(d, allow_convert=True)


def while_pushforward(op: WhileLoop, inputs: Sequence[Variable], tangents: Sequence[Variable]) -> list[Variable]:
    """Tangents of a while loop's results: the loop carrying values and tangents together."""
    parts, tparts = op.split(inputs), op.split(tangents)
    if not any(_live(t) for t in [*tparts["init"], *tparts["step_args"], *tparts["args"]]):
        return [disconnected_type() for _ in range(op.n_carry)]
    c = op.n_carry
    cond_fn, step_fn = parts["cond_fn"], parts["step_fn"]
    d_init = [_or_zeros(t, x) for t, x in zip(tparts["init"], parts["init"], strict=True)]
    d_others = [_or_zeros(t, x) for t, x in zip([*tparts["step_args"], *tparts["args"]], [*parts["step_args"], *parts["args"]], strict=True)]
    others = [*parts["step_args"], *parts["args"]]

    def pre(state: list[Variable]) -> Variable:
        return api.instantiate(cond_fn, [*state[:c], *parts["cond_args"], *parts["args"]])[0]

    def step(state: list[Variable]) -> tuple[list[Variable], Variable]:
        xs, dxs = state[:c], state[c:]
        *outs, post = api.instantiate(step_fn, [*xs, *others])
        douts = _jvp(outs, [*xs, *others], [*dxs, *d_others])
        fitted = [_as_tangent(d, x) for d, x in zip(douts, dxs, strict=True)]
        return [*outs, *fitted], post

    out = _while(pre, step, [*parts["init"], *d_init], parts["max_steps"], op.do_while)
    return out[c:]


def _pullback_by_scan(
    op: Any, inputs: Sequence[Variable], finals: list[Variable], cotangents: Sequence[Variable], n_header: int
) -> list[Variable]:
    """Vector-Jacobian products of ``finals`` (the loop re-run as a Scan) w.r.t. the loop's inputs."""
    live = [(f, g) for f, g in zip(finals, cotangents, strict=True) if _live(g)]
    head = [disconnected_type() for _ in range(n_header)]
    wrt = list(inputs[n_header:])
    if not live:
        return head + [_zero_cotangent(x) for x in wrt]
    grads: Any = pytensor.grad(
        None, wrt, known_grads=dict(live), disconnected_inputs="ignore", return_disconnected="disconnected", null_gradients="return"
    )
    # the connection pattern says every input after the header is connected: zeros where none flows
    return head + [g if not isinstance(g.type, DisconnectedType) else _zero_cotangent(x) for g, x in zip(grads, wrt, strict=True)]


def _zero_cotangent(x: Variable) -> Variable:
    """A zero cotangent for ``x`` (a float one for an integer ``x``, as PyTensor expects)."""
    dtype = getattr(x.type, "dtype", None)
    return pt.zeros_like(x, dtype=pytensor.config.floatX) if dtype in pt.type.discrete_dtypes else pt.zeros_like(x)


def _final(init: Variable, trace: Variable) -> Variable:
    """The last row of ``trace`` after ``init`` (``init`` itself when no step ran)."""
    return pt.concatenate([pt.shape_padleft(init), trace])[-1]


def while_pullback(op: WhileLoop, inputs: Sequence[Variable], outputs: Sequence[Variable], cotangents: Sequence[Variable]) -> list[Variable]:
    """Cotangents of a bounded while loop's inputs, through the Scan that stores its carry history."""
    from innergraph import ifelse

    if not op.bounded:
        raise ValueError(
            f"{op} ({', '.join(map(str, outputs))}): reverse mode needs the loop's carry history, whose length is "
            "unknown; pass max_steps= to innergraph.while_loop/do_while/loop (a bound on the steps), reverse= to "
            "innergraph.loop (a function undoing one step), or use innergraph.fori_loop for a known trip count"
        )
    parts = op.split(inputs)
    c = op.n_carry
    go = api.instantiate(parts["cond_fn"], [*parts["init"], *parts["cond_args"], *parts["args"]])[0]

    node = outputs[0].owner
    policy = _while_checkpoint_policy(node)

    def scan_step(*state: Variable) -> Any:
        xs, go_on = list(state[:-1]), state[-1]
        outs = api.instantiate(parts["step_fn"], [*xs, *parts["step_args"], *parts["args"]])
        if policy is None:
            taken = ifelse(go_on, list(outs), [*xs, pt.zeros_like(go_on)])  # a step after the loop ended changes nothing
            taken = [taken] if isinstance(taken, Variable) else list(taken)
        else:
            taken = [pt.switch(go_on, o, x) for o, x in zip(outs, [*xs, pt.zeros_like(go_on)], strict=True)]
        # checkpointed: no early exit (the segmented form needs the trip count), the
        # steps after the loop ended are frozen: O(max_steps) time, O(sqrt) memory
        return taken if policy is not None else (taken, until(pt.eq(taken[-1], 0)))

    scanned = pytensor.scan(scan_step, outputs_info=[*parts["init"], go], n_steps=parts["max_steps"], return_updates=False)
    traces = list(scanned)[:c]
    if policy is None:
        finals = [_final(x, t) for x, t in zip(parts["init"], traces, strict=True)]
    else:
        from innergraph.ops import checkpoint

        if checkpoint.scan_node_of(scanned[0]) is not None:  # (a constant max_steps=1 builds no Scan)
            checkpoint.mark(list(scanned), policy)
        finals = [_last_row(x, t) for x, t in zip(parts["init"], traces, strict=True)]
    return _pullback_by_scan(op, inputs, finals, cotangents, op.n_header)


def _while_checkpoint_policy(node: Any) -> Any:
    """A bounded while loop's own checkpoint policy (``while_loop(checkpoint=)``), or None.

    The default policy (`innergraph.checkpointing`) does not apply to while loops:
    checkpointed, the reverse pass runs all ``max_steps`` steps, however few the loop
    took, a cost only the loop's author can judge.
    """
    from innergraph.ops import checkpoint

    own = getattr(getattr(node, "tag", None), checkpoint.TAG, None)
    return None if own in (None, "none") else own


def fori_pushforward(op: ForiLoop, inputs: Sequence[Variable], tangents: Sequence[Variable]) -> list[Variable]:
    """Tangents of a fori loop's results: the loop carrying values and tangents together."""
    parts, tparts = op.split(inputs), op.split(tangents)
    if not any(_live(t) for t in [*tparts["seqs"], *tparts["init"], *tparts["args"]]):
        return [disconnected_type() for _ in range(op.n_carry)]
    s, c = op.n_seqs, op.n_carry
    d_seqs = [_or_zeros(t, x) for t, x in zip(tparts["seqs"], parts["seqs"], strict=True)]
    d_init = [_or_zeros(t, x) for t, x in zip(tparts["init"], parts["init"], strict=True)]
    d_args = [_or_zeros(t, x) for t, x in zip(tparts["args"], parts["args"], strict=True)]

    def step(rows: list[Variable], state: list[Variable]) -> list[Variable]:
        xs, dxs = state[:c], state[c:]
        inputs_ = [*rows[:s], *xs, *parts["args"]]
        outs = api.instantiate(parts["step_fn"], inputs_)
        douts = _jvp(outs, inputs_, [*rows[s:], *dxs, *d_args])
        return [*outs, *(_as_tangent(d, x) for d, x in zip(douts, dxs, strict=True))]

    out = _fori(parts["n_steps"], [*parts["seqs"], *d_seqs], step, [*parts["init"], *d_init])
    return out[c:]


def fori_pullback(op: ForiLoop, inputs: Sequence[Variable], outputs: Sequence[Variable], cotangents: Sequence[Variable]) -> list[Variable]:
    """Cotangents of a fori loop's inputs, through the Scan that stores its every state."""
    parts = op.split(inputs)
    s = op.n_seqs

    def scan_step(*values: Variable) -> list[Variable]:
        rows, xs = list(values[:s]), list(values[s:])
        return list(api.instantiate(parts["step_fn"], [*rows, *xs, *parts["args"]]))

    scanned = pytensor.scan(
        scan_step, sequences=list(parts["seqs"]), outputs_info=list(parts["init"]), n_steps=parts["n_steps"], return_updates=False
    )
    traces = [scanned] if isinstance(scanned, Variable) else list(scanned)
    _carry_policy(outputs[0].owner, traces)
    finals = [_last_row(x, t) for x, t in zip(parts["init"], traces, strict=True)]
    return _pullback_by_scan(op, inputs, finals, cotangents, 2)


def _last_row(init: Variable, trace: Variable) -> Variable:
    """`_final`, read as the last row of the Scan's own buffer when ``trace`` is ``buffer[1:]``.

    The buffer starts with the initial value, so its last row is the final value
    (the initial one when no step ran). Its cotangent is then zero except at the
    last position, which a checkpointed gradient recognises (it asks the segmented
    form for the final value only and never builds the trace, `innergraph.ops.checkpoint`).
    """
    from pytensor.scan.op import Scan as NativeScan
    from pytensor.tensor.subtensor import Subtensor, get_idx_list

    node = trace.owner
    if node is not None and isinstance(node.op, Subtensor):
        buffer = node.inputs[0]
        (index, *rest) = get_idx_list(node.inputs, node.op.idx_list)
        if (
            not rest and isinstance(index, slice) and index.stop is None and index.step is None
            and _is_one(index.start) and buffer.owner is not None and isinstance(buffer.owner.op, NativeScan)
        ):
            return buffer[-1]
    return _final(init, trace)


def _is_one(value: Any) -> bool:
    from pytensor.tensor.basic import get_underlying_scalar_constant_value

    return value is not None and get_underlying_scalar_constant_value(value, raise_not_constant=False) == 1
