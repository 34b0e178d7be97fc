"""PyTensor's whole test suite on the first written steps, judged against vanilla test by test; resumable.

``python -m innergraph_patches whole-suite --steps K --out DIR`` runs every test file of the
rel-3.3.0 tree (``../shared/upstream/pytensor-3.3/tests``) twice, on PyTensor's sdist as
released and on the same sdist with the written steps 1-K applied (`innergraph_patches.steps`,
``patches/pr-1/`` ...), and compares the two records id by id with CI's judge
(``.ci/outcomes.py``, `outcomes.compare`): a test vanilla passes or xfails must do so with the
steps, one it runs must not be skipped or missing, no module may fail to collect only with the
steps, no pytest may be killed. It is what issue 50 asks of a step written as a pull request
("PyTensor's full test suite on it equal to vanilla id by id"); the whole suite takes hours on
2 cores, so it is a documented command, not a CI step.

Terms
-----
variant
    ``vanilla`` (the sdist installed as released) or ``steps-1-K`` (the sdist with the written
    steps 1 to K applied by ``git apply``, in order). Each has its own environment, built from
    the same pinned requirements (vanilla's ``pip freeze``), and its own compile directory, both
    under ``DIR/<variant>/``; innergraph is never installed in them.
file record
    ``DIR/<variant>/records/<file>.jsonl``: one test file's outcomes, written by ``.ci/outcomes.py``'s
    pytest plugin through ``run.sh`` (``NO_X=1``: every test of the file runs; ``FULL=1``: run.sh's
    heavy tests are kept; ``--benchmark-disable``: ``tests/benchmarks/`` runs each benchmark once
    as a test). A file is *done* when ``<file>.done`` is beside its record; a file
    that ran past ``--timeout`` (a wall-clock limit, which a machine busy with other work can
    reach) is not, and is run again by the next run.
the steps' own tests
    The test files the applied patches add or edit (``tests/link/numba/test_cache.py`` for
    step 1), run after the whole suite in the steps' environment from a copy of the tree with
    the patched files laid over it; they do not exist in vanilla, so they are counted, not
    compared, and any failure fails the run.
resumable
    A second run with the same ``--out`` runs only the files not done in a variant (a file cut
    off by a stopped run is run again from its start), so the hours can be spread over several
    sittings. The two variants run side by side, one process each.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from innergraph_patches.sdist import PYTENSOR_VERSION, extract, sdist_path
from innergraph_patches.steps import STEPS, Step, written_patch
from innergraph_patches.verify import OUTCOMES_PLUGIN, UPSTREAM_RUNNER, outcomes, recording_python, upstream_env

__all__ = ["REQUIREMENTS", "compare_records", "main", "own_tests", "prepare", "run_own_tests", "run_variant", "test_files"]

#: What PyTensor's tests need beside PyTensor (its ``tests`` and ``jax`` extras, less the linters
#: and coverage): installed in vanilla's environment, then pinned for the steps' by its ``pip freeze``.
REQUIREMENTS = ("pytest", "pytest-mock", "pytest-benchmark", "jax[cpu]", "etuples", "logical-unification", "miniKanren", "cons")

_TREE = UPSTREAM_RUNNER.parent / "pytensor-3.3"


def test_files(tree: Path = _TREE) -> list[str]:
    """Every test file of the tree (``tests/**/test_*.py``), sorted, relative to it."""
    return sorted(str(p.relative_to(tree)) for p in (tree / "tests").rglob("test_*.py"))


def _written(steps: int) -> list[Step]:
    """The written steps 1 to ``steps`` (fewer if fewer are written)."""
    return [step for step in STEPS if step.pr][:steps]


def own_tests(steps: int) -> list[str]:
    """The test files the written steps 1 to ``steps`` add or edit, in order of first appearance."""
    found: dict[str, None] = {}
    for step in _written(steps):
        for match in re.finditer(r"^\+\+\+ b/(tests/\S+\.py)$", written_patch(step).read_text(), flags=re.M):
            found.setdefault(match.group(1), None)
    return list(found)


def _variant_names(steps: int) -> tuple[str, str]:
    return "vanilla", f"steps-1-{steps}"


def _say(line: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {line}", flush=True)


def _check(command: list[str], cwd: Path | None = None) -> str:
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"failed: {' '.join(command)}\n{(done.stdout + done.stderr)[-3000:]}")
    return done.stdout


def prepare(out: Path, steps: int, sdist: Path | None = None) -> dict[str, Path]:
    """Build (once) both variants' environments under ``out``; return each variant's interpreter.

    The steps' environment installs vanilla's ``pip freeze`` (less PyTensor) as constraints, so
    both run the same versions of everything but PyTensor's own code.
    """
    written = _written(steps)
    if len(written) < steps:
        raise SystemExit(f"--steps {steps}: only {len(written)} steps are written as pull requests")
    pythons = {}
    freeze = out / "vanilla" / "requirements.txt"
    for variant, applied in zip(_variant_names(steps), ([], written), strict=True):
        home = out / variant
        python = home / "venv" / "bin" / "python"
        pythons[variant] = python
        if (home / "venv" / ".ready").is_file():
            continue
        _say(f"{variant}: extracting PyTensor {PYTENSOR_VERSION}'s sdist, applying {len(applied)} written steps, installing")
        home.mkdir(parents=True, exist_ok=True)
        tree = extract(sdist_path(sdist), home / "src")
        for step in applied:
            _check(["git", "apply", str(written_patch(step))], cwd=tree)
        _check([sys.executable, "-m", "venv", "--clear", str(home / "venv")])
        pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        if variant == "vanilla":
            _check([*pip, str(tree), *REQUIREMENTS])
            pinned = [line for line in _check([str(python), "-m", "pip", "freeze"]).splitlines() if not line.lower().startswith("pytensor")]
            freeze.write_text("\n".join(pinned) + "\n")
        else:
            _check([*pip, "-c", str(freeze), str(tree), *REQUIREMENTS])
        (home / "venv" / ".ready").write_text(f"PyTensor {PYTENSOR_VERSION} + written steps {[s.pr for s in applied]}\n")
    return pythons


def _record_path(home: Path, test_file: str) -> Path:
    return home / "records" / (test_file.replace("/", "__") + ".jsonl")


def run_variant(out: Path, variant: str, python: Path, files: list[str], timeout: int) -> None:
    """Run ``files`` not yet done in ``variant``, one run.sh per file, each recorded on its own."""
    home = out / variant
    (home / "records").mkdir(parents=True, exist_ok=True)
    wrapper = recording_python(python, home / "wrapper")
    todo = [f for f in files if not _record_path(home, f).with_suffix(".done").is_file()]
    _say(f"{variant}: {len(files) - len(todo)} of {len(files)} files done before; running {len(todo)}")
    for n, test_file in enumerate(todo, 1):
        record = _record_path(home, test_file)
        record.unlink(missing_ok=True)
        settings = upstream_env(
            wrapper, record, test_file, str(timeout), extra="--benchmark-disable", FULL="1", COMPILEDIR=str(home / "compiledir")
        )
        started = time.monotonic()
        done = subprocess.run(["bash", str(UPSTREAM_RUNNER)], env={**os.environ, **settings}, capture_output=True, text=True)
        line = next((m.group(0) for m in re.finditer(r"^tests/\S+\.py +rc=.*$", done.stdout, flags=re.M)), "no line from run.sh")
        record.with_suffix(".log").write_text(done.stdout + done.stderr)
        if "TIMEOUT after" in line:  # a wall-clock limit, so a machine busy elsewhere can cause it: not done, run again
            _say(f"{variant} [{n}/{len(todo)}] {line} -- not done: the next run takes it again")
            continue
        record.with_suffix(".done").write_text(f"{time.monotonic() - started:.0f}\n")
        _say(f"{variant} [{n}/{len(todo)}] {line}")


def run_own_tests(out: Path, steps: int, python: Path) -> tuple[bool, str]:
    """Run `own_tests` in the steps' environment, from the tree with the patched test files laid over it."""
    files = own_tests(steps)
    if not files:
        return True, "the steps add or edit no test file"
    home = out / _variant_names(steps)[1]
    tree = home / "own-tree"
    shutil.rmtree(tree, ignore_errors=True)
    shutil.copytree(_TREE, tree)
    source = next((home / "src").glob("pytensor-*"))
    for test_file in files:
        shutil.copy2(source / test_file, tree / test_file)
    record = home / "own.jsonl"
    record.unlink(missing_ok=True)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tree), str(OUTCOMES_PLUGIN.parent)]),
        "OUTCOMES_RECORD": str(record),
        "PYTENSOR_FLAGS": f"base_compiledir={home / 'compiledir'}",
    }
    done = subprocess.run([str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "outcomes", *files], cwd=tree, env=env, capture_output=True, text=True)
    last = (done.stdout.strip().splitlines() or ["no output"])[-1]
    return done.returncode == 0, f"the steps' own tests ({', '.join(files)}): {last}"


def compare_records(out: Path, steps: int, files: list[str]) -> tuple[bool, str]:
    """Judge the steps' records against vanilla's on the files done in both; the report's text."""
    tool = outcomes()
    names = _variant_names(steps)
    records = []
    done = [f for f in files if all(_record_path(out / v, f).with_suffix(".done").is_file() for v in names)]
    for variant in names:
        merged = out / variant / "all.jsonl"
        merged.write_text("".join(_record_path(out / variant, f).read_text() for f in done if _record_path(out / variant, f).is_file()))
        records.append(tool.read_record(merged, variant))
    comparison = tool.compare(records[0], records[1], {}, files=done, disabled={"variant"})
    # the judge names its second record "innergraph"; here it is the steps
    judged = (
        tool.report(comparison)
        .replace("outcomes: innergraph ", f"outcomes: {names[1]} ")
        .replace("innergraph keeps", f"{names[1]} keeps")
        .replace("same with innergraph", f"same with {names[1]}")
    )
    lines = [f"PyTensor {PYTENSOR_VERSION}, the rel-3.3.0 tree: {len(done)} of {len(files)} test files run in both variants", judged]
    for variant, record in zip(names, records, strict=True):
        lines += [f"-- {variant}, per file:", tool.summary(record)]
    return not comparison.failures, "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m innergraph_patches whole-suite", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=1, help="apply the written steps 1 to K (default 1)")
    parser.add_argument("--out", type=Path, required=True, help="the environments, compile directories and records (kept; a second run resumes)")
    parser.add_argument("--files", nargs="*", default=None, help="test files of the tree (default: every one)")
    parser.add_argument("--timeout", type=int, default=3600, help="seconds per test file (default 3600)")
    parser.add_argument("--compare-only", action="store_true", help="judge the files done so far and stop")
    parser.add_argument("--sdist", type=Path, default=None)
    args = parser.parse_args(argv)
    if not UPSTREAM_RUNNER.is_file():
        raise SystemExit(f"PyTensor's test runner {UPSTREAM_RUNNER} is missing")
    files = args.files or test_files()
    unknown = [f for f in files if not (_TREE / f).is_file()]
    if unknown:
        raise SystemExit(f"not test files of {_TREE}: {', '.join(unknown)}")
    if args.compare_only and not all((args.out / v / "records").is_dir() for v in _variant_names(args.steps)):
        raise SystemExit(f"nothing to compare in {args.out}: run it without --compare-only first")
    args.out.mkdir(parents=True, exist_ok=True)
    if not args.compare_only:
        pythons = prepare(args.out, args.steps, args.sdist)
        failed: list[Any] = []

        def work(variant: str) -> None:
            try:
                run_variant(args.out, variant, pythons[variant], files, args.timeout)
            except BaseException as e:  # reported after both finish
                failed.append((variant, e))

        threads = [threading.Thread(target=work, args=(v,)) for v in _variant_names(args.steps)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if failed:
            raise SystemExit(f"a variant stopped: {failed}")
    same, text = compare_records(args.out, args.steps, files)
    own_ok, own = run_own_tests(args.out, args.steps, args.out / _variant_names(args.steps)[1] / "venv" / "bin" / "python")
    (args.out / "report.txt").write_text(f"{text}\n{own}\n")
    print("\n".join(line for line in text.splitlines() if not line.startswith(("tests/", "-- "))))
    print(own)
    return 0 if same and own_ok else 1
