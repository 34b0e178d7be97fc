"""Cold starts and samplers' wall time: each variant in a fresh process, with an empty compile cache.

Terms
-----
cold start
    ``pytensor.function`` (PyMC's compile of the NUTS function) plus its first
    call, in a process that never compiled anything before and whose
    ``base_compiledir`` is a new empty folder: Numba's on-disk cache, which
    PyTensor keeps under it, is empty too. This is what a user waits for with a
    new model, a changed machine or CI. Timed inside the process, after the imports
    and the model's construction, which are reported apart.
edited rerun
    The same model with one prior changed (`innergraph_bench.pymc_models.edited`),
    run in a new process after the original, the compile cache kept: what a user
    waits for after editing a model.
rerun
    The same model again, unchanged, in a new process on the cache the cold start
    and the edited rerun left: what a user waits for on every later run.
warm
    A second process on the cache the cold one left (for the samplers).
peak memory
    The child's peak resident set size (`peak_mb`: Linux's ``VmHWM``) when it is done: imports, the
    model, the compilation and the calls, so what the compiling process needed at most.
vanilla
    A process that never imports innergraph (the child is told which variant it is
    and imports innergraph only for ``innergraph``).

The parent (`cold_starts`, `sampling_runs`) starts one child per variant and
measurement, alternating the variants model by model so that drift on the machine
touches both alike, and sets one BLAS/OpenMP thread. The child is this module run
as ``python -m innergraph_bench.cold``; it prints one JSON line.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from innergraph_bench import pymc_models  # imports neither PyMC nor innergraph

__all__ = [
    "ColdResult", "child_env", "cold_report", "cold_starts", "compile_bytecode", "nuts_figures", "peak_mb", "sampling_report",
    "sampling_runs",
]

#: The environment every child runs with: one thread for BLAS and OpenMP.
THREADS = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


@dataclass
class ColdResult:
    """One model's figures for both variants (seconds), as the children reported them."""

    case: str
    runs: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)  # variant -> run name -> figures

    def figure(self, variant: str, run: str, key: str) -> float:
        return float(self.runs[variant][run][key])

    def ratio(self, run: str, key: str) -> float:
        return self.figure("innergraph", run, key) / self.figure("vanilla", run, key)


#: This repository's packages, whose bytecode `compile_bytecode` writes before the first child.
OWN_PACKAGES = ("innergraph", "innergraph_bench")

_COMPILE = """
import compileall, importlib.util, sys
for name in sys.argv[1:]:
    spec = importlib.util.find_spec(name)
    for folder in (spec.submodule_search_locations or []) if spec else []:
        print(("" if compileall.compile_dir(folder, quiet=1) else "failed: ") + folder)
"""

_compiled: dict[str, list[str]] = {}


def compile_bytecode(python: str = sys.executable, packages: Sequence[str] = OWN_PACKAGES) -> list[str]:
    """Write the bytecode of ``packages`` for ``python`` as ``pip install`` does: the folders, ``failed: `` before any it could not write.

    PyTensor and PyMC come from wheels, whose bytecode pip wrote at install time. This
    repository's packages are installed editable (the README's command): Python writes their
    bytecode on their first import, unless ``PYTHONDONTWRITEBYTECODE`` is set, as on this
    project's machines, and then every child compiles innergraph's sources again: about 0.2 s
    at ``import innergraph`` and 0.04 s inside the timed compile (the Numba backend loads on the
    first link), which an installed innergraph never pays and vanilla never pays for PyTensor.
    Compiling once before the first child (``compileall``, which writes whatever that variable
    says and is a no-op where the bytecode is current) measures both variants as installed.
    Done once per interpreter; the children import the same folders (the current directory
    first, as ``python -m`` does).
    """
    if python not in _compiled:
        done = subprocess.run([python, "-c", _COMPILE, *packages], capture_output=True, text=True, check=False)
        _compiled[python] = done.stdout.splitlines() or [f"failed: {done.stderr.strip()[-300:]}"]
    return _compiled[python]


def child_env(compiledir: str, python: str) -> dict[str, str]:
    """A child's environment: one BLAS thread, its own compile directory; the bytecode written first (`compile_bytecode`)."""
    compile_bytecode(python)
    return {**os.environ, **THREADS, "PYTENSOR_FLAGS": f"base_compiledir={compiledir}"}


def _child(args: list[str], compiledir: str, python: str) -> dict[str, Any]:
    env = child_env(compiledir, python)
    done = subprocess.run(
        [python, "-m", "innergraph_bench.cold", *args], env=env, capture_output=True, text=True, check=False
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"cold-start child {' '.join(args)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return dict(json.loads(lines[-1]))


def peak_mb(status: str = "/proc/self/status") -> float:
    """This process's peak resident set size in MB: ``VmHWM`` of ``status`` where Linux has it, else ``ru_maxrss``.

    Linux keeps ``ru_maxrss`` across ``execve``: a child started by a parent of 1.8 GB (the
    benchmark's parent after its warm cases) reports at least 1.8 GB whatever it used.
    ``VmHWM`` is the high-water mark of the process's own memory image, since its ``execve``.
    """
    try:
        with open(status) as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024  # kB
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kilobytes on Linux


def _order(n: int) -> tuple[str, str]:
    """The variants' order for the ``n``-th model: vanilla first, then innergraph first, in turn."""
    return ("vanilla", "innergraph") if n % 2 == 0 else ("innergraph", "vanilla")


def cold_starts(cases: Sequence[str], edited: bool = True, python: str = sys.executable, log: Any = print) -> list[ColdResult]:
    """Each case's cold start (and edited rerun) for both variants, each variant on its own empty compile cache."""
    results = []
    for n, case in enumerate(cases):
        result = ColdResult(case)
        for variant in _order(n):
            with tempfile.TemporaryDirectory(prefix="innergraph-cold-") as compiledir:
                runs = {"cold": _child(["where", case, variant], compiledir, python)}
                if edited:
                    runs["edited"] = _child(["nuts", case, variant, "--edited"], compiledir, python)
                    runs["rerun"] = _child(["nuts", case, variant], compiledir, python)
            result.runs[variant] = runs
            cold = runs["cold"]
            log(f"  {case} {variant}: function {cold['function']:.2f} s + first call {cold['first_call']:.2f} s"
                + (f"; edited {runs['edited']['cold_start']:.2f} s; rerun {runs['rerun']['cold_start']:.2f} s" if edited else ""))
        results.append(result)
    return results


def sampling_runs(
    cases: Sequence[str], draws: int = 300, tune: int = 300, samplers: Sequence[str] = ("pymc", "nutpie"),
    python: str = sys.executable, log: Any = print,
) -> list[ColdResult]:
    """Each case sampled by each sampler, cold then warm (the cache the cold run left), for both variants."""
    results = []
    for n, (case, sampler) in enumerate((case, sampler) for case in cases for sampler in samplers):
        result = ColdResult(f"{case} / {sampler}")
        for variant in _order(n):
            with tempfile.TemporaryDirectory(prefix="innergraph-sample-") as compiledir:
                args = ["sample", case, variant, "--sampler", sampler, "--draws", str(draws), "--tune", str(tune)]
                result.runs[variant] = {"cold": _child(args, compiledir, python), "warm": _child(args, compiledir, python)}
            figures = result.runs[variant]
            log(f"  {result.case} {variant}: cold total {figures['cold']['total']:.2f} s, warm total {figures['warm']['total']:.2f} s")
        results.append(result)
    return results


def _cells(cells: Sequence[Any]) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def cold_report(results: Sequence[ColdResult]) -> list[str]:
    """Markdown tables: cold starts and edited reruns, innergraph against vanilla; where the cold start goes."""
    edited = all("edited" in r.runs["vanilla"] for r in results)
    head = ["case", "vanilla: function + first call", "innergraph", "cold ratio", "steady ratio", "peak memory v → ig", "ratio"]
    if edited:
        head += ["edited rerun: vanilla", "innergraph", "ratio", "rerun: vanilla", "innergraph", "ratio"]
    lines = [_cells(head), _cells(["---"] + ["---:"] * (len(head) - 1))]
    for r in results:
        v, i = r.runs["vanilla"]["cold"], r.runs["innergraph"]["cold"]
        row = [
            r.case,
            f"{v['function']:.2f} + {v['first_call']:.2f} s",
            f"{i['function']:.2f} + {i['first_call']:.2f} s",
            f"{r.ratio('cold', 'cold_start'):.2f}",
            f"{r.ratio('cold', 'steady'):.2f}",
            f"{v['peak_mb']:.0f} → {i['peak_mb']:.0f} MB",
            f"{r.ratio('cold', 'peak_mb'):.2f}",
        ]
        if edited:
            row += [
                f"{r.figure('vanilla', 'edited', 'cold_start'):.2f} s",
                f"{r.figure('innergraph', 'edited', 'cold_start'):.2f} s",
                f"{r.ratio('edited', 'cold_start'):.2f}",
            ]
            if "rerun" in r.runs["vanilla"]:
                row += [
                    f"{r.figure('vanilla', 'rerun', 'cold_start'):.2f} s",
                    f"{r.figure('innergraph', 'rerun', 'cold_start'):.2f} s",
                    f"{r.ratio('rerun', 'cold_start'):.2f}",
                ]
        lines.append(_cells(row))
    lines += [
        "",
        "Where the cold start goes (seconds; `function`: rewriting and linking; the first call's Numba "
        "compilation: `loops`, the Scans' functions with what they call; `rest`, the other functions and the "
        "outer one; `LLVM`, the part of both under Numba's LLVM lock; functions: how many Numba compiled):",
        "",
        _cells(["case", "variant", "function", "first call: loops", "rest", "(LLVM)", "Numba functions"]),
        _cells(["---", "---", "---:", "---:", "---:", "---:", "---:"]),
    ]
    for r in results:
        for variant in ("vanilla", "innergraph"):
            c = r.runs[variant]["cold"]
            if "loops" in c:
                lines.append(_cells([
                    r.case, variant, f"{c['function']:.2f}", f"{c['loops']:.2f}", f"{c['rest']:.2f}", f"{c['llvm']:.2f}",
                    c["numba_functions"],
                ]))
    return lines


def sampling_report(results: Sequence[ColdResult]) -> list[str]:
    """A markdown table of the samplers' compile, sampling and total wall time, cold and warm."""
    head = ["model / sampler", "run", "vanilla: compile + sampling", "innergraph", "total ratio", "peak memory v → ig", "ratio"]
    lines = [_cells(head), _cells(["---", "---", "---:", "---:", "---:", "---:", "---:"])]
    for r in results:
        for run in ("cold", "warm"):
            v, i = r.runs["vanilla"][run], r.runs["innergraph"][run]
            lines.append(_cells([
                r.case, run, f"{v['compile']:.2f} + {v['sampling']:.2f} s", f"{i['compile']:.2f} + {i['sampling']:.2f} s",
                f"{r.ratio(run, 'total'):.2f}", f"{v['peak_mb']:.0f} → {i['peak_mb']:.0f} MB", f"{r.ratio(run, 'peak_mb'):.2f}",
            ]))
    return lines


# The child -----------------------------------------------------------------------


def nuts_figures(case: str, edited: bool, steady_calls: int) -> dict[str, Any]:
    """The NUTS function of ``case`` compiled with PyMC's compile and called: build, function, first call, steady (seconds).

    ``collector``: the seconds CPython's collector took during the function phase and the first
    call, ``full_collections`` how many of its collections were full ones.
    """
    start = time.perf_counter()
    model = pymc_models.build(case, edited=edited)
    (inputs, outputs), point = pymc_models.nuts_graph(model)
    built = time.perf_counter()
    from pymc.pytensorf import compile as pymc_compile

    collecting = _CollectorTime()
    gc.callbacks.append(collecting)
    try:
        fn = pymc_compile(inputs, outputs, mode="NUMBA")
        compiled = time.perf_counter()
        value = fn(point)
        called = time.perf_counter()
    finally:
        gc.callbacks.remove(collecting)
    fn(point)
    begin = time.perf_counter()
    for _ in range(steady_calls):
        fn(point)
    steady = (time.perf_counter() - begin) / steady_calls
    return {
        "build": built - start, "function": compiled - built, "first_call": called - compiled,
        "cold_start": called - built, "steady": steady, "logp": float(value[0]),
        "collector": collecting.seconds, "full_collections": collecting.full,
    }


class _CollectorTime:
    """A `gc.callbacks` entry: the seconds CPython's collector took, and its full collections (generation 2)."""

    def __init__(self) -> None:
        self.seconds, self.full, self._began = 0.0, 0, 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._began = time.perf_counter()
            return
        self.seconds += time.perf_counter() - self._began
        self.full += info["generation"] == 2


def _covered(intervals: list[tuple[float, float]]) -> float:
    """The time the union of ``intervals`` covers (nested spans, a loop in a loop, count once)."""
    total, reached = 0.0, float("-inf")
    for start, end in sorted(intervals):
        if end > reached:
            total += end - max(start, reached)
            reached = end
    return total


def _where(case: str, steady_calls: int, edited: bool = False) -> dict[str, Any]:
    """Where a cold start goes: `nuts_figures`, and the first call's Numba compilations taken apart.

    ``edited``: of the model with one prior changed (the edited rerun), as for ``nuts``.

    ``numba_functions``: functions Numba compiled; ``llvm``: time under Numba's LLVM
    lock (optimising and emitting machine code); ``loops``: compiling the Scans'
    functions, what they call included; ``rest``: the first call's other time
    (typing and lowering the other functions, the outer function itself).
    """
    from numba.core import event

    spans: list[tuple[str, float, float]] = []  # (event:function, start, end)
    stack: list[tuple[float, str]] = []

    class Listener(event.Listener):
        def on_start(self, ev: Any) -> None:
            data = ev.data or {}
            name = getattr(getattr(data.get("dispatcher"), "py_func", None), "__name__", ev.kind)
            stack.append((time.perf_counter(), f"{ev.kind}:{name}"))

        def on_end(self, ev: Any) -> None:
            began, name = stack.pop()
            spans.append((name, began, time.perf_counter()))

    listener = Listener()
    for kind in ("numba:compile", "numba:llvm_lock"):
        event.register(kind, listener)
    figures = nuts_figures(case, edited=edited, steady_calls=steady_calls)
    compiles = [s for s in spans if s[0].startswith("numba:compile")]
    in_loops = _covered([(start, end) for name, start, end in compiles if name.endswith(":scan")])
    llvm = _covered([(start, end) for name, start, end in spans if name.startswith("numba:llvm_lock")])
    return {
        **figures, "numba_functions": len(compiles), "llvm": llvm, "loops": in_loops,
        "rest": figures["first_call"] - in_loops,
    }


def _sample(case: str, sampler: str, draws: int, tune: int, edited: bool = False) -> dict[str, Any]:
    model = pymc_models.build(case, edited=edited)
    start = time.perf_counter()
    if sampler == "nutpie":
        import nutpie

        compiled = nutpie.compile_pymc_model(model, backend="numba")
        ready = time.perf_counter()
        trace = nutpie.sample(compiled, draws=draws, tune=tune, chains=1, seed=2026, progress_bar=False)
    else:
        import pymc as pm

        with model:
            step = pm.NUTS(compile_kwargs={"mode": "NUMBA"})
            ready = time.perf_counter()
            trace = pm.sample(
                draws=draws, tune=tune, chains=1, cores=1, step=step, random_seed=2026, progressbar=False,
                compute_convergence_checks=False, compile_kwargs={"mode": "NUMBA"},
            )
    done = time.perf_counter()
    first = next(iter(trace.posterior.data_vars.values()))
    return {"compile": ready - start, "sampling": done - ready, "total": done - start, "mean": float(first.mean())}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m innergraph_bench.cold", description="one cold-start child (see the module)")
    parser.add_argument("what", choices=("nuts", "sample", "where"))
    parser.add_argument("case")
    parser.add_argument("variant", choices=("vanilla", "innergraph"))
    parser.add_argument("--edited", action="store_true", help="the model with one prior changed (every command)")
    parser.add_argument("--steady-calls", type=int, default=200)
    parser.add_argument("--sampler", choices=("pymc", "nutpie"), default="pymc")
    parser.add_argument("--draws", type=int, default=300)
    parser.add_argument("--tune", type=int, default=300)
    args = parser.parse_args(argv)
    start = time.perf_counter()
    if args.variant == "innergraph":
        import innergraph  # noqa: F401  (installs itself)
    import pymc  # noqa: F401
    imported = time.perf_counter() - start
    import warnings

    warnings.simplefilter("ignore")
    if args.what == "nuts":
        figures = nuts_figures(args.case, args.edited, args.steady_calls)
    elif args.what == "where":
        figures = _where(args.case, args.steady_calls, args.edited)
    else:
        figures = _sample(args.case, args.sampler, args.draws, args.tune, args.edited)
    print(json.dumps({"case": args.case, "variant": args.variant, "import": imported, **figures, "peak_mb": peak_mb()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
