"""``python -m innergraph``: real graphs compiled with vanilla PyTensor and with innergraph.

Commands
--------
(none)
    The demonstration: PyTensor issue #1669 (2nd and 3rd derivatives of a 4-step
    scan), an AR(2) log-likelihood with its gradient, and a Student-t helper
    applied to K data sets (`OpFromGraph` vs `innergraph.call`), each printed
    side by side, explained and summed up (`innergraph_bench.demo`).
``bench``
    The benchmark suite (`innergraph_bench.cases`, measured by `innergraph_bench.bench`):
    writes ``benchmarks.md`` and, with matplotlib, ``ratios.png``.

Both compile every case twice in one process, with innergraph and with innergraph
uninstalled (vanilla: PyTensor as released), and time them warm (see
`innergraph_bench.bench`).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
from collections.abc import Sequence
from pathlib import Path

import pytensor

from innergraph_bench import bench, cases, cold, demo

__all__ = ["main"]

LINKERS = ["numba", "cvm", "vm", "py", "c|py"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m innergraph",
        description=(
            "Compile real graphs with vanilla PyTensor (innergraph uninstalled) and with "
            "innergraph in one process and print both side by side: PyTensor issue #1669 (2nd "
            "and 3rd derivatives of a 4-step scan), an AR(2) log-likelihood over 1,000 points "
            "with its gradient, and a Student-t helper applied to K data sets. Times are warm: "
            "each function is compiled and called once before the timed compilation."
        ),
        epilog="`python -m innergraph bench --help` describes the benchmark suite.",
    )
    parser.add_argument("-k", type=int, default=8, help="data sets (call sites) of the Student-t case (default: 8)")
    parser.add_argument(
        "--linker",
        default="numba",
        choices=LINKERS,
        help="PyTensor linker for every compilation (default: numba, PyTensor 3.0's default)",
    )
    parser.add_argument(
        "--repeats", type=int, default=3, help="timed compilations per variant, in turn with the other's; the fastest is shown (default: 3: one sample on a shared machine was off by up to 40%%)"
    )
    parser.add_argument(
        "--show-graphs",
        action="store_true",
        help="also print the loop bodies innergraph rewrote (PyTensor's debug print, for PyTensor developers)",
    )
    commands = parser.add_subparsers(dest="command", title="commands", metavar="{bench}")
    bench = commands.add_parser(
        "bench",
        help="run the benchmark suite and write benchmarks.md (and ratios.png)",
        description=(
            "Run the benchmark suite (design/benchmarks.md lists the cases): each case is compiled "
            "and run with innergraph and with vanilla PyTensor in this process, warm, and the "
            "ratios innergraph / vanilla of compile time, first-call time, steady-state call time "
            "and total node count are written to DIR/benchmarks.md, with the targets met or "
            "missed, and charted in DIR/ratios.png when matplotlib is installed (the 'bench' extra). "
            "Prints one progress line per case."
        ),
    )
    bench.add_argument("--out", type=Path, default=Path("."), metavar="DIR", help="output directory (default: .)")
    bench.add_argument(
        "--cases",
        nargs="+",
        metavar="CASE",
        help="run only these cases: a case number ('1'..'7', 'ofg', 'jax', 'demo'), a family ('shared': issue 22's "
        "K family, not in the default run), a case id or an id pattern such as 'seqs-*' or 'shared-50ops-*' "
        "(default: all but the families; --list shows the ids)",
    )
    bench.add_argument("--list", action="store_true", help="list the cases and exit")
    bench.add_argument(
        "--suite",
        choices=("default", "pymc", "sampling"),
        default="default",
        help="'pymc': the NUTS functions of the PyMC models (needs the 'pymc' extra; innergraph_bench.pymc_models), "
        "warm, then each model's cold start and edited rerun in fresh processes (innergraph_bench.cold); "
        "'sampling': pm.sample and nutpie on the loop models, compile + sampling wall time, cold and warm",
    )
    bench.add_argument("--no-cold", action="store_true", help="--suite pymc: skip the cold starts (fresh processes)")
    bench.add_argument(
        "--draws", type=int, default=300, help="--suite sampling: draws (and as many tuning steps) of one chain (default: 300)"
    )
    bench.add_argument(
        "--rounds", type=int, default=5, help="timed compilations and first calls per variant, fastest kept (default: 5)"
    )
    bench.add_argument(
        "--steady-budget",
        type=float,
        default=0.5,
        metavar="SECONDS",
        help="time spent on steady-state calls per variant (default: 0.5)",
    )
    bench.add_argument(
        "--quick", action="store_true", help="one round and a 0.05 s steady budget: checks the machinery, not speed"
    )
    bench.add_argument(
        "--update",
        type=Path,
        metavar="FILE",
        help="also replace the section between <!-- bench:begin --> and <!-- bench:end --> of FILE with the report",
    )
    bench.add_argument(
        "--fresh-bodies",
        action="store_true",
        help="empty innergraph's body table before each timed compilation: first-compilation figures, not repeated ones",
    )
    bench.add_argument("--no-chart", action="store_true", help="do not write ratios.png")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command == "bench":
        return _bench(args, parser)
    return _demo(args, parser)


# Demonstration ------------------------------------------------------------------------


def _demo(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    if args.k < 1 or args.repeats < 1:
        parser.error("-k and --repeats must be at least 1")
    demo.run(k=args.k, linker=args.linker, repeats=args.repeats, show_graphs=args.show_graphs)
    return 0


# Benchmark suite ----------------------------------------------------------------------


def _bench(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    if args.suite == "sampling":
        return _sampling(args, parser)
    try:
        if args.suite == "pymc":
            from innergraph_bench.pymc_models import pymc_cases

            chosen = pymc_cases(args.cases)
        else:
            chosen = cases.select(args.cases)
    except ValueError as error:
        parser.error(str(error))
    if args.list:
        for case in chosen:
            print(f"{case.id:<14} case {case.group:<5} {case.title} [{case.linker}]")
        return 0
    rounds, budget = (1, 0.05) if args.quick else (args.rounds, args.steady_budget)
    if rounds < 1 or budget <= 0:
        parser.error("--rounds must be at least 1 and --steady-budget positive")
    args.out.mkdir(parents=True, exist_ok=True)
    results = []
    for i, case in enumerate(chosen, 1):
        print(f"[{i}/{len(chosen)}] {case.id}: {case.title} ...", end=" ", flush=True)
        result = bench.measure_case(case, rounds=rounds, steady_budget=budget, fresh_bodies=args.fresh_bodies)
        results.append(result)
        ratios = ", ".join(f"{title} {result.ratio(attr):.2f}" for attr, title in bench.METRICS)
        print(f"{ratios}, nodes {result.ratio('total_nodes'):.2f}", flush=True)
    for (family, ops), row in bench.family_slopes(results).items():
        slope = row["slope"]
        print(f"{family} {ops} ops: compile ms per extra loop, vanilla {slope['vanilla'] * 1e3:.1f}, innergraph {slope['innergraph'] * 1e3:.1f}")
    report = bench.markdown_report(results, header=_header(f"warm, {rounds} round(s), steady budget {budget} s per variant"))
    if args.suite == "pymc" and not args.no_cold:
        print("cold starts (each variant in a fresh process, empty compile cache):", flush=True)
        colds = cold.cold_starts([case.id for case in chosen])
        report += "\n### Cold start and edited rerun\n\n" + "\n".join(cold.cold_report(colds)) + "\n"
    path = args.out / "benchmarks.md"
    path.write_text(report)
    print(f"wrote {path}")
    if not args.no_chart:
        try:
            print(f"wrote {bench.write_chart(results, args.out / 'ratios.png')}")
        except ImportError:
            print("matplotlib is not installed (pip install 'innergraph[bench]'): no chart written")
    if args.update is not None:
        args.update.write_text(bench.splice(args.update.read_text(), report))
        print(f"updated {args.update}")
    return 0


def _sampling(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from innergraph_bench.pymc_models import MODELS, PLAIN_MODELS

    every = {**MODELS, **PLAIN_MODELS}
    chosen = args.cases or SAMPLING_CASES
    unknown = [c for c in chosen if c not in every]
    if unknown:
        parser.error(f"no PyMC model {unknown}; models: {', '.join(every)}")
    if args.list:
        print("\n".join(chosen))
        return 0
    draws = 20 if args.quick else args.draws
    print(f"sampling ({draws} tuning steps and draws, one chain; each variant in fresh processes, cold then warm):", flush=True)
    results = cold.sampling_runs(chosen, draws=draws, tune=draws)
    header = _header(
        f"one chain, {draws} tuning steps and {draws} draws, seed 2026; each variant in fresh processes, cold "
        "(an empty compile cache) then warm (the cache the cold run left)"
    )
    report = "\n".join(["### Samplers' wall time", "", header, "", *cold.sampling_report(results), ""])
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "sampling.md"
    path.write_text(report)
    print(report)
    print(f"wrote {path}")
    return 0


#: The models `--suite sampling` samples by default: the loop models a user waits for, and one without a loop.
SAMPLING_CASES = ["pymc-garch-potential", "pymc-garch-customdist", "pymc-groups-8", "pymc-structural", "pymc-eight-schools"]


def _header(how: str) -> str:
    """A report's first line: the machine, the versions, ``how`` it was measured and the command."""
    import numba

    command = "python -m innergraph " + " ".join(sys.argv[1:]) if sys.argv[1:] else "python -m innergraph bench"
    return (
        f"Measured {datetime.date.today().isoformat()} on {platform.machine()} with {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, PyTensor {pytensor.__version__}, Numba {numba.__version__}; "
        f"{how}. Command: `{command}`."
    )


if __name__ == "__main__":
    raise SystemExit(main())
