"""The in-graph `Scan` declared as a consumer: its slot kinds, meanings and form.

A Scan has one slot per sequence (``seq``, a `Meaning.SEQUENCE`), state
(``mit_mot``: a buffer; ``mit_sot`` and ``sit_sot``: traces; ``untraced``: a
carry), nit-sot (a per-step output), non-sequence (invariant) and one for its
``until`` condition. It is a counted loop: its header is ``(n_steps,)``.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from pytensor.graph.basic import Apply, Variable

from innergraph.core.graph import body_of, params
from innergraph.ops.scan import Scan, ScanLayout
from innergraph.protocol.signature import SCAN_STATES, Signature, mit_mot_taps_from_zero
from innergraph.protocol.slots import Capabilities, Form, Meaning, Slot, SlotKind, register_consumer

__all__ = ["SCAN_FORM", "SCAN_STATES", "mit_mot_taps_from_zero"]


def _split_scan(node: Apply) -> tuple[tuple[Variable, ...], list[Slot]]:
    op: Scan = node.op
    layout, info = op.layout, op.layout.info
    body = body_of(node.inputs[0])
    inner_in = layout.split_inner_inputs(params(body.param_types))
    inner_out = layout.split_inner_outputs(list(zip(body.outputs, body.type.output_types)))
    outer_in = layout.split_outer_inputs(node.inputs[2:])
    results = layout.split_outer_outputs(node.outputs)
    taps_in = {
        "mit_mot": info.mit_mot_in_slices,
        "mit_sot": info.mit_sot_in_slices,
        "sit_sot": ((-1,),) * info.n_sit_sot,
        "untraced": ((-1,),) * info.n_untraced_sit_sot,
    }
    taps_out = {"mit_mot": info.mit_mot_out_slices}
    slots = [Slot("seq", (a,), ((0, p),)) for a, p in zip(outer_in["seqs"], inner_in["seqs"], strict=True)]
    for kind in SCAN_STATES:
        ins = iter(inner_in[kind])
        outs = iter(inner_out[kind])
        for i, (arg, result) in enumerate(zip(outer_in[kind], results[kind], strict=True)):
            in_taps = tuple(taps_in[kind][i])
            out_taps = tuple(taps_out[kind][i]) if kind == "mit_mot" else ()
            produced = [next(outs) for _ in range(len(out_taps) if kind == "mit_mot" else 1)]
            slots.append(
                Slot(
                    kind,
                    (arg,),
                    tuple((0, next(ins)) for _ in in_taps),
                    tuple((0, v) for v, _ in produced),
                    tuple(t for _, t in produced),
                    (result,),
                    in_taps,
                    out_taps,
                )
            )
    for length, (out, t), result in zip(outer_in["nit_sot"], inner_out["nit_sot"], results["nit_sot"], strict=True):
        slots.append(Slot("nit_sot", (length,), (), ((0, out),), (t,), (result,)))
    slots += [Slot("non_seq", (a,), ((0, p),)) for a, p in zip(outer_in["non_seqs"], inner_in["non_seqs"], strict=True)]
    slots += [Slot("until", (), (), ((0, out),), (t,)) for out, t in inner_out["until"]]
    return (node.inputs[1],), slots


def _make_scan(op: Scan, header: tuple[Variable, ...], functions: list[Variable], groups: dict[str, list[Slot]], args: list[Variable]) -> Apply:
    from pytensor.scan.op import ScanInfo

    g = {k: groups.get(k, []) for k in ("seq", "mit_mot", "mit_sot", "sit_sot", "untraced", "nit_sot", "non_seq", "until")}
    mit_mot_taps = [mit_mot_taps_from_zero(s.in_taps, s.out_taps) for s in g["mit_mot"]]
    info = ScanInfo(
        n_seqs=len(g["seq"]),
        mit_mot_in_slices=tuple(taps_in for taps_in, _ in mit_mot_taps),
        mit_mot_out_slices=tuple(taps_out for _, taps_out in mit_mot_taps),
        mit_sot_in_slices=tuple(s.in_taps for s in g["mit_sot"]),
        sit_sot_in_slices=((-1,),) * len(g["sit_sot"]),
        n_nit_sot=len(g["nit_sot"]),
        n_untraced_sit_sot=len(g["untraced"]),
        n_non_seqs=len(g["non_seq"]),
        as_while=bool(g["until"]),
    )
    return type(op)(ScanLayout(info), **op.flags()).make_node(functions[0], *header, *args)


def _loop_key(sig: Signature) -> Hashable | None:
    """Scans with equal keys run the same steps the same way (the name does not count)."""
    op: Any = sig.node.op
    if sig.is_while:
        return None
    return (sig.header[0], op.truncate_gradient, op.profile, op.allow_gc, op.strict, id(op.mode))


SCAN_FORM = register_consumer(
    Scan,
    Form(
        n_bodies=1,
        param_order=("seq", "mit_mot", "mit_sot", "sit_sot", "untraced", "non_seq"),
        output_order=("mit_mot", "mit_sot", "sit_sot", "nit_sot", "untraced", "until"),
        arg_order=("seq", "mit_mot", "mit_sot", "sit_sot", "untraced", "nit_sot", "non_seq"),
        result_order=("mit_mot", "mit_sot", "sit_sot", "nit_sot", "untraced"),
        split=_split_scan,
        make=_make_scan,
        functions=lambda node: [node.inputs[0]],
        kinds=(
            SlotKind("seq", Meaning.SEQUENCE),
            SlotKind("mit_mot", Meaning.BUFFER),
            SlotKind("mit_sot", Meaning.TRACE),
            SlotKind("sit_sot", Meaning.TRACE),
            SlotKind("untraced", Meaning.CARRY),
            SlotKind("nit_sot", Meaning.PER_STEP_OUTPUT),
            SlotKind("non_seq", Meaning.INVARIANT),
            SlotKind("until", Meaning.CONDITION),
        ),
        capabilities=Capabilities(loop=True, counted=True),
        loop_key=_loop_key,
    ),
)
