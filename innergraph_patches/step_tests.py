"""Run the regrouped steps' own tests on PyTensor trees of the steps up to each of them.

``python -m innergraph_patches step-tests [--steps K]`` takes every regrouped step with
tests of its own among the first K (all by default: `innergraph_patches.steps`), lays steps
1 to that step on a fresh extract of PyTensor's sdist (`innergraph_patches.build.step_tree`),
and runs there, from source (``PYTHONPATH``, nothing installed), the own tests of that step
and of every step before it: a later step must not break an earlier one's tests.

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
import subprocess
import sys
import tempfile
from pathlib import Path

from innergraph_patches.build import step_tree
from innergraph_patches.sdist import PYTENSOR_VERSION
from innergraph_patches.shipping import REPOSITORY
from innergraph_patches.steps import STEPS, own_test_files

__all__ = ["main", "run_step_tests", "steps_with_tests"]

#: Run in the tree: pytest on the given files, then a failure if the library innergraph was imported.
_RUN = """
import sys, pytest
code = pytest.main(["-q", "-p", "no:cacheprovider", *sys.argv[1:]])
if "innergraph" in sys.modules:
    print("FAILED: the tests' process imported the library innergraph, not only PyTensor's copy")
    code = code or 1
sys.exit(code)
"""

_INERT = "import sys, pytensor; print(sorted(m for m in sys.modules if m.startswith('pytensor.innergraph')))"


def steps_with_tests(steps: int | None = None) -> list[int]:
    """The numbers (from 1) of the regrouped steps among the first ``steps`` that have tests of their own."""
    last = len(STEPS) if steps is None else steps
    return [n for n, step in enumerate(STEPS[:last], 1) if step.tests]


def run_step_tests(number: int, scratch: Path, python: str = sys.executable, sdist: Path | None = None) -> tuple[bool, str]:
    """Lay steps 1..``number`` in ``scratch`` and run their own tests there; whether all passed, and a report."""
    tree = step_tree(number, scratch, sdist)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    env["PYTENSOR_FLAGS"] = f"base_compiledir={scratch / 'compiledir'}"
    inert = subprocess.run([python, "-c", _INERT], cwd=tree, env=env, capture_output=True, text=True)
    loaded = inert.stdout.strip()
    files = [str(p) for p in _own_paths(number)]
    done = subprocess.run([python, "-c", _RUN, *files], cwd=tree, env=env, capture_output=True, text=True)
    lines = done.stdout.strip().splitlines()
    summary = next((line for line in reversed(lines) if " passed" in line or " failed" in line or " error" in line), "no summary")
    refused = [line for line in lines if line.startswith("FAILED: the tests' process")]
    ok = done.returncode == 0 and inert.returncode == 0 and loaded == "[]"
    report = [f"steps 1-{number} on PyTensor {PYTENSOR_VERSION}'s sdist, from source: {', '.join(files)}: {summary}"]
    if inert.returncode != 0:
        report.append(f"   FAILED: `import pytensor` fails on the tree:\n{inert.stderr[-2000:]}")
    elif loaded != "[]":
        report.append(f"   FAILED: `import pytensor` loads {loaded}: the steps are not inert")
    else:
        report.append("   inert: `import pytensor` loads no module of pytensor.innergraph")
    report += [f"   {line}" for line in refused]
    if done.returncode != 0:
        report.append("\n".join(lines[-60:]) + ("\n" + done.stderr[-2000:] if done.stderr.strip() else ""))
    return ok, "\n".join(report)


def _own_paths(number: int) -> list[Path]:
    """The own test files of steps 1..``number`` as paths in a step tree (relative to each step's folder)."""
    paths: list[Path] = []
    for step in STEPS[:number]:
        if step.tests:
            folder = REPOSITORY / "patches" / step.tests
            paths += [p.relative_to(folder) for p in own_test_files(step) if p.name.startswith("test_")]
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m innergraph_patches step-tests", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=None, help=f"take the steps with tests among the first K (1-{len(STEPS)}; default: all)")
    parser.add_argument("--sdist", type=Path, default=None, help="PyTensor's sdist (default: downloaded once, cached)")
    args = parser.parse_args(argv)
    numbers = steps_with_tests(args.steps)
    if not numbers:
        print("no regrouped step among them has tests of its own")
        return 0
    failed = 0
    for number in numbers:
        with tempfile.TemporaryDirectory(prefix=f"innergraph-step-{number}-") as scratch:
            ok, report = run_step_tests(number, Path(scratch), sdist=args.sdist)
        print(report, flush=True)
        failed += not ok
    print(f"step tests: {len(numbers) - failed} of {len(numbers)} step trees passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
