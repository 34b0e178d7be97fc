"""Where Numba's time goes: every compilation of one first call, taken apart.

Terms
-----
compilation
    One ``numba:compile`` event: Numba typing, lowering and optimising one
    function for one signature (a dispatcher's overload). Nested compilations (a
    function compiling what it calls) are their own records.
exclusive seconds
    A compilation's wall time less the compilations nested in it.
LLVM seconds
    The time a compilation spent holding Numba's LLVM lock, nested compilations
    excluded: optimising its module, the code of every library it links
    included, and emitting machine code.
linked library
    The code of a callee that Numba links into a caller's LLVM module (and
    optimises again there): each entry of a library's ``_linking_libraries``,
    transitively. ``reoptimised`` counts, per callee, how many callers' modules
    held its code.
Op
    The PyTensor Op (or ``FunctionGraph``) whose conversion produced a function,
    recorded by wrapping ``numba_funcify_ensure_cache`` for the run.

One child per measurement, each in a fresh process::

    python -m innergraph_bench.numba_time CASE VARIANT [--edited] --out FILE.json

The JSON holds the figures of `innergraph_bench.cold`'s ``nuts`` child and one
record per compilation; `summary` reads it. `compare` (``python -m
innergraph_bench.numba_time --compare CASE ...``) runs, per case and variant (the
order alternating case by case), the cold start on an empty compile directory, the
edited rerun and the unchanged rerun on the cache it left, and prints the table of
``design/benchmarks.md``, "Where Numba's time goes".
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from innergraph_bench.cold import child_env, nuts_figures  # imports neither PyMC nor innergraph

__all__ = ["RUNS", "VARIANTS", "CompileRecorder", "compare", "summary"]


class CompileRecorder:
    """Records Numba's compilations while active (see the module's terms)."""

    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []
        self._ops: dict[int, str] = {}
        self._stack: list[list[Any]] = []

    def _note_op(self, op: Any, fn: Any) -> None:
        self._ops[id(getattr(fn, "py_func", fn))] = type(op).__name__ if not hasattr(op, "apply_nodes") else "FunctionGraph"

    def on_start(self, kind: str, data: Any) -> None:
        self._stack.append([time.perf_counter(), kind, data, 0.0, 0.0])

    def on_end(self) -> None:
        began, kind, data, nested, llvm = self._stack.pop()
        took = time.perf_counter() - began
        if kind == "numba:llvm_lock":
            if self._stack:
                self._stack[-1][4] += took
            return
        if self._stack:
            self._stack[-1][3] += took
        data = data or {}
        dispatcher = data.get("dispatcher")
        py_func = getattr(dispatcher, "py_func", None)
        args = tuple(data.get("args") or ())
        self.records.append({
            "function": getattr(py_func, "__name__", "?"),
            "op": self._ops.get(id(py_func), ""),
            "signature": ", ".join(str(a) for a in args)[:300],
            "seconds": took - nested,
            "llvm": llvm,
            "linked": _linked(dispatcher, args),
        })

    @contextmanager
    def active(self) -> Iterator[CompileRecorder]:
        """Listen to Numba's events and note each converted Op, until the block ends."""
        from numba.core import event
        from pytensor.link.numba.dispatch import basic

        recorder = self

        class Listener(event.Listener):
            def on_start(self, ev: Any) -> None:
                recorder.on_start(ev.kind, ev.data)

            def on_end(self, ev: Any) -> None:
                recorder.on_end()

        original = basic.numba_funcify_ensure_cache

        def noting(op: Any, node: Any = None, **kwargs: Any) -> Any:
            fn, key = original(op, node=node, **kwargs)
            recorder._note_op(op, fn)
            return fn, key

        listener = Listener()
        for kind in ("numba:compile", "numba:llvm_lock"):
            event.register(kind, listener)
        basic.numba_funcify_ensure_cache = noting
        try:
            yield self
        finally:
            basic.numba_funcify_ensure_cache = original
            for kind in ("numba:compile", "numba:llvm_lock"):
                event.unregister(kind, listener)


def _linked(dispatcher: Any, args: tuple[Any, ...]) -> list[str]:
    """The names of the libraries linked (transitively) into the overload just compiled."""
    overload = getattr(dispatcher, "overloads", {}).get(args)
    if overload is None:
        return []
    names, seen = [], set()
    todo = list(getattr(overload.library, "_linking_libraries", ()))
    while todo:
        library = todo.pop()
        if id(library) in seen:
            continue
        seen.add(id(library))
        names.append(library.name)
        todo.extend(library._linking_libraries)
    return names


def summary(data: dict[str, Any], top: int = 8) -> dict[str, Any]:
    """Totals and the heaviest compilations of one recorded run.

    ``outer``: the compilations of the compiled function itself (the converted
    ``FunctionGraph`` and the wrapper that calls it); ``loops``: Scans' functions;
    ``ops``: everything else. ``linked_per_compile``: libraries linked into each
    compilation, on average; ``reoptimised``: how often the most linked callees'
    code was optimised in a caller's module.
    """
    records = data["records"]
    kinds: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    for r in records:
        kind = "outer" if r["function"] == "numba_funcified_fgraph" else "loops" if r["function"] in ("scan", "numba_scan", "step_body_by_reference") else "ops"
        kinds[kind].append(r)
    linked = collections.Counter(name for r in records for name in r["linked"])
    return {
        "compilations": len(records),
        "seconds": sum(r["seconds"] for r in records),
        "llvm": sum(r["llvm"] for r in records),
        **{f"{k}_seconds": sum(r["seconds"] for r in v) for k, v in sorted(kinds.items())},
        **{f"{k}_llvm": sum(r["llvm"] for r in v) for k, v in sorted(kinds.items())},
        "linked_per_compile": sum(len(r["linked"]) for r in records) / max(len(records), 1),
        "reoptimised": linked.most_common(top),
        "heaviest": sorted(
            ({k: r[k] for k in ("function", "op", "signature", "seconds", "llvm")} | {"linked": len(r["linked"])} for r in records),
            key=lambda r: -r["seconds"],
        )[:top],
    }


#: The runs of one variant, in order, on one compile directory: (name, edited).
RUNS = (("cold", False), ("edited", True), ("rerun", False))


#: The variants a child can be: ``innergraph-linked`` is innergraph with every step body linked into its loop
#: and every node into the final function (none called by reference), to measure what calling by reference changes.
VARIANTS = ("vanilla", "innergraph", "innergraph-linked")


def compare(
    cases: Sequence[str], python: str = sys.executable, log: Any = print, variants: Sequence[str] = ("vanilla", "innergraph")
) -> list[str]:
    """Each variant's runs (`RUNS`) of each case, each a fresh child; a markdown table, each variant against the first."""
    first, others = variants[0], variants[1:]
    head = " | ".join(f"{v} | Numba functions | LLVM | ratio" for v in others)
    rows = [
        f"| case | run | {first}: function + first call | Numba functions | LLVM | {head} |",
        "| --- | --- | ---: | ---: | ---: |" + " ---: | ---: | ---: | ---: |" * len(others),
    ]
    for n, case in enumerate(cases):
        figures: dict[tuple[str, str], dict[str, Any]] = {}
        for variant in variants if n % 2 == 0 else variants[::-1]:
            with tempfile.TemporaryDirectory(prefix="innergraph-numba-time-") as compiledir:
                for run, edited in RUNS:
                    out = os.path.join(compiledir, f"{run}.json")
                    env = child_env(compiledir, python)
                    args = [python, "-m", "innergraph_bench.numba_time", case, variant, "--out", out, *(["--edited"] if edited else [])]
                    subprocess.run(args, env=env, check=True, capture_output=True)
                    with open(out) as f:
                        data = json.load(f)
                    figures[variant, run] = {**data, **summary(data)}
                    log(f"  {case} {variant} {run}: {data['function']:.2f} + {data['first_call']:.2f} s")
        for run, _ in RUNS:
            v = figures[first, run]
            cells = [f"{v['function']:.2f} + {v['first_call']:.2f} s | {v['compilations']} | {v['llvm']:.2f} s"]
            for other in others:
                i = figures[other, run]
                total = (i["function"] + i["first_call"]) / (v["function"] + v["first_call"])
                cells.append(f"{i['function']:.2f} + {i['first_call']:.2f} s | {i['compilations']} | {i['llvm']:.2f} s | {total:.2f}")
            rows.append(f"| {case} | {run} | {' | '.join(cells)} |")
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m innergraph_bench.numba_time", description=__doc__.split("\n")[0])
    parser.add_argument("--compare", nargs="+", metavar="CASE", help="run both variants' cold, edited and rerun children and print the table")
    parser.add_argument("case", nargs="?")
    parser.add_argument("variant", nargs="?", choices=VARIANTS)
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=["vanilla", "innergraph"], help="with --compare: the variants, the first the baseline")
    parser.add_argument("--edited", action="store_true")
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    if args.compare:
        print("\n".join(compare(args.compare, variants=args.variants)))
        return 0
    if not (args.case and args.variant and args.out):
        parser.error("a child needs CASE, VARIANT and --out")
    if args.variant != "vanilla":
        import innergraph  # noqa: F401  (installs itself)
    if args.variant == "innergraph-linked":
        from innergraph.backends import numba_reference

        numba_reference.MIN_NODES = sys.maxsize
        numba_reference.OUTER_NODES = False
    import warnings

    warnings.simplefilter("ignore")
    with CompileRecorder().active() as recorder:
        figures = nuts_figures(args.case, args.edited, steady_calls=50)
    data = {"case": args.case, "variant": args.variant, "edited": args.edited, **figures, "records": recorder.records}
    with open(args.out, "w") as out:
        json.dump(data, out)
    brief = summary(data)
    print(json.dumps({k: v for k, v in brief.items() if k not in ("heaviest", "reoptimised")}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
