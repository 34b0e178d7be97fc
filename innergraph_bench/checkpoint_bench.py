"""The checkpointing table: stored-trace vs checkpointed gradients, vanilla and innergraph, with memory.

``python -m innergraph_bench.checkpoint_bench [n ...] [--linker numba] [--rounds 5]``
measures `innergraph_bench.cases.checkpointed_filter` for each ``n`` four ways — vanilla
PyTensor (innergraph uninstalled) storing every step, vanilla with PyTensor's own
``scan_checkpoints`` (every ``ceil(sqrt(n))``-th carry; it takes states without taps
only, which this filter has), innergraph storing every step, innergraph
checkpointed (``"sqrt"``) — and prints one markdown table: total nodes (outer and
hidden), dead outputs and unread buffers (`innergraph.graph_stats`), compile
seconds, first call, steady call milliseconds (the median of ``rounds`` timed
blocks, the four functions taking turns block by block, with the spread as
min-max), and the *peak memory of one call*: the largest number of bytes
`tracemalloc` saw allocated at once during a warm call (NumPy reports its buffers
to `tracemalloc`; Numba's do the same through NumPy's allocator). The ``memory``
and ``time`` columns are relative to innergraph's stored-trace gradient.
"""

from __future__ import annotations

import argparse
import statistics
import time
import tracemalloc
from collections.abc import Callable, Sequence
from typing import Any

import pytensor
from pytensor.compile.mode import Mode

import innergraph
from innergraph.stats import graph_stats
from innergraph_bench.cases import filter_step, checkpointed_filter

__all__ = ["VARIANTS", "compile_variant", "measure_all", "peak_bytes", "table"]


def peak_bytes(fn: Callable[..., Any], values: Sequence[Any]) -> int:
    """The peak bytes allocated during one (warm) call of ``fn(*values)``."""
    fn(*values)
    tracemalloc.start()
    try:
        fn(*values)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _block(fn: Callable[..., Any], values: Sequence[Any], calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn(*values)
    return (time.perf_counter() - start) / calls


def _vanilla_checkpointed(n: int) -> tuple[list[Any], list[Any]]:
    """The filter with PyTensor's ``scan_checkpoints`` (no innergraph)."""
    import math

    import pytensor.tensor as pt
    from pytensor.scan.checkpoints import scan_checkpoints


    y, phi, q, r = pt.dvector("y"), pt.dscalar("phi"), pt.dscalar("q"), pt.dscalar("r")
    zero = pt.constant(0.0, dtype="float64")
    _, _, ll = scan_checkpoints(
        filter_step, sequences=[y], outputs_info=[zero, zero + 1, zero], non_sequences=[phi, q, r],
        save_every_N=max(1, math.ceil(math.sqrt(n))), return_updates=False,
    )
    grads: Any = pytensor.grad(ll[-1], [phi, q, r])
    return [y, phi, q, r], [ll[-1], *grads]


VARIANTS = ("vanilla, stored", "vanilla, scan_checkpoints (sqrt)", "innergraph, stored", "innergraph, checkpointed (sqrt)")


def compile_variant(n: int, variant: str, linker: str) -> tuple[Any, float, list[Any]]:
    """The compiled function of one variant, its compile seconds and the case's values."""
    policy = "sqrt" if variant == VARIANTS[3] else None
    case = checkpointed_filter(n, policy, linker=linker)
    mode = Mode(linker=linker, optimizer="fast_run")
    start = time.perf_counter()
    if variant.startswith("vanilla"):
        with innergraph.uninstalled():
            inputs, outputs = case.build("vanilla") if variant == VARIANTS[0] else _vanilla_checkpointed(n)
            fn = pytensor.function(inputs, outputs, mode=mode)
    else:
        inputs, outputs = case.build("innergraph")
        fn = pytensor.function(inputs, outputs, mode=mode)
    return fn, time.perf_counter() - start, list(case.values)


def measure_all(n: int, linker: str, rounds: int = 5) -> dict[str, dict[str, Any]]:
    """Every variant compiled, then timed in alternating blocks; peak memory per variant."""
    runs: dict[str, dict[str, Any]] = {}
    for variant in VARIANTS:
        fn, compile_s, values = compile_variant(n, variant, linker)
        start = time.perf_counter()
        result = [float(v) for v in fn(*values)]
        stats = graph_stats(fn)
        runs[variant] = {
            "fn": fn, "values": values, "compile": compile_s, "first": time.perf_counter() - start, "result": result,
            "nodes": stats["total_nodes"], "dead": stats["dead_outputs"], "unread": stats["unread_buffers"], "times": [],
        }
    calls = max(1, int(2_000 / n))
    for _ in range(rounds):
        for m in runs.values():
            m["times"].append(_block(m["fn"], m["values"], calls))
    for m in runs.values():
        m["steady"] = statistics.median(m["times"])
        m["peak"] = peak_bytes(m["fn"], m["values"])
    return runs


def table(lengths: Sequence[int], linker: str, rounds: int = 5) -> list[str]:
    """Markdown lines: each length measured in the four variants."""
    lines = [
        "| steps | gradient | nodes | dead outputs | unread buffers | compile s | first call ms | steady ms (median, min-max) "
        "| peak MB | memory | time | max diff |",
        "|---:|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|",
    ]
    for n in lengths:
        runs = measure_all(n, linker, rounds)
        base = runs["innergraph, stored"]
        for name, m in runs.items():
            diff = max(abs(a - b) / max(1.0, abs(b)) for a, b in zip(m["result"], base["result"], strict=True))
            spread = f"{min(m['times']) * 1e3:.2f}-{max(m['times']) * 1e3:.2f}"
            lines.append(
                f"| {n:,} | {name} | {m['nodes']} | {m['dead']} | {m['unread']} | {m['compile']:.2f} | {m['first'] * 1e3:.1f} "
                f"| {m['steady'] * 1e3:.2f} ({spread}) | {m['peak'] / 1e6:.3f} | {m['peak'] / base['peak']:.3f}x "
                f"| {m['steady'] / base['steady']:.2f}x | {diff:.1e} |"
            )
    return lines


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m innergraph_bench.checkpoint_bench", description=__doc__.split("\n")[0])
    parser.add_argument("lengths", nargs="*", type=int, default=[1_000, 100_000])
    parser.add_argument("--linker", default="numba")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    print("\n".join(table(args.lengths, args.linker, args.rounds)))


if __name__ == "__main__":
    main()
