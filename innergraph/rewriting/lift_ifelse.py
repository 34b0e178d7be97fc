"""Lift PyTensor's own ``IfElse`` into the lazy in-graph conditional, where that changes what runs.

Terms
-----
group
    Native ``IfElse`` nodes on the same condition variable, none an ancestor of
    another. A group becomes one in-graph conditional: its branches are the
    members' branches side by side (what PyTensor's ``CondMerge`` and
    ``cond_merge_random_op`` would do).
always-computed node
    A node every call runs once the group is lazy: reached from the graph outputs
    without entering a group member's branch inputs (`innergraph.fold.reachable`
    with the members' branches blocked).
branch-only node
    A node reached from a branch input of the group that is not always computed:
    it becomes part of that branch's body. The always-computed variables it reads
    become the body's arguments (shared, not recomputed), and so do the large
    constants (`innergraph.instantiate.LARGE_CONSTANT`: what ``innergraph_fold``
    would make arguments right after, `innergraph.rewriting.args.outline_constants`,
    so the conditional is built once, in its final form, and the constants never
    leave the graph to be imported and hashed again); ownerless variables are
    captured as leaves; small constants stay inside.
work
    A branch-only node other than a view, shape arithmetic, an allocation
    (`CHEAP_OPS`), elementwise arithmetic of one instruction per element
    (`CHEAP_SCALAR_OPS`), elementwise work or a reduction over statically small
    arrays (`SMALL_STATIC_SIZE` elements at most, scalars among them) or a native
    ``IfElse`` (which only selects among nodes the walk also sees): a
    transcendental function or a reduction over arrays of unknown or larger size,
    a division, a product, a solve, an ``Assert``, a loop, any other Op.
    A group is lifted only when one of its branches has work: otherwise the
    native node runs the same nodes as the in-graph one would, and it stays (as
    PyTensor's own tests expect to find it).

The pass runs late (``innergraph_lift_ifelse``, 48.4): after canonicalize,
stabilize and specialize rewrote the branches together with the outer graph, so
what "work" means is judged on the graph that will run, and just before
``innergraph_fold`` marks the new bodies rewritten. It lifts only for linkers
that run PyTensor's IfElse eagerly and can run the in-graph conditional
(`lift_applies`): not under a ``VMLinker``, which evaluates it lazily already.
See ``design/lift_ifelse.md``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pytensor.scalar.basic as ps
from pytensor.graph.basic import Apply, Constant, Variable
from pytensor.graph.fg import FunctionGraph
from pytensor.ifelse import IfElse as NativeIfElse
from pytensor.tensor.basic import Alloc, AllocEmpty, MakeVector, ScalarFromTensor, TensorFromScalar
from pytensor.tensor.elemwise import CAReduce, DimShuffle, Elemwise
from pytensor.tensor.shape import Shape, Shape_i
from pytensor.tensor.subtensor import Subtensor

from innergraph.build import inner_graph
from innergraph.convert import lift_graph
from innergraph.fold import fold_function, reachable, visible_nodes
from innergraph.graph import InnerGraph, body_of, is_function, param, scope_toposort
from innergraph.instantiate import carry_shapes, is_large_constant, substitute
from innergraph.ops.ifelse import IfElse
from innergraph.rewriting.dce import remove_dead_slots
from innergraph.rewriting.duplicates import merge_duplicate_slots
from innergraph.rewriting.simplify import simplify_consumers
from innergraph.types import InnerGraphType, pickles

__all__ = ["CHEAP_OPS", "CHEAP_SCALAR_OPS", "SMALL_STATIC_SIZE", "lazy_by_pytensor", "lift_applies", "lift_native_ifelse"]

#: Ops whose branch-only nodes alone do not make a lift worthwhile: views, shape
#: arithmetic and allocations (PyTensor's own gradients put them in branches).
CHEAP_OPS: tuple[type, ...] = (
    Subtensor, DimShuffle, Shape, Shape_i, Alloc, AllocEmpty, MakeVector, ScalarFromTensor, TensorFromScalar,
)

#: Scalar ops of an ``Elemwise`` that cost about as much as writing its output
#: (the allocation the branch does anyway): one arithmetic or logical instruction
#: per element. ``exp``, ``log``, division, powers and the rest are work.
CHEAP_SCALAR_OPS: tuple[type, ...] = (
    ps.Add, ps.Sub, ps.Mul, ps.Neg, ps.Identity, ps.Cast, ps.Second, ps.Switch, ps.LogicalComparison,
    ps.AND, ps.OR, ps.XOR, ps.Invert, ps.Abs, ps.Maximum, ps.Minimum,
)

#: Elementwise work and reductions whose inputs and outputs have static shapes of at
#: most this many elements (scalars above all) are not work: run eagerly, the untaken
#: branch costs nanoseconds per call, and a lifted branch costs a body of its own at
#: compile time (about 4 ms per conditional, a scalar ``ifelse`` compiled 1.29x
#: vanilla's time). Arrays of unknown size may be large: their work is work.
SMALL_STATIC_SIZE = 16


def lift_applies(fgraph: FunctionGraph | None = None) -> bool:
    """Whether the linker of the mode being compiled should get lifted conditionals.

    Not a `VMLinker`: the VM evaluates PyTensor's IfElse lazily already (or was
    built with ``lazy=False``, an explicit request for eager evaluation). Not a
    linker for which PyTensor makes the conditional lazy itself (`lazy_by_pytensor`:
    Numba and JAX, since PyTensor 3.3.6). Otherwise
    when the linker runs the in-graph conditional, decided from its dispatch
    (`innergraph.dispatch.runs`) once innergraph's implementations for it are loaded
    (`innergraph.patching.linker.load_on_demand`, which its first link would do
    anyway): the thunk linkers (``py``, ``c``, ``c|py``) run the conditional's own
    thunk, Numba and JAX innergraph's implementations; a linker with none (MLX,
    PyTorch) keeps PyTensor's IfElse rather than getting it back at link time.

    The linker is the compiled mode's (`innergraph.dispatch.linker_being_compiled`).
    """
    from pytensor.link.vm import VMLinker

    from innergraph.dispatch import linker_being_compiled, runs
    from innergraph.ops.ifelse import IfElse
    from innergraph.patching.linker import load_on_demand

    linker = linker_being_compiled(fgraph)
    if linker is None:  # an unknown mode name: leave the graph as it is
        return False
    if isinstance(linker, VMLinker) or lazy_by_pytensor(linker):
        return False
    load_on_demand(type(linker))
    return runs(linker, IfElse)


def lazy_by_pytensor(linker: Any) -> bool:
    """Whether PyTensor compiles its own IfElse lazily for ``linker``.

    PyTensor 3.3.6 extracts a conditional's branch work into two compiled branches of a
    ``LazyIfElse`` (``introduce_lazy_ifelse``, 48.9) for the linkers whose required
    rewrites include one of that rewrite's tags (``numba``, ``jax``): the laziness the
    lift exists for. There innergraph leaves PyTensor's conditional as it is.
    """
    from pytensor.compile.mode import optdb

    rewrite = optdb.__db__.get("introduce_lazy_ifelse")
    if not rewrite:
        return False
    tags = {tag for tag, members in optdb.__db__.items() if rewrite <= members}
    return bool(tags.intersection(getattr(linker, "required_rewrites", ())) - {"introduce_lazy_ifelse"})


def lift_native_ifelse(fgraph: FunctionGraph) -> int:
    """Lift each group of native ``IfElse`` nodes whose branches have work; return how many groups.

    Groups are taken outermost first (last in topological order), so a nested
    native conditional on the same condition is resolved inside the outer body
    (``cond_merge_ifs_true``/``_false``) and others are lifted with it.
    """
    if not any(type(n.op) is NativeIfElse for n in fgraph.apply_nodes) or not lift_applies(fgraph):
        return 0
    declined: set[Apply] = set()
    lifted = 0
    while True:
        # Visible conditionals only: one inside a body (hidden) has no outer graph to share
        # work with, and lifting it with the outer graph's always-computed set broke a
        # call body's closure (thorough differential run). A native Scan's conditionals
        # are lifted when its inner function compiles, as a graph of its own.
        visible = visible_nodes(fgraph)
        natives = [n for n in fgraph.toposort() if type(n.op) is NativeIfElse and n not in declined and n in visible]
        if not natives:
            if lifted:
                _drop_unread_arguments(fgraph)
            return lifted
        group = _group(natives)
        if _lift_group(fgraph, group):
            lifted += 1
        else:
            declined.update(group)


def _drop_unread_arguments(fgraph: FunctionGraph) -> None:
    """Remove the arguments the lifted bodies do not read, and merge repeated ones.

    A body's params are the cut of its branch; resolving nested conditionals on the
    same condition inside it (`_resolve_same_condition`) can leave some unread, and
    this pass runs after ``innergraph_simplify``, which would have removed them.
    """
    simplify_consumers(fgraph, [merge_duplicate_slots, remove_dead_slots])


def _group(natives: list[Apply]) -> list[Apply]:
    """The last native conditional and the earlier ones on its condition that it does not read."""
    last = natives[-1]
    group = [last]
    above = _ancestor_nodes(last.inputs)
    for node in reversed(natives[:-1]):
        if node.inputs[0] is last.inputs[0] and node not in above:
            group.append(node)
            above |= _ancestor_nodes(node.inputs)
    return group[::-1]


def _ancestor_nodes(variables: Sequence[Variable]) -> set[Apply]:
    return set(reachable(variables, lambda node: node.inputs))


def _always_computed(fgraph: FunctionGraph, group: list[Apply]) -> set[Apply]:
    """The nodes every call runs once ``group`` is lazy: the walk follows only its members' condition."""
    members = set(group)
    return set(reachable(fgraph.outputs, lambda node: node.inputs[:1] if node in members else node.inputs))


def _branch(outputs: list[Variable], always: set[Apply]) -> tuple[list[Apply], list[Variable]]:
    """The branch-only nodes computing ``outputs`` and what becomes the body's arguments.

    The arguments are the always-computed variables the nodes read and the large
    constants they read.
    """
    nodes: list[Apply] = []
    cut: dict[Variable, None] = {}
    seen: set[Apply] = set()

    def stops(v: Variable) -> bool:
        return v.owner is None or isinstance(v, Constant) or is_function(v) or v.owner in always

    stack = list(reversed(outputs))
    while stack:
        var = stack.pop()
        if stops(var):
            if (var.owner is not None and var.owner in always) or is_large_constant(var):
                cut[var] = None
            continue
        if var.owner in seen:
            continue
        seen.add(var.owner)
        nodes.append(var.owner)
        stack.extend(reversed(var.owner.inputs))
    return nodes, list(cut)


def _is_work(node: Apply) -> bool:
    """Whether ``node`` is work (see the module docstring).

    A native conditional only selects: what it selects among is walked as branch
    nodes too.
    """
    op = node.op
    if isinstance(op, Elemwise | CAReduce) and _statically_small(node):
        return False
    if isinstance(op, Elemwise):
        return not _cheap_scalar(op.scalar_op)
    return not isinstance(op, CHEAP_OPS) and type(op) is not NativeIfElse


def _statically_small(node: Apply) -> bool:
    """Whether every input and output of ``node`` has a static shape of at most `SMALL_STATIC_SIZE` elements."""
    for var in (*node.inputs, *node.outputs):
        shape = getattr(var.type, "shape", None)
        if shape is None or None in shape or math.prod(shape) > SMALL_STATIC_SIZE:
            return False
    return True


def _cheap_scalar(op: Any) -> bool:
    if isinstance(op, ps.Composite):
        return all(_cheap_scalar(n.op) for n in op.fgraph.toposort())
    return isinstance(op, CHEAP_SCALAR_OPS)


def _lift_group(fgraph: FunctionGraph, group: list[Apply]) -> bool:
    cond = group[0].inputs[0]
    always = _always_computed(fgraph, group)
    pairs: dict[tuple[Variable, Variable], int] = {}  # (then, else) -> output index: cond_remove_identical
    targets: list[int] = []
    for node in group:
        n = node.op.n_outs
        for k in range(n):
            targets.append(pairs.setdefault((node.inputs[1 + k], node.inputs[1 + n + k]), len(pairs)))
    then_outs, else_outs = [p[0] for p in pairs], [p[1] for p in pairs]
    then_nodes, then_cut = _branch(then_outs, always)
    else_nodes, else_cut = _branch(else_outs, always)
    if not any(_is_work(n) for n in (*then_nodes, *else_nodes)):
        return False
    if not all(pickles(n.op) for n in (*then_nodes, *else_nodes)):  # the body could not be cached
        return False
    then_fn, then_args = _body(then_outs, then_cut, cond, taken=True)
    else_fn, else_args = _body(else_outs, else_cut, cond, taken=False)
    new = IfElse(len(then_args)).make_node(cond, then_fn, else_fn, *then_args, *else_args).outputs
    old = [o for node in group for o in node.outputs]
    first: dict[int, Variable] = {}
    for o, i in zip(old, targets, strict=True):
        first.setdefault(i, o)
    # the shape feature knows them: no shape inference through the bodies (unless they read branch work)
    carry_shapes(fgraph, [first[i] for i in range(len(new))], new, leaving={*then_nodes, *else_nodes})
    replacements = [(o, o.type.filter_variable(new[i])) for o, i in zip(old, targets, strict=True)]
    fgraph.replace_all(replacements, reason="innergraph_lift_ifelse", import_missing=True)
    return True


def _body(outputs: list[Variable], cut: list[Variable], cond: Variable, taken: bool) -> tuple[Variable, list[Variable]]:
    """A branch as a folded function over ``cut`` (and captured leaves), with its arguments.

    Inside the body, a native conditional on the group's condition is known to take
    this branch (``cond_merge_ifs_true``/``_false``); other native conditionals are
    lifted with the leaf-only capture of `innergraph.ifelse`.
    """
    stand_ins: dict[Variable, Variable] = {v: v.type() for v in cut if isinstance(v, Constant)}  # a param is bound to a variable
    if stand_ins:
        outputs = substitute(outputs, stand_ins)
    closure = inner_graph(outputs, [stand_ins.get(v, v) for v in cut], capture="leaves")
    body = body_of(closure.function)
    inner_outs = list(body.outputs)
    if cond in cut:
        cond_param = param(cut.index(cond), cond.type)
        inner_outs = _resolve_same_condition(inner_outs, cond_param, taken)
    inner_outs = lift_graph(inner_outs)  # nested native conditionals, nested functions folded
    function_type = InnerGraphType(body.param_types, [o.type for o in inner_outs])
    function = InnerGraph(function_type).make_node(*inner_outs).outputs[0]
    return fold_function(function), [*cut, *closure.captured]


def _resolve_same_condition(outputs: list[Variable], cond_param: Variable, taken: bool) -> list[Variable]:
    """``outputs`` with each native conditional on ``cond_param`` replaced by its ``taken`` side."""
    while True:
        replace: dict[Variable, Variable] = {}
        for node in scope_toposort(outputs):
            if type(node.op) is NativeIfElse and node.inputs[0] is cond_param:
                n = node.op.n_outs
                chosen = node.inputs[1 : 1 + n] if taken else node.inputs[1 + n :]
                replace.update((o, o.type.filter_variable(c)) for o, c in zip(node.outputs, chosen, strict=True))
        if not replace:
            return outputs
        outputs = substitute(outputs, replace)
