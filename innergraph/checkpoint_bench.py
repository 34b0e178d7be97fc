"""The checkpointing table: stored-trace vs checkpointed gradients, vanilla and innergraph, with memory.

``python -m innergraph.checkpoint_bench [n ...] [--linker numba]`` measures
`innergraph.cases.checkpointed_filter` for each ``n`` three ways — vanilla PyTensor
(innergraph uninstalled), innergraph storing every step, innergraph checkpointed
(``"sqrt"``) — and prints one markdown table: outer nodes, compile seconds,
steady call milliseconds (best of a few), and the *peak memory of one call*:
the largest number of bytes `tracemalloc` saw allocated at once during a warm
call (NumPy reports its buffers to `tracemalloc`; Numba's do the same through
NumPy's allocator). The ``memory`` and ``time`` columns are relative to
innergraph's stored-trace gradient.
"""

from __future__ import annotations

import argparse
import time
import tracemalloc
from collections.abc import Callable, Sequence
from typing import Any

import pytensor
from pytensor.compile.mode import Mode

import innergraph
from innergraph.cases import checkpointed_filter

__all__ = ["measure", "peak_bytes", "table"]


def peak_bytes(fn: Callable[..., Any], values: Sequence[Any]) -> int:
    """The peak bytes allocated during one (warm) call of ``fn(*values)``."""
    fn(*values)
    tracemalloc.start()
    try:
        fn(*values)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _steady(fn: Callable[..., Any], values: Sequence[Any], repeats: int = 5) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn(*values)
        best = min(best, time.perf_counter() - start)
    return best


def measure(n: int, policy: Any, vanilla: bool, linker: str) -> dict[str, Any]:
    """Compile and measure the filter case once."""
    case = checkpointed_filter(n, policy, linker=linker)
    mode = Mode(linker=linker, optimizer="fast_run")
    start = time.perf_counter()
    if vanilla:
        with innergraph.uninstalled():
            inputs, outputs = case.build("vanilla")
            fn = pytensor.function(inputs, outputs, mode=mode)
    else:
        inputs, outputs = case.build("innergraph")
        fn = pytensor.function(inputs, outputs, mode=mode)
    compile_s = time.perf_counter() - start
    values = list(case.values)
    return {
        "nodes": len(fn.maker.fgraph.apply_nodes),
        "compile": compile_s,
        "steady": _steady(fn, values),
        "peak": peak_bytes(fn, values),
        "result": [float(v) for v in fn(*values)],
    }


def table(lengths: Sequence[int], linker: str) -> list[str]:
    """Markdown lines: each length measured vanilla, stored-trace and checkpointed."""
    lines = [
        "| steps | gradient | nodes | compile s | steady ms | peak MB | memory | time | max diff |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for n in lengths:
        runs = {
            "vanilla, stored": measure(n, None, True, linker),
            "innergraph, stored": measure(n, None, False, linker),
            "innergraph, checkpointed (sqrt)": measure(n, "sqrt", False, linker),
        }
        base = runs["innergraph, stored"]
        for name, m in runs.items():
            diff = max(abs(a - b) / max(1.0, abs(b)) for a, b in zip(m["result"], base["result"], strict=True))
            lines.append(
                f"| {n:,} | {name} | {m['nodes']} | {m['compile']:.2f} | {m['steady'] * 1e3:.2f} | "
                f"{m['peak'] / 1e6:.3f} | {m['peak'] / base['peak']:.3f}x | {m['steady'] / base['steady']:.2f}x | {diff:.1e} |"
            )
    return lines


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m innergraph.checkpoint_bench", description=__doc__.split("\n")[0])
    parser.add_argument("lengths", nargs="*", type=int, default=[1_000, 100_000])
    parser.add_argument("--linker", default="numba")
    args = parser.parse_args(argv)
    print("\n".join(table(args.lengths, args.linker)))


if __name__ == "__main__":
    main()
