"""``python -m innergraph``: a real graph compiled with vanilla PyTensor and with innergraph.

The case: a Student-t log-density helper applied to K data sets, plus its gradient
with respect to the shared location and scale — the shape of a hierarchical model's
likelihood. Vanilla PyTensor wraps the helper in an `OpFromGraph` per call site, so
it carries and compiles K separate bodies; with innergraph each call site is an
in-graph `call`, the K alpha-equivalent bodies merge into one, the outer rewriter
simplifies it, and it compiles once.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

__all__ = ["main"]


def student_t_logp(x: Any, mu: Any, sigma: Any) -> Any:
    import pytensor.tensor as pt

    nu = 4.0
    z = (x - mu) / sigma
    return (
        pt.gammaln((nu + 1) / 2)
        - pt.gammaln(nu / 2)
        - 0.5 * pt.log(nu * np.pi)
        - pt.log(sigma)
        - (nu + 1) / 2 * pt.log1p(z**2 / nu)
    ).sum() * 1 + 0


def build(k: int, in_graph: bool) -> tuple[list[Any], list[Any]]:
    """The K-site log-likelihood and its gradient, with OpFromGraph or innergraph.call."""
    import pytensor
    import pytensor.tensor as pt
    from pytensor.compile.builders import OpFromGraph

    import innergraph

    mu, sigma = pt.dscalar("mu"), pt.dscalar("sigma")
    data = [pt.dvector(f"x{i}") for i in range(k)]
    terms = []
    for x in data:
        if in_graph:
            terms.append(innergraph.call(student_t_logp, x, mu, sigma))
        else:
            xs, m, s = pt.dvector(), pt.dscalar(), pt.dscalar()
            terms.append(OpFromGraph([xs, m, s], [student_t_logp(xs, m, s)])(x, mu, sigma))
    logp = pt.add(*terms)
    grads = list(pytensor.grad(logp, [mu, sigma]))  # type: ignore[arg-type]
    return [*data, mu, sigma], [logp, *grads]


def measure(k: int, in_graph: bool, linker: str, repeats: int) -> dict[str, Any]:
    import pytensor
    from pytensor.compile.mode import Mode

    import innergraph

    inputs, outputs = build(k, in_graph)
    start = time.perf_counter()
    fn = pytensor.function(inputs, outputs, mode=Mode(linker=linker, optimizer="fast_run"))
    compile_s = time.perf_counter() - start
    rng = np.random.default_rng(0)
    values = [rng.standard_t(4, size=200) + i for i in range(k)] + [0.5, 1.5]
    start = time.perf_counter()
    result = fn(*values)
    first_s = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(repeats):
        fn(*values)
    run_s = (time.perf_counter() - start) / repeats
    stats = innergraph.graph_stats(fn)
    return {"fn": fn, "result": result, "stats": stats, "compile": compile_s, "first": first_s, "run": run_s}


def table(vanilla: dict[str, Any], ours: dict[str, Any]) -> str:
    diff = max(float(np.max(np.abs(np.asarray(a) - np.asarray(b)))) for a, b in zip(vanilla["result"], ours["result"]))
    rows: list[tuple[str, Callable[[dict[str, Any]], Any]]] = [
        ("consumers (calls)", lambda m: m["stats"]["consumers"]["call"]),
        ("outer nodes", lambda m: m["stats"]["outer_nodes"]),
        ("hidden nodes", lambda m: m["stats"]["hidden_nodes"]),
        ("distinct bodies", lambda m: m["stats"]["bodies"]),
        ("unused outputs", lambda m: m["stats"]["unused_outputs"]),
        ("compile time [s]", lambda m: f"{m['compile']:.3f}"),
        ("first call [ms]", lambda m: f"{m['first'] * 1e3:.2f}"),
        ("steady call [us]", lambda m: f"{m['run'] * 1e6:.1f}"),
    ]
    lines = [f"{'':<20}{'vanilla':>12}{'innergraph':>12}", "-" * 44]
    lines += [f"{name:<20}{get(vanilla)!s:>12}{get(ours)!s:>12}" for name, get in rows]
    lines.append(f"{'max |difference|':<20}{diff:>24.2e}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m innergraph",
        description=(
            "Compile one model-like graph (a Student-t log-likelihood over K data sets, "
            "and its gradient) with vanilla PyTensor and with innergraph, and print both "
            "side by side."
        ),
    )
    parser.add_argument("-k", type=int, default=8, help="number of call sites / data sets (default: 8)")
    parser.add_argument(
        "--linker",
        default="numba",
        choices=["numba", "cvm", "vm", "py", "c|py"],
        help="PyTensor linker for both compilations (default: numba, PyTensor 3.0's default)",
    )
    parser.add_argument("--repeats", type=int, default=200, help="calls timed for the steady-state figure")
    parser.add_argument("--no-dprint", action="store_true", help="do not print the innergraph bodies")
    args = parser.parse_args(argv)

    print(f"Student-t log-likelihood over K={args.k} data sets + gradient, linker={args.linker}")
    print("compiling with vanilla PyTensor (OpFromGraph per call site)...", flush=True)
    vanilla = measure(args.k, in_graph=False, linker=args.linker, repeats=args.repeats)
    print("compiling with innergraph (innergraph.call per call site)...", flush=True)
    ours = measure(args.k, in_graph=True, linker=args.linker, repeats=args.repeats)
    print()
    print(table(vanilla, ours))
    if not args.no_dprint:
        import pytensor

        text = str(pytensor.dprint(ours["fn"], file="str"))
        print("\nThe compiled innergraph function reads each body below through a constant;")
        print("every call site shares it (see the full graph with pytensor.dprint(fn)):")
        print(text[text.index("\nBodies:") :])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
