"""``python -m innergraph``: real graphs compiled with vanilla PyTensor and with innergraph.

Cases
-----
PyTensor issue #1669
    The second and third derivatives of a 4-step ``y ** 2`` scan, plain
    `pytensor.scan` code: vanilla compiles 4 (8) Scans and compiles two
    alpha-equivalent backward bodies separately; innergraph lifts the Scans,
    merges and rewrites their bodies with the outer graph, and lowers them back.
Student-t likelihood
    A log-density helper applied to K data sets, plus its gradient: vanilla wraps
    it in an `OpFromGraph` per call site, innergraph uses `innergraph.call`.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["main"]


@dataclass
class Case:
    title: str
    build: Callable[[bool], tuple[list[Any], list[Any]]]  # in_graph -> (inputs, outputs)
    values: list[Any]


def issue_1669(order: int) -> Case:
    def build(in_graph: bool) -> tuple[list[Any], list[Any]]:
        import pytensor
        import pytensor.tensor as pt

        x0 = pt.scalar("x0")
        ys = pytensor.scan(lambda y: y**2, outputs_info=[x0], n_steps=4, return_updates=False)
        out = ys[-1]
        for _ in range(order):
            out = pytensor.grad(out, x0)
        return [x0], [out]

    nth = {2: "second", 3: "third"}[order]
    return Case(f"PyTensor issue #1669: {nth} derivative of a 4-step y**2 scan", build, [np.float64(1.1)])


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


def student_t(k: int) -> Case:
    def build(in_graph: bool) -> tuple[list[Any], list[Any]]:
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

    rng = np.random.default_rng(0)
    values = [rng.standard_t(4, size=200) + i for i in range(k)] + [np.float64(0.5), np.float64(1.5)]
    title = f"Student-t log-likelihood over K={k} data sets + gradient (OpFromGraph vs innergraph.call)"
    return Case(title, build, values)


def measure(case: Case, in_graph: bool, linker: str, repeats: int) -> dict[str, Any]:
    import pytensor
    from pytensor.compile.mode import Mode

    import innergraph

    mode = Mode(linker=linker, optimizer="fast_run")
    inputs, outputs = case.build(in_graph)
    start = time.perf_counter()
    fn = pytensor.function(inputs, outputs, mode=mode if in_graph else mode.excluding("innergraph"))
    compile_s = time.perf_counter() - start
    start = time.perf_counter()
    result = fn(*case.values)
    first_s = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(repeats):
        fn(*case.values)
    run_s = (time.perf_counter() - start) / repeats
    stats = innergraph.graph_stats(fn)
    return {"fn": fn, "result": result, "stats": stats, "compile": compile_s, "first": first_s, "run": run_s}


def table(vanilla: dict[str, Any], ours: dict[str, Any]) -> str:
    diff = max(float(np.max(np.abs(np.asarray(a) - np.asarray(b)))) for a, b in zip(vanilla["result"], ours["result"]))
    rows: list[tuple[str, Callable[[dict[str, Any]], Any]]] = [
        ("loops (Scans)", lambda m: m["stats"]["consumers"]["scan"]),
        ("calls", lambda m: m["stats"]["consumers"]["call"]),
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
            "Compile real graphs with vanilla PyTensor and with innergraph and print both "
            "side by side: PyTensor issue #1669 (second and third derivatives of a 4-step "
            "scan) and a Student-t log-likelihood helper applied to K data sets."
        ),
    )
    parser.add_argument("-k", type=int, default=8, help="call sites / data sets of the Student-t case (default: 8)")
    parser.add_argument(
        "--linker",
        default="numba",
        choices=["numba", "cvm", "vm", "py", "c|py"],
        help="PyTensor linker for every compilation (default: numba, PyTensor 3.0's default)",
    )
    parser.add_argument("--repeats", type=int, default=200, help="calls timed for the steady-state figure")
    parser.add_argument("--no-dprint", action="store_true", help="do not print the innergraph bodies")
    args = parser.parse_args(argv)

    cases = [issue_1669(2), issue_1669(3), student_t(args.k)]
    for case in cases:
        print(f"\n== {case.title} (linker={args.linker})", flush=True)
        vanilla = measure(case, in_graph=False, linker=args.linker, repeats=args.repeats)
        ours = measure(case, in_graph=True, linker=args.linker, repeats=args.repeats)
        print(table(vanilla, ours))
        if not args.no_dprint and case is cases[-1]:
            import pytensor

            text = str(pytensor.dprint(ours["fn"], file="str"))
            print("\nThe compiled innergraph function reads each body below through a constant;")
            print("every call site shares it (see the full graph with pytensor.dprint(fn)):")
            print(text[text.index("\nBodies:") :])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
