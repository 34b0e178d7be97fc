"""`Scan`: PyTensor's Scan with its body carried as a graph input.

Inputs are ``(function, n_steps, *outer_inputs)`` where ``outer_inputs`` follow
PyTensor's Scan layout (sequences, mit-mot, mit-sot, sit-sot, untraced sit-sot,
nit-sot lengths, non-sequences) and the function's params follow the inner
layout. The props are that layout (`ScanLayout`, counts and taps) and a few flags,
never a graph, so two scans with the same props and inputs merge.

Execution reuses PyTensor's own Scan runtimes: the consumer builds the native
`pytensor.scan.op.Scan` from its body once per distinct body (`native_scan`) and
delegates to it — the Python/Cython/C thunk, or its Numba implementation. So the
per-step cost is the native one, and bodies that merged compile once.
"""

from __future__ import annotations

import innergraph_pickle

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pytensor.graph.basic import Apply, Variable
from pytensor.graph.op import Op
from pytensor.scan.op import Scan as NativeScan
from pytensor.scan.op import ScanInfo

from innergraph.protocol.conversion import lift_graph
from innergraph.core.errors import ArityError, BodyTypeError
from innergraph.core.graph import body_of, is_function
from innergraph.core.instantiate import instantiate, step_output_shapes, substitute
from innergraph.core.fold import fold_scope
from innergraph.core.types import Body
from innergraph.protocol.runtime import body_value, pipeline_passes, skips_pipeline_passes

__all__ = ["Scan", "ScanLayout", "build_native_scan", "native_scan"]


@dataclass(frozen=True)
class ScanLayout:
    """The argument layout of a scan, with named splits of the inner outputs.

    A thin frozen wrapper over PyTensor's own `ScanInfo`, which holds the counts
    and taps; the splits name the groups that consumers and rewrites need.
    """

    __reduce_ex__ = innergraph_pickle.reduce  # loads without installing innergraph

    info: ScanInfo

    def split_inner_outputs(self, outputs: Sequence[Any]) -> dict[str, list[Any]]:
        """Group inner outputs: mit_mot (flattened), mit_sot, sit_sot, nit_sot, untraced, until."""
        info = self.info
        sizes = [("mit_mot", info.n_mit_mot_outs), ("mit_sot", info.n_mit_sot), ("sit_sot", info.n_sit_sot)]
        sizes += [("nit_sot", info.n_nit_sot), ("untraced", info.n_untraced_sit_sot), ("until", int(info.as_while))]
        return _split(outputs, sizes)

    def split_inner_inputs(self, inputs: Sequence[Any]) -> dict[str, list[Any]]:
        """Group inner inputs (params): seqs, mit_mot and mit_sot taps, sit_sot, untraced, non_seqs."""
        info = self.info
        sizes = [("seqs", info.n_seqs), ("mit_mot", sum(len(t) for t in info.mit_mot_in_slices))]
        sizes += [("mit_sot", sum(len(t) for t in info.mit_sot_in_slices)), ("sit_sot", info.n_sit_sot)]
        sizes += [("untraced", info.n_untraced_sit_sot), ("non_seqs", info.n_non_seqs)]
        return _split(inputs, sizes)

    def split_outer_inputs(self, inputs: Sequence[Any]) -> dict[str, list[Any]]:
        """Group outer inputs after ``n_steps``: seqs, mit_mot, mit_sot, sit_sot, untraced, nit_sot, non_seqs."""
        info = self.info
        sizes = [("seqs", info.n_seqs), ("mit_mot", info.n_mit_mot), ("mit_sot", info.n_mit_sot)]
        sizes += [("sit_sot", info.n_sit_sot), ("untraced", info.n_untraced_sit_sot)]
        sizes += [("nit_sot", info.n_nit_sot), ("non_seqs", info.n_non_seqs)]
        return _split(inputs, sizes)

    def split_outer_outputs(self, outputs: Sequence[Any]) -> dict[str, list[Any]]:
        """Group outer outputs: mit_mot, mit_sot, sit_sot, nit_sot, untraced."""
        info = self.info
        sizes = [("mit_mot", info.n_mit_mot), ("mit_sot", info.n_mit_sot), ("sit_sot", info.n_sit_sot)]
        sizes += [("nit_sot", info.n_nit_sot), ("untraced", info.n_untraced_sit_sot)]
        return _split(outputs, sizes)

    def check_outer_inputs(self, param_types: Sequence[Any], outer: Sequence[Variable], where: str) -> None:
        """Check each outer input against the params it feeds; name the offender."""
        inner = self.split_inner_inputs(param_types)
        groups = self.split_outer_inputs(outer)
        per_state = {
            "seqs": [[t] for t in inner["seqs"]],
            "mit_mot": _per_state(inner["mit_mot"], self.info.mit_mot_in_slices),
            "mit_sot": _per_state(inner["mit_sot"], self.info.mit_sot_in_slices),
            "sit_sot": [[t] for t in inner["sit_sot"]],
        }
        for group, states in per_state.items():
            for i, (var, types) in enumerate(zip(groups[group], states, strict=True)):
                for t in types:
                    if getattr(var.type, "dtype", None) != getattr(t, "dtype", None) or var.type.ndim != t.ndim + 1:
                        raise BodyTypeError(
                            f"{where}: {group} input {i} ({var}, type {var.type}) does not "
                            f"match its param type {t} plus a leading (time) dimension"
                        )
        for group in ("untraced", "non_seqs"):
            for i, (var, t) in enumerate(zip(groups[group], inner[group], strict=True)):
                if not t.in_same_class(var.type) and not t.is_super(var.type):
                    raise BodyTypeError(f"{where}: {group} input {i} ({var}, type {var.type}) does not fit param type {t}")
        for i, var in enumerate(groups["nit_sot"]):
            if getattr(var.type, "ndim", None) != 0 or "int" not in str(var.type.dtype):
                raise BodyTypeError(f"{where}: nit_sot length {i} ({var}) must be an integer scalar")

    def outer_output_types(self, inner_output_types: Sequence[Any]) -> list[Any]:
        """The types of the scan's outputs, as PyTensor's Scan derives them."""
        from pytensor.tensor.type import TensorType

        groups = self.split_inner_outputs(inner_output_types)
        mit_mot_first = []
        k = 0
        for taps in self.info.mit_mot_out_slices:
            mit_mot_first.append(groups["mit_mot"][k])
            k += len(taps)
        traced = mit_mot_first + groups["mit_sot"] + groups["sit_sot"] + groups["nit_sot"]
        return [TensorType(t.dtype, shape=(None, *t.shape)) for t in traced] + groups["untraced"]


def _split(items: Sequence[Any], sizes: list[tuple[str, int]]) -> dict[str, list[Any]]:
    groups, start = {}, 0
    for name, n in sizes:
        groups[name] = list(items[start : start + n])
        start += n
    return groups


def _per_state(flat: list[Any], slices: Sequence[Sequence[int]]) -> list[list[Any]]:
    states, start = [], 0
    for taps in slices:
        states.append(flat[start : start + len(taps)])
        start += len(taps)
    return states


class Scan(Op):
    """PyTensor's Scan, its body an input: ``Scan(...)(function, n_steps, *outer_inputs)``.

    Parameters
    ----------
    layout
        The argument layout (`ScanLayout`).
    truncate_gradient, name, profile, allow_gc
        As for PyTensor's Scan; part of equality, as there.
    mode, strict
        Carried to the native Scan the consumer runs; not part of equality (as in
        PyTensor's Scan).
    """

    __reduce_ex__ = innergraph_pickle.reduce  # loads without installing innergraph

    __props__ = ("layout", "truncate_gradient", "name", "profile", "allow_gc")
    kind = "scan"

    def __init__(
        self,
        layout: ScanLayout,
        truncate_gradient: int = -1,
        name: str | None = None,
        profile: Any = False,
        allow_gc: bool = True,
        mode: Any = None,
        strict: bool = True,
    ):
        self.layout = layout
        self.truncate_gradient = truncate_gradient
        self.name = name
        self.profile = profile
        self.allow_gc = allow_gc
        self.mode = mode
        self.strict = strict
        info = layout.info
        if info.n_untraced_sit_sot:  # as PyTensor's Scan: these outputs may alias their inputs
            first_out = info.n_mit_mot + info.n_mit_sot + info.n_sit_sot + info.n_nit_sot
            first_in = 2 + info.n_seqs + info.n_mit_mot + info.n_mit_sot + info.n_sit_sot
            self.view_map = {first_out + j: [first_in + j] for j in range(info.n_untraced_sit_sot)}

    #: The flags this Op shares with PyTensor's Scan, under the same names.
    FLAGS = ("truncate_gradient", "name", "profile", "allow_gc", "mode", "strict")

    def flags(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.FLAGS}

    @classmethod
    def like(cls, native: NativeScan) -> Scan:
        """The consumer with the layout and flags of a native Scan."""
        return cls(ScanLayout(native.info), **{name: getattr(native, name) for name in cls.FLAGS})

    def make_node(self, *inputs: Any) -> Apply:
        function, *outer = inputs
        if not isinstance(function, Variable) or not is_function(function):
            raise BodyTypeError(f"{self}: input 0 ({function!r}) must be a function variable")
        info = self.layout.info
        ftype = function.type
        if len(ftype.param_types) != info.n_inner_inputs:
            raise ArityError(
                f"{self}: the layout has {info.n_inner_inputs} inner inputs, the function "
                f"{function} takes {len(ftype.param_types)} params"
            )
        if len(ftype.output_types) != info.n_inner_outputs:
            raise ArityError(
                f"{self}: the layout has {info.n_inner_outputs} inner outputs, the function "
                f"{function} returns {len(ftype.output_types)}"
            )
        if len(outer) != info.n_outer_inputs:
            raise ArityError(f"{self}: expected {info.n_outer_inputs} outer inputs (n_steps first), got {len(outer)}")
        from pytensor.tensor import as_tensor_variable

        n_steps, *rest = [v if isinstance(v, Variable) else as_tensor_variable(v) for v in outer]
        self.layout.check_outer_inputs(ftype.param_types, rest, where=str(self))
        outputs = [t() for t in self.layout.outer_output_types(ftype.output_types)]
        return Apply(self, [function, n_steps, *rest], outputs)

    def native_node(self, node: Apply, linker: Any = "cvm") -> Apply:
        """The native Scan node this consumer node runs under ``linker`` (`backend_native_scan`)."""
        inputs = node.inputs[1:]
        return backend_native_scan(body_value(node.inputs[0]), self, inputs, linker).make_node(*inputs)

    def make_thunk(self, node: Apply, storage_map: Any, compute_map: Any, no_recycling: Any, impl: str | None = None) -> Any:
        native_node = self.native_node(node, "py" if impl == "py" else "cvm")
        pairs = list(zip(native_node.inputs, node.inputs[1:], strict=True))
        pairs += list(zip(native_node.outputs, node.outputs, strict=True))
        storage = {n: storage_map[o] for n, o in pairs}
        computed = {n: compute_map[o] for n, o in pairs}
        return native_node.op.make_thunk(native_node, storage, computed, [], impl=impl)

    def perform(self, node: Apply, inputs: Sequence[Any], output_storage: Any) -> None:
        native_node = self.native_node(node, "py")
        native_node.op.perform(native_node, list(inputs[1:]), output_storage)

    def _native_for_graph(self, inputs: Sequence[Variable]) -> Apply:
        return native_scan(body_of(inputs[0]), self).make_node(*inputs[1:])

    def connection_pattern(self, node: Apply) -> list[list[bool]]:
        native = self._native_for_graph(node.inputs)
        return [[False] * len(node.outputs), *native.op.connection_pattern(native)]

    def infer_shape(self, node: Apply, input_shapes: Sequence[Any]) -> Any:
        """PyTensor's Scan shapes, from the body's shape template (no native Scan built).

        Traced states keep their buffer's shape and untraced states their initial
        value's. A nit-sot output is ``(length, *step shape)``; a step dimension that
        depends on a sequence row's or a state's value is read from the output
        after the loop, as PyTensor does. A while loop's length is only known
        afterwards, so its traced outputs' first dimension is read from them too.
        """
        from pytensor.tensor.shape import Shape_i

        info = self.layout.info
        outer, shapes = node.inputs[2:], input_shapes[2:]
        n_traced = info.n_mit_mot + info.n_mit_sot + info.n_sit_sot
        traced = list(shapes[info.n_seqs : info.n_seqs + n_traced])
        untraced = list(shapes[info.n_seqs + n_traced : info.n_seqs + n_traced + info.n_untraced_sit_sot])
        nit_sot: list[Any] = []
        if info.n_nit_sot:
            groups = self.layout.split_outer_inputs(list(zip(outer, shapes, strict=True)))
            args, arg_shapes = self._step_arguments(groups)
            step = step_output_shapes(node.inputs[0], args, arg_shapes)
            first = info.n_mit_mot_outs + info.n_mit_sot + info.n_sit_sot
            outputs = self.layout.split_outer_outputs(node.outputs)["nit_sot"]
            for (length, _), out, shape in zip(groups["nit_sot"], outputs, step[first : first + info.n_nit_sot], strict=True):
                if shape is None:
                    nit_sot.append(None)
                    continue
                dims = [d if d is not None else out.type.shape[i + 1] for i, d in enumerate(shape)]
                nit_sot.append((length, *(d if d is not None else Shape_i(i + 1)(out) for i, d in enumerate(dims))))
        traced += nit_sot
        if info.as_while:
            traced = [None if s is None else (Shape_i(0)(o), *s[1:]) for o, s in zip(node.outputs, traced)]
        return [*traced, *untraced]

    def _step_arguments(self, groups: dict[str, list[Any]]) -> tuple[list[Variable | None], list[Any]]:
        """The body's arguments as seen from outside the loop, and their shapes, in param order.

        ``groups`` are the outer inputs split by `ScanLayout.split_outer_inputs`, as
        (variable, shape) pairs. A sequence row or a state tap has no outer
        equivalent (``None``) and the shape of its outer input without the leading
        dimension; untraced states and non-sequences are passed as they are (an
        untraced state's value still changes, so it has no equivalent either).
        """
        info = self.layout.info
        args: list[Variable | None] = []
        arg_shapes: list[Any] = []

        def rows(pairs: list[Any], taps: Sequence[Sequence[int]] | None = None) -> None:
            for k, (_, shape) in enumerate(pairs):
                for _ in taps[k] if taps is not None else [0]:
                    args.append(None)
                    arg_shapes.append(None if shape is None else tuple(shape[1:]))

        rows(groups["seqs"])
        rows(groups["mit_mot"], info.mit_mot_in_slices)
        rows(groups["mit_sot"], info.mit_sot_in_slices)
        rows(groups["sit_sot"])
        for _, shape in groups["untraced"]:
            args.append(None)
            arg_shapes.append(shape)
        for var, shape in groups["non_seqs"]:
            args.append(var)
            arg_shapes.append(shape)
        return args, arg_shapes

    def pullback(self, inputs: Sequence[Variable], outputs: Sequence[Variable], cotangents: Sequence[Variable]) -> list[Variable]:
        from pytensor.gradient import disconnected_type

        native = self._native_for_graph(inputs)
        _carry_policy(outputs[0].owner, native)
        grads = native.op.pullback(native.inputs, native.outputs, list(cotangents))
        return [disconnected_type(), *lift_graph(_repoint(grads, native, inputs, outputs))]

    def pushforward(self, inputs: Sequence[Variable], outputs: Sequence[Variable], tangents: Sequence[Variable]) -> list[Variable]:

        native = self._native_for_graph(inputs)
        results = native.op.pushforward(native.inputs, native.outputs, list(tangents[1:]))
        return lift_graph(_repoint(results, native, inputs, outputs))

    def __str__(self) -> str:
        return f"Scan{{{self.name}, in-graph}}"



#: Tag attributes a consumer node hands to the native Scan it differentiates through
#: (`innergraph.ops.checkpoint` adds its policy tag when it loads).
CARRIED_TAGS: set[str] = set()


def _carry_policy(node: Apply | None, native: Apply) -> None:
    """Give the native node this consumer's `CARRIED_TAGS` (the checkpoint policy)."""
    for tag in sorted(CARRIED_TAGS):
        if node is not None and hasattr(node.tag, tag):
            setattr(native.tag, tag, getattr(node.tag, tag))


def _repoint_map(native: Apply, inputs: Sequence[Variable], outputs: Sequence[Variable]) -> dict[Variable, Variable]:
    """Native twin's inputs and outputs -> this consumer's."""
    replace = dict(zip(native.outputs, outputs, strict=True))
    replace.update((n, o) for n, o in zip(native.inputs, inputs[1:], strict=True) if n is not o)
    return replace


def _repoint(
    graph: Sequence[Variable], native: Apply, inputs: Sequence[Variable], outputs: Sequence[Variable]
) -> list[Variable]:
    """``graph`` reading this consumer's inputs and outputs instead of its native twin's."""
    return substitute(graph, _repoint_map(native, inputs, outputs))


def native_scan(body: Body, op: Scan) -> NativeScan:
    """The native Scan for ``body`` with ``op``'s layout, built once per body and op (`build_native_scan`)."""
    key = ("native_scan", op, id(op.mode), op.strict)
    native = body.cache.get(key)
    if native is None:
        native = body.cache[key] = build_native_scan(body, op)
    return native


def build_native_scan(body: Body, op: Scan) -> NativeScan:
    """A new native Scan running ``body`` with ``op``'s layout and flags.

    Untraced states stay untraced for every runtime: since PyTensor 3.3 its own Scan
    runtime copies an untraced state's next value where it aliases an intermediate
    (``Scan.prepare_fgraph``, PyTensor issue #2252), which innergraph did itself on 3.0.
    """
    inner_inputs = [t(name=f"p{i}") for i, t in enumerate(body.param_types)]
    inner_outputs = fold_scope(instantiate(body, inner_inputs))
    return NativeScan(inner_inputs, inner_outputs, op.layout.info, **op.flags())


def backend_native_scan(
    body: Body, op: Scan, outer_inputs: Sequence[Variable], linker: Any, query: Any = None
) -> NativeScan:
    """The native Scan of ``body`` with its inner graph rewritten for ``linker``'s backend (cached).

    What PyTensor's ``scan_inner_graph`` pass (100) does to a native Scan in a compiled
    graph: ``rewrite_scan_inner_graph``, PyTensor's per-backend rewrite, runs the
    mode's rewriter over the inner graph and takes the backend's in-place and copy
    decisions, which depend on the outer input types. An in-graph Scan that runs
    itself (one the pipeline did not lower: its rewrites excluded, or nested in a
    call's or a branch's body) runs this form. A body the pipeline rewrote gets the
    rewriter without the passes it went through already (`runtime.pipeline_passes`),
    as a call's body does. ``query``: the rewrite query of the mode compiled for
    (default: the default mode's). Built once per body, op, outer input types, linker
    and query.
    """
    from pytensor.compile.mode import Mode, get_default_mode
    from pytensor.scan.rewriting.inner_graph import rewrite_scan_inner_graph


    native = native_scan(body, op)
    types = tuple(v.type for v in outer_inputs)
    skip = skips_pipeline_passes(body)
    query = get_default_mode().provided_optimizer if query is None else query
    linker_key = linker if isinstance(linker, str) else type(linker)
    key = ("backend_native_scan", op, id(op.mode), op.strict, types, linker_key, query, skip)

    def bake() -> NativeScan:
        mode = Mode(linker=linker, optimizer=query.excluding(*pipeline_passes()) if skip else query)
        inner: Any = native.fgraph.unfreeze()
        inner._compile_mode = mode  # PyTensor's active mode, for nested inner graphs
        try:
            rewrite_scan_inner_graph(mode.linker, native, native.make_node(*outer_inputs), inner, mode=mode)
        finally:
            del inner._compile_mode
        return native.clone_with_inner_graph(inner)

    return body.cached(key, bake)
