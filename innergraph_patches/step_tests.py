"""Check the regrouped steps on PyTensor trees of the steps up to each of them: imports, inertness, own tests.

``python -m innergraph_patches step-tests [--steps K]`` takes every regrouped step among
the first K (all by default: `innergraph_patches.steps`), lays steps 1 to that step on a
fresh extract of PyTensor's sdist (`innergraph_patches.build.step_tree`) and checks there,
from source (``PYTHONPATH``, nothing installed), that every module of ``pytensor.innergraph``
imports and that the tree is inert (the last step's: enabled). On the tree of a step with
tests of its own it runs them; on the last tree, the own tests of every step: a later step
must not break an earlier one's tests.

``python -m innergraph_patches step-tests --upstream K [K ...] --out DIR`` runs PyTensor's
own test files (``../shared/upstream/run.sh``'s default list, as CI's patched walk does) on
the tree of steps 1 to K, from source, and judges each test id against vanilla's outcome on
the sdist's plain tree run the same way (CI's judge, `innergraph_patches.verify.judge`; the
differences listed for innergraph apply only once the last step enables it). The records stay
in DIR; vanilla's is reused while its ``.done`` marker is there. Minutes per tree on 2 cores,
so a documented command, not a CI step.

Terms
-----
inert
    ``import pytensor`` loads no module of ``pytensor.innergraph``: before the last
    step nothing in PyTensor imports the package, so a tree of the first steps is
    PyTensor as released plus modules its users may import. Checked on every tree.
from source
    The tree's ``pytensor`` comes first on ``PYTHONPATH``, ahead of the PyTensor installed
    in the running environment (which must be the sdist's version, for its dependencies);
    the library ``innergraph`` may be installed there, and the check fails if the tests'
    process imported it.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from innergraph_patches.build import step_tree
from innergraph_patches.sdist import PYTENSOR_VERSION, extract, sdist_path
from innergraph_patches.series import SERIES
from innergraph_patches.shipping import REPOSITORY
from innergraph_patches.steps import STEPS, own_test_files
from innergraph_patches.verify import UPSTREAM_RUNNER, judge, outcomes, recording_python, run_summary, upstream_env

__all__ = ["main", "regrouped_steps", "run_step_tests", "steps_with_tests", "upstream_on_steps"]

#: Run in the tree: pytest on the given files, then a failure if the library innergraph was imported.
_RUN = """
import sys, pytest
code = pytest.main(["-q", "-p", "no:cacheprovider", *sys.argv[1:]])
if "innergraph" in sys.modules:
    print("FAILED: the tests' process imported the library innergraph, not only PyTensor's copy")
    code = code or 1
sys.exit(code)
"""

#: Run in the tree: the modules of ``pytensor.innergraph`` that ``import pytensor`` loads (first
#: line), then every module of ``pytensor/innergraph`` imported, one line per module that fails.
_IMPORTS = """
import importlib, pathlib, sys
import pytensor
print(sorted(m for m in sys.modules if m.startswith("pytensor.innergraph")))
for path in sorted(pathlib.Path("pytensor/innergraph").rglob("*.py")):
    name = ".".join(path.with_suffix("").parts).removesuffix(".__init__")
    try:
        importlib.import_module(name)
    except Exception as error:
        print(f"{name}: {type(error).__name__}: {error}")
"""


def steps_with_tests(steps: int | None = None) -> list[int]:
    """The numbers (from 1) of the regrouped steps among the first ``steps`` that have tests of their own."""
    last = len(STEPS) if steps is None else steps
    return [n for n, step in enumerate(STEPS[:last], 1) if step.tests]


def regrouped_steps(steps: int | None = None) -> list[int]:
    """The numbers (from 1) of the regrouped steps (modules or edits of the series) among the first ``steps``."""
    last = len(STEPS) if steps is None else steps
    return [n for n, step in enumerate(STEPS[:last], 1) if step.modules or step.edits]


def run_step_tests(
    number: int, scratch: Path, python: str = sys.executable, sdist: Path | None = None, run_tests: bool = True
) -> tuple[bool, str]:
    """Lay steps 1..``number`` in ``scratch``: every module imports, inert (or enabled by the last step), and (``run_tests``) their own tests pass; whether all held, and a report."""
    tree = step_tree(number, scratch, sdist)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    env["PYTENSOR_FLAGS"] = f"base_compiledir={scratch / 'compiledir'}"
    imports = subprocess.run([python, "-c", _IMPORTS], cwd=tree, env=env, capture_output=True, text=True)
    loaded, *unimportable = imports.stdout.strip().splitlines() or [""]
    enabling = number == len(STEPS)  # the last step enables innergraph on import
    # a step's tree runs its own tests; the last tree every step's (a later step must not break them)
    files = [str(p) for p in _own_paths(number, only_its_own=not enabling)] if run_tests else []
    modules = sum(1 for _ in (tree / "pytensor" / "innergraph").rglob("*.py"))
    if files:
        done = subprocess.run([python, "-c", _RUN, *files], cwd=tree, env=env, capture_output=True, text=True)
        lines = done.stdout.strip().splitlines()
        summary = next((line for line in reversed(lines) if " passed" in line or " failed" in line or " error" in line), "no summary")
        passed = done.returncode == 0
    else:
        lines, summary, passed = [], "own tests not run on this tree" if _own_paths(number) else "no own tests", True
    refused = [line for line in lines if line.startswith("FAILED: the tests' process")]
    importable = imports.returncode == 0 and not unimportable
    ok = passed and importable and (loaded != "[]" if enabling else loaded == "[]")
    report = [f"steps 1-{number} on PyTensor {PYTENSOR_VERSION}'s sdist, from source: {', '.join(files) or 'the steps'}: {summary}"]
    report.append(
        f"   every module imports ({modules} of pytensor.innergraph)"
        if importable
        else "   FAILED: modules that do not import:\n" + "\n".join(f"      {line}" for line in unimportable or [imports.stderr[-2000:]])
    )
    if imports.returncode != 0:
        report.append(f"   FAILED: `import pytensor` fails on the tree:\n{imports.stderr[-2000:]}")
    elif enabling:
        report.append(f"   {'enabled: `import pytensor` loads pytensor.innergraph' if loaded != '[]' else 'FAILED: the last step does not enable pytensor.innergraph'}")
    elif loaded != "[]":
        report.append(f"   FAILED: `import pytensor` loads {loaded}: the steps are not inert")
    else:
        report.append("   inert: `import pytensor` loads no module of pytensor.innergraph")
    report += [f"   {line}" for line in refused]
    if files and not passed:
        report.append("\n".join(lines[-60:]) + ("\n" + done.stderr[-2000:] if done.stderr.strip() else ""))
    return ok, "\n".join(report)


def _own_paths(number: int, only_its_own: bool = False) -> list[Path]:
    """The own test files of steps 1..``number`` (``only_its_own``: of step ``number``) as paths in a step tree."""
    paths: list[Path] = []
    for step in STEPS[number - 1 : number] if only_its_own else STEPS[:number]:
        if step.tests:
            folder = REPOSITORY / "patches" / step.tests
            paths += [p.relative_to(folder) for p in own_test_files(step) if p.name.startswith("test_")]
    return paths


def _run_upstream_from_source(tree: Path, home: Path, python: str) -> tuple[Any, list[str], str]:
    """run.sh's default list with ``tree``'s PyTensor first on the path, recorded under ``home``; (record, files ran, its total line)."""
    home.mkdir(parents=True, exist_ok=True)
    # A copy of the tree's pytensor alone: the tree's tests/ must not shadow run.sh's test tree,
    # and run.sh's harness checks that pytensor's real path is under the path it was given.
    only = home / "path"
    shutil.rmtree(only, ignore_errors=True)
    shutil.copytree(tree / "pytensor", only / "pytensor")
    wrapper = recording_python(python, home, only)
    record = home / "record.jsonl"
    record.unlink(missing_ok=True)
    settings = upstream_env(wrapper, record, "", os.environ.get("TIMEOUT", "1800"), COMPILEDIR=str(home / "compiledir"))
    done = subprocess.run(["bash", str(UPSTREAM_RUNNER)], env={**os.environ, **settings}, capture_output=True, text=True)
    (home / "run.log").write_text(done.stdout + done.stderr)
    total, ran = run_summary(done.stdout)
    return outcomes().read_record(record, home.name), ran, total


def upstream_on_steps(numbers: list[int], out: Path, python: str = sys.executable, sdist: Path | None = None) -> tuple[bool, list[str]]:
    """PyTensor's default test list on the trees of steps 1..K for each K of ``numbers``, judged against the plain sdist's."""
    lines = []
    vanilla_home = out / "vanilla"
    if (vanilla_home / "record.done").is_file():
        vanilla = outcomes().read_record(vanilla_home / "record.jsonl", "vanilla")
        lines.append(f"vanilla PyTensor {PYTENSOR_VERSION} from source: the record {vanilla_home / 'record.jsonl'}")
    else:
        plain = extract(sdist_path(sdist), out / "plain")
        vanilla, ran, total = _run_upstream_from_source(plain, vanilla_home, python)
        if not any(test.outcome == "passed" for test in vanilla.tests.values()):
            return False, [f"FAILED: vanilla passed no test: {total} (see {vanilla_home / 'run.log'})"]
        (vanilla_home / "record.done").touch()
        lines.append(f"vanilla PyTensor {PYTENSOR_VERSION} from source: {total} over {len(ran)} files")
    ok = True
    for number in numbers:
        home = out / f"steps-1-{number}"
        shutil.rmtree(home / "src", ignore_errors=True)
        tree = step_tree(number, home / "src", sdist)
        record, ran, total = _run_upstream_from_source(tree, home, python)
        level = len(SERIES) if number == len(STEPS) else 1  # innergraph's listed differences once it is enabled
        comparison = judge(vanilla, record, level, ran)
        failures = comparison.failures
        ok &= not failures and bool(ran)
        verdict = "every test id vanilla's outcome" if not failures else f"{len(failures)} ids NOT vanilla's outcome"
        lines.append(f"steps 1-{number}: {total} over {len(ran)} files: {verdict}")
        if failures:
            lines += ["      " + row for row in outcomes().report(comparison).splitlines()]
    return ok, lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m innergraph_patches step-tests", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=None, help=f"check the regrouped steps among the first K (1-{len(STEPS)}; default: all)")
    parser.add_argument("--sdist", type=Path, default=None, help="PyTensor's sdist (default: downloaded once, cached)")
    parser.add_argument("--upstream", type=int, nargs="+", metavar="K", help="instead: PyTensor's default test list on the trees of steps 1-K, judged against vanilla")
    parser.add_argument("--out", type=Path, default=None, help="with --upstream: the folder of the records (kept; vanilla's reused)")
    args = parser.parse_args(argv)
    if args.upstream:
        if args.out is None or not all(1 <= k <= len(STEPS) for k in args.upstream):
            parser.error(f"--upstream K ... needs --out DIR and each K in 1-{len(STEPS)}")
        ok, lines = upstream_on_steps(args.upstream, args.out, sdist=args.sdist)
        print("\n".join(lines))
        return 0 if ok else 1
    numbers = regrouped_steps(args.steps)
    if not numbers:
        print("no regrouped step among them")
        return 0
    failed = 0
    for number in numbers:
        # own tests run where a step brings some, and all of them on the last tree
        with_tests = bool(STEPS[number - 1].tests) or number == numbers[-1]
        with tempfile.TemporaryDirectory(prefix=f"innergraph-step-{number}-") as scratch:
            ok, report = run_step_tests(number, Path(scratch), sdist=args.sdist, run_tests=with_tests)
        print(report, flush=True)
        failed += not ok
    print(f"step tests: {len(numbers) - failed} of {len(numbers)} step trees passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
