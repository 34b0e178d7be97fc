"""Processes compiling on one compile directory while another damages its cache files.

``python -m innergraph_bench.cache_stress [--rounds N] [--processes P]`` checks what
`design/numba-linking.md` promises of innergraph's caches (Numba's entries and the store of
rewritten graphs) when several processes share ``base_compiledir`` and files in it are damaged
at any moment, not only before a process starts:

* the reference: the model's values under vanilla PyTensor's Python linker (a process that
  never imports innergraph), for each of two constants (the model edited);
* each round, on a fresh compile directory: a first wave of P processes compiling the model
  under Numba at once (cold), then a second wave on the same directory; in odd rounds a
  damager runs through both waves, in even rounds through the second only. The damager picks a
  random ``.nbi``, ``.nbc`` or ``.graph`` file every 0.05-0.4 s and truncates it or writes
  garbage over its first 64 bytes.

Every process must give the reference's values (relative 1e-12); warnings are expected (one
per damaged entry it met) and counted. A process that fails or differs is reported with its
traceback, and the exit status is 1. Minutes per round on 2 cores (six cold Numba compilations
of a loop with its gradient); a documented command, not a CI step.

Terms
-----
model
    A ``pytensor.scan`` of 5 steps whose 24-node body is called by reference under Numba, its
    gradient, and two calls of one ``OpFromGraph``: the kinds of entries innergraph writes
    (converted functions, bodies, nodes called by reference, final functions, PyTensor's
    wrappers, rewritten graphs).
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from innergraph_bench.cold import child_env

__all__ = ["CHILD", "DAMAGED_SUFFIXES", "Outcome", "Tally", "damage_one", "judge", "main", "run_child"]

#: The files the damager picks from: Numba's indexes and data, and the store's entries.
DAMAGED_SUFFIXES = (".nbi", ".nbc", ".graph")

#: One process: argv = variant (python | innergraph), the model's constant. Prints one JSON line.
CHILD = textwrap.dedent(
    """
    import json, sys, traceback, warnings
    variant, number = sys.argv[1], float(sys.argv[2])
    if variant == "innergraph":
        import innergraph
    import numpy as np, pytensor, pytensor.tensor as pt
    from pytensor.compile.builders import OpFromGraph

    x, A = pt.dvector("x"), pt.dmatrix("A")

    def step(v, A):
        y = pt.tanh(pt.dot(A, v)) * number
        z = y / (1.0 + pt.abs(y).sum())
        w = pt.concatenate([z[1:], z[:1]])
        return w + pt.dot(A.T, z) * 0.5 + pt.max(w)

    ys = pytensor.scan(step, outputs_info=[x], non_sequences=[A], n_steps=5, return_updates=False)
    gradient = pytensor.grad((ys[-1] ** 2).sum(), x)
    a, b = pt.dvector("a"), pt.dvector("b")
    density = OpFromGraph([a, b], [pt.log1p(pt.exp(a - b)) * 0.5 - pt.sqr(a) * number])
    called = density(x, x * 2.0).sum() + density(x * 3.0, x).sum()
    mode = pytensor.compile.mode.Mode(linker="py", optimizer="fast_run") if variant == "python" else "NUMBA"
    rng = np.random.default_rng(0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            fn = pytensor.function([x, A], [ys[-1], gradient, called], mode=mode)
            value, error = [np.asarray(v).tolist() for v in fn(rng.normal(size=4), rng.normal(size=(4, 4)))], None
        except Exception:
            value, error = None, traceback.format_exc()[-4000:]
    print(json.dumps({"value": value, "error": error,
                      "warnings": [str(w.message) for w in caught if "innergraph" in str(w.message)]}))
    """
)


@dataclass
class Outcome:
    """What one process gave: its values (or its traceback) and innergraph's warnings."""

    value: list[Any] | None
    error: str | None
    warnings: list[str] = field(default_factory=list)


def run_child(compiledir: Path, variant: str, number: float) -> subprocess.Popen[str]:
    """Start one process compiling the model (`CHILD`) on ``compiledir``, in `innergraph_bench.cold`'s child environment."""
    env = child_env(str(compiledir), sys.executable)
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, variant, repr(number)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _outcome(process: subprocess.Popen[str]) -> Outcome:
    out, err = process.communicate()
    lines = out.strip().splitlines()
    try:
        printed = json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        return Outcome(None, f"no result (exit status {process.returncode}):\n{err[-4000:]}")
    return Outcome(printed["value"], printed["error"], printed["warnings"])


def judge(outcome: Outcome, reference: Sequence[Any]) -> str | None:
    """Why ``outcome`` is wrong (its error, or the first output that differs from ``reference``), or None."""
    if outcome.error is not None or outcome.value is None:
        return outcome.error or "no value"
    if len(outcome.value) != len(reference):
        return f"{len(outcome.value)} outputs, expected {len(reference)}"
    for i, (got, expected) in enumerate(zip(outcome.value, reference, strict=True)):
        if np.shape(got) != np.shape(expected) or not np.allclose(got, expected, rtol=1e-12, atol=1e-14):
            return f"output {i}: {got} where vanilla gives {expected}"
    return None


def damage_one(root: Path, rng: random.Random) -> str | None:
    """Truncate a random cache file under ``root``, or write garbage over its first 64 bytes; its name (None: none found)."""
    files = sorted(f for f in root.rglob("*") if f.suffix in DAMAGED_SUFFIXES and f.is_file())
    if not files:
        return None
    path = rng.choice(files)
    try:
        data = path.read_bytes()
        if rng.random() < 0.5:
            path.write_bytes(data[: rng.randrange(max(1, len(data)))])
        else:
            path.write_bytes(bytes(rng.randrange(256) for _ in range(64)) + data[64:])
    except OSError:  # removed meanwhile by a process that found it damaged
        return None
    return path.name


def _damager(root: Path, stop: threading.Event, damaged: list[str], seed: int) -> None:
    rng = random.Random(seed)
    while not stop.is_set():
        name = damage_one(root, rng)
        if name is not None:
            damaged.append(name)
        time.sleep(rng.uniform(0.05, 0.4))


@dataclass
class Tally:
    """What the rounds so far gave: processes run, innergraph's warnings, processes that failed, files damaged."""

    processes: int = 0
    warnings: int = 0
    failures: int = 0
    damaged: int = 0


def _references(numbers: Sequence[float]) -> dict[float, list[Any]] | str:
    """The model's values under vanilla's Python linker per constant, or the reference's error."""
    reference = {}
    for number in numbers:
        with tempfile.TemporaryDirectory() as scratch:
            outcome = _outcome(run_child(Path(scratch), "python", number))
        if outcome.value is None:
            return f"the reference failed:\n{outcome.error}"
        reference[number] = outcome.value
    return reference


def _round(r: int, processes: int, seed: int, reference: dict[float, list[Any]], tally: Tally) -> None:
    """Round ``r`` on a fresh compile directory: two waves of ``processes``, damaged as the module docstring says."""
    numbers = sorted(reference)
    root = Path(tempfile.mkdtemp(prefix="innergraph-cache-stress-"))
    damaged: list[str] = []
    try:
        for wave in (0, 1):
            stop = threading.Event()
            damager = None
            if wave == 1 or r % 2 == 1:
                damager = threading.Thread(target=_damager, args=(root, stop, damaged, seed + r))
                damager.start()
            started = [(numbers[i % 2], run_child(root, "innergraph", numbers[i % 2])) for i in range(processes)]
            for number, process in started:
                outcome = _outcome(process)
                tally.processes += 1
                tally.warnings += len(outcome.warnings)
                why = judge(outcome, reference[number])
                if why is not None:
                    tally.failures += 1
                    print(f"round {r}, wave {wave}, constant {number}: FAILED\n{why}")
            stop.set()
            if damager is not None:
                damager.join()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    tally.damaged += len(damaged)
    print(f"round {r}: {len(damaged)} files damaged; failures so far {tally.failures}", flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the rounds (module docstring); 0 when every process gave vanilla's values."""
    parser = argparse.ArgumentParser(prog="python -m innergraph_bench.cache_stress", description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4, help="rounds, each on a fresh compile directory (default 4)")
    parser.add_argument("--processes", type=int, default=3, help="processes per wave (default 3)")
    parser.add_argument("--seed", type=int, default=1, help="the damager's seed (default 1)")
    args = parser.parse_args(argv)
    reference = _references((1.5, 2.5))
    if isinstance(reference, str):
        print(reference)
        return 1
    tally = Tally()
    for r in range(args.rounds):
        _round(r, args.processes, args.seed, reference, tally)
    print(
        f"{tally.processes} processes, {tally.damaged} damaged files, {tally.warnings} warnings, "
        f"{tally.failures} processes failed or differed from vanilla"
    )
    return 1 if tally.failures else 0


if __name__ == "__main__":
    sys.exit(main())
