"""The demonstration (``python -m innergraph``), written for a PyMC user who has never seen innergraph.

It compiles three graphs — PyTensor issue #1669 (its 2nd and 3rd derivatives, one table
each), an AR(2) log-likelihood with its gradient, and a Student-t helper applied to K data
sets — once by vanilla PyTensor and once with innergraph, and prints one table per
compilation side by side: `INTRODUCTION` says what is compared and how to read a ratio,
`ROWS` what each row measures, and `summary` closes with what innergraph won, in numbers
taken from the tables. The bodies innergraph rewrote are printed only with
``--show-graphs`` (`bodies`): PyTensor's debug print, meant for PyTensor developers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import pytensor

from innergraph_bench.bench import CaseResult, Measurement, measure_case, mode_for
from innergraph_bench.cases import Case, ar2, issue_1669, student_t

__all__ = ["INTRODUCTION", "ROWS", "bodies", "demo_cases", "run", "side_by_side", "summary"]

INTRODUCTION = """\
What this shows: each model below is compiled twice in this process with pytensor.function,
once by vanilla PyTensor (innergraph uninstalled: PyTensor exactly as released) and once
with innergraph imported, then both compiled functions are run on the same inputs.
The last column is the ratio innergraph / vanilla: below 1 means innergraph is smaller or
faster (0.50: half of vanilla's figure), above 1 that it is larger or slower. Times are
warm (each variant compiled once first, then three times in turn with the other; the
fastest is shown), on a shared machine: a time ratio within about 0.1 of 1 is noise. "max |difference|" is the largest difference
between the two functions' results: 0 or about 1e-12 means the same values.

Rows of each table:
{rows}
"""

#: Each row of the tables: its name, what it measures, and how to read it off a `Measurement`.
ROWS: tuple[tuple[str, str, Callable[[Measurement], object]], ...] = (
    (
        "consumers",
        "loops ('scan': PyTensor's Scan) and calls ('call': a helper graph, PyTensor's OpFromGraph) it runs",
        lambda m: ", ".join(f"{n} {k}" for k, n in m.stats["consumers"].items() if n) or "-",
    ),
    ("outer nodes", "operations of the compiled graph outside any loop or call", lambda m: m.stats["outer_nodes"]),
    (
        "hidden nodes",
        "operations inside the bodies of loops and calls (a loop's body is the step it repeats)",
        lambda m: m.stats["hidden_nodes"],
    ),
    (
        "distinct bodies",
        "different loop or call bodies; loops or calls that run the same body count it once",
        lambda m: m.stats["bodies"],
    ),
    ("dead outputs", "outputs of loops and calls that are computed and never used", lambda m: m.stats["dead_outputs"]),
    (
        "unread buffers",
        "arrays a loop fills at every step that nothing reads afterwards (memory and time for nothing)",
        lambda m: m.stats["unread_buffers"],
    ),
    ("compile time [ms]", "wall time of pytensor.function", lambda m: f"{m.compile_s * 1e3:.1f}"),
    (
        "first call [ms]",
        "wall time of the first call (Numba compiles or loads its code here)",
        lambda m: f"{m.first_s * 1e3:.2f}",
    ),
    (
        "steady call [us]",
        "time of each later call: what NUTS pays per evaluation of a log-density and its gradient",
        lambda m: f"{m.steady_s * 1e6:.1f}",
    ),
)

_LOOP_KINDS = ("scan", "loop")


def demo_cases(k: int, linker: str) -> list[Case]:
    """The demonstration's cases (one table each), compiled with ``linker``."""
    return [dataclasses.replace(c, linker=linker) for c in (issue_1669(2), issue_1669(3), ar2(), student_t(k))]


def run(k: int = 8, linker: str = "numba", repeats: int = 3, show_graphs: bool = False) -> list[CaseResult]:
    """Print the introduction, one table per case (with its bodies if ``show_graphs``) and the summary."""
    print(introduction(), flush=True)
    results = []
    for case in demo_cases(k, linker):
        print(f"\n== {case.title} (linker={case.linker})", flush=True)
        result = measure_case(case, rounds=repeats, steady_budget=0.2)
        results.append(result)
        print(side_by_side(result), flush=True)
        if show_graphs and case.id != "1669-d3":  # the 3rd derivative's: the 2nd's and more
            print(bodies(case))
    print("\n" + summary(results))
    if not show_graphs:
        print("(`python -m innergraph --show-graphs` also prints the loop bodies innergraph rewrote.)")
    return results


def introduction() -> str:
    """`INTRODUCTION` with one line per row of the tables."""
    return INTRODUCTION.format(rows="\n".join(f"  {name:<18} {meaning}" for name, meaning, _ in ROWS))


def side_by_side(result: CaseResult) -> str:
    """One case's table: a row per `ROWS` entry for vanilla, innergraph and their ratio."""
    width = max(12, *(len(str(get(m))) + 2 for _, _, get in ROWS for m in (result.vanilla, result.innergraph)))
    lines = [f"{'':<20}{'vanilla':>{width}}{'innergraph':>{width}}{'ratio':>8}", "-" * (28 + 2 * width)]
    for name, _, get in ROWS:
        ours, theirs = get(result.innergraph), get(result.vanilla)
        try:
            ratio = f"{float(ours) / float(theirs):>8.2f}"  # type: ignore[arg-type]
        except (TypeError, ValueError, ZeroDivisionError):
            ratio = ""
        lines.append(f"{name:<20}{theirs!s:>{width}}{ours!s:>{width}}{ratio}")
    lines.append(f"{'max |difference|':<20}{result.difference:>{2 * width}.2e}")
    return "\n".join(lines)


def _loops(m: Measurement) -> int:
    return sum(m.stats["consumers"].get(kind, 0) for kind in _LOOP_KINDS)


def _nodes(m: Measurement) -> int:
    return int(m.stats["outer_nodes"]) + int(m.stats["hidden_nodes"])


def _ratio_range(results: Sequence[CaseResult], attr: str) -> str:
    ratios = [getattr(r.innergraph, attr) / getattr(r.vanilla, attr) for r in results]
    return f"{min(ratios):.2f}-{max(ratios):.2f}"


def summary(results: Sequence[CaseResult]) -> str:
    """The closing sentence: totals and ranges of the tables' own figures, innergraph against vanilla."""
    total: dict[str, dict[str, int]] = {}
    for variant in ("vanilla", "innergraph"):
        ms = [getattr(r, variant) for r in results]
        total[variant] = {
            "loops": sum(_loops(m) for m in ms),
            "nodes": sum(_nodes(m) for m in ms),
            "unread": sum(int(m.stats["unread_buffers"]) + int(m.stats["dead_outputs"]) for m in ms),
        }
    v, ig = total["vanilla"], total["innergraph"]
    difference = max((r.difference for r in results), default=0.0)
    return (
        f"In short: over these {len(results)} tables innergraph compiled to {ig['loops']} loops where vanilla "
        f"needed {v['loops']}, {ig['nodes']} nodes where vanilla had {v['nodes']} (outer + hidden), and "
        f"{ig['unread']} unused outputs of loops and calls (dead outputs + unread buffers) where vanilla had {v['unread']}; "
        f"its steady calls took {_ratio_range(results, 'steady_s')} times vanilla's time and its compilations "
        f"{_ratio_range(results, 'compile_s')} times, with results equal to within {difference:.1e}."
    )


def bodies(case: Case, max_lines: int = 30) -> str:
    """The bodies innergraph rewrote, in the in-graph form (compiled without lowering), trimmed."""
    inputs, outputs = case.build("innergraph")
    fn = pytensor.function(inputs, outputs, mode=mode_for(case, "innergraph").excluding("innergraph_lower"))
    text = str(pytensor.dprint(fn, file="str"))
    lines = _without_composite_graphs(text[text.index("\nBodies:") + 1 :]) if "\nBodies:" in text else []
    if len(lines) > max_lines:
        lines = [*lines[:max_lines], f"   ... ({len(lines) - max_lines} more lines: pytensor.dprint(fn))"]
    note = (
        "\nThe bodies as innergraph rewrote them (PyTensor's debug print of the in-graph form, compiled "
        "without the final lowering to native Ops; each distinct body listed once, however many loops share "
        "it; p0, p1... are its parameters, '←' marks each output):"
    )
    return note + "\n" + "\n".join(lines)


def _without_composite_graphs(text: str) -> list[str]:
    """The lines of a dprint's "Bodies:" section without the "Inner graphs:" of fused Composites."""
    kept, skipping = [], False
    for line in text.rstrip().splitlines():
        if line.strip() == "Inner graphs:":
            skipping = True
        elif line.startswith("Body "):
            skipping = False
        if not skipping:
            kept.append(line)
    return kept
