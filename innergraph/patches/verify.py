"""Prove the series patch by patch: after each one, install that partial PyTensor and run the tests.

``python -m innergraph.patches verify [--each]`` extracts PyTensor's sdist, applies the
committed ``patches/`` one at a time and, after each patch it checks (every patch with
``--each``, else only the last), installs the tree into one environment (``--venv``,
created afresh with the project's test dependencies; later patches reinstall PyTensor
only) and runs there:

form
    What ``import innergraph`` does on that PyTensor (`innergraph._upstream`): after
    patches 1-3 (inert code nothing imports) it monkey-patches as on a released PyTensor;
    after patch 4 (PyTensor enables its copy, which has no backends yet) it refuses with an
    `ImportError` naming the missing modules; after patch 5 it is ``pytensor.innergraph``.
upstream
    PyTensor's own test files (``../shared/upstream/run.sh``, its default list, innergraph
    not imported by the harness: PyTensor enables its copy itself from patch 4 on); the
    counts must be vanilla's (`VANILLA`). By default (``--upstream touched``) they run
    after the last patch and after every *touching* patch: one that edits a file PyTensor
    already had, or any file once PyTensor imports its copy (patch 4 on). A patch that
    only adds or edits files under ``pytensor/innergraph/`` while nothing in PyTensor
    imports them cannot change what PyTensor's tests see, so running them again would
    only repeat the previous result (`untouched_reason`).
suite
    innergraph's own tests: after patches 1-3 in the monkey-patched form (``--suite
    each``: the whole suite; default: `PARTIAL_TESTS`, the tests of the two forms and the
    series), none after patch 4 (refused), the whole suite with no monkey-patch
    (``-m "not monkey_patch_only"``) after patch 5, its property tests with 25 examples
    each (the ``repeat`` profile of ``tests/conftest.py``): the main suite runs the same
    code with 200.

One line per step is printed as it finishes; the exit status is 1 at the first failure.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from innergraph.patches.build import REPOSITORY
from innergraph.patches.sdist import PYTENSOR_VERSION, extract, sdist_path
from innergraph.patches.series import SERIES

__all__ = ["PARTIAL_TESTS", "VANILLA", "counts", "main", "untouched_reason", "verify"]

#: PyTensor 3.0.7's own test files (``run.sh``'s default list) on vanilla PyTensor.
VANILLA = {"passed": 534, "xfailed": 8, "skipped": 18, "deselected": 8}

#: innergraph's tests run after each inert patch (1-3) by default: the two forms, the series.
PARTIAL_TESTS = ("tests/test_upstream_form.py", "tests/test_partial_series.py", "tests/test_patches_series.py")

_UPSTREAM_RUNNER = REPOSITORY.parent / "shared" / "upstream" / "run.sh"
_FORM_CHECK = {
    "monkey-patched": "import innergraph, sys; assert innergraph.form() == 'monkey-patched', innergraph.form(); "
    "assert sys.modules['innergraph'] is not sys.modules.get('pytensor.innergraph'); print('form: monkey-patched')",
    "patched pytensor": "import innergraph, pytensor.innergraph as p; assert innergraph is p; "
    "assert innergraph.form() == 'patched pytensor', innergraph.form(); print('form: patched pytensor')",
    "refused": "import pytensor\ntry:\n    import innergraph\nexcept ImportError as e:\n    print('form: refused:', str(e)[:160])\n"
    "    assert 'carries patches 1-4' in str(e), e\nelse:\n    raise SystemExit('import innergraph did not refuse a partial series that PyTensor enables')",
}


def counts(summary: str) -> dict[str, int]:
    """``{"passed": 534, ...}`` from a pytest summary or ``run.sh``'s ``==== TOTAL:`` line."""
    found: dict[str, int] = {}
    for number, kind in re.findall(r"(\d+) (passed|failed|skipped|errors?|deselected|xfailed|xpassed)", summary):
        kind = "errors" if kind.startswith("error") else kind
        found[kind] = found.get(kind, 0) + int(number)
    return found


def _expected_form(level: int) -> str:
    return "patched pytensor" if level == len(SERIES) else "refused" if level >= 4 else "monkey-patched"


def edited_pytensor_files(patch: Path) -> list[str]:
    """The files ``patch`` edits or deletes (not the ones it creates), as paths in PyTensor's tree."""
    return [line[len("--- a/") :].rstrip("\n") for line in patch.read_text().splitlines() if line.startswith("--- a/")]


def untouched_reason(patch: Path, level: int) -> str | None:
    """Why PyTensor's own tests need not run after ``patch`` (the ``level``-th), or None if they must.

    They need not when PyTensor does not import its copy of innergraph yet (the series'
    inert levels) and the patch edits no file outside ``pytensor/innergraph/``: it adds
    or changes only modules nothing in PyTensor imports.
    """
    if _expected_form(level) != "monkey-patched":
        return None
    outside = [name for name in edited_pytensor_files(patch) if not name.startswith("pytensor/innergraph/")]
    return None if outside else "the patch only adds or edits files under pytensor/innergraph/, which nothing in PyTensor imports yet"


def _run(command: list[str], env: dict[str, str] | None = None, cwd: Path | None = None) -> tuple[int, str, float]:
    start = time.monotonic()
    done = subprocess.run(command, cwd=cwd, env={**os.environ, **(env or {})}, capture_output=True, text=True)
    return done.returncode, done.stdout + done.stderr, time.monotonic() - start


def _say(line: str) -> None:
    print(line, flush=True)


def _install(python: Path, tree: Path, first: bool) -> None:
    quiet = ["-q", "--disable-pip-version-check"]
    if first:
        steps = [[str(python), "-m", "pip", "install", *quiet, str(tree)], [str(python), "-m", "pip", "install", *quiet, "-e", f"{REPOSITORY}[test]"]]
    else:
        steps = [[str(python), "-m", "pip", "install", *quiet, "--no-deps", "--force-reinstall", str(tree)]]
    for step in steps:
        code, output, _ = _run(step)
        if code:
            raise SystemExit(f"installing failed: {' '.join(step)}\n{output[-3000:]}")


def _installed_level(python: Path) -> int:
    from innergraph._upstream import series_level

    code, output, _ = _run([str(python), "-c", "import os, pytensor; print(os.path.dirname(pytensor.__file__))"], cwd=Path("/"))
    if code:
        raise SystemExit(f"the patched environment cannot import pytensor:\n{output[-3000:]}")
    folder = Path(output.strip().splitlines()[-1]) / "innergraph"
    return series_level(str(folder) if folder.is_dir() else None)


def _check_upstream(python: Path, files: str | None) -> tuple[bool, str]:
    # run.sh's 600 s per file is what scan/test_basic.py takes with a cold cache on a loaded machine
    env = {"PY": str(python), "WITH_INNERGRAPH": "0", "TIMEOUT": os.environ.get("TIMEOUT", "1800")}
    if files:
        env["FILES"] = files
    code, output, seconds = _run(["bash", str(_UPSTREAM_RUNNER)], env=env)
    total = next((line for line in output.splitlines() if line.startswith("==== TOTAL:")), "")
    found = counts(total.split("|")[0])
    good = code == 0 and (found == VANILLA if not files else not found.get("failed") and not found.get("errors"))
    detail = "" if good else "\n" + "\n".join(line for line in output.splitlines() if "rc=" in line or line.startswith(("      ", "====")))[-4000:]
    return good, f"upstream: {total.removeprefix('==== TOTAL: ') or 'no summary'} ({'vanilla counts' if found == VANILLA else 'subset' if files else 'NOT vanilla counts'}) in {seconds:.0f}s{detail}"


def _check_suite(python: Path, level: int, whole: bool) -> tuple[bool, str]:
    form = _expected_form(level)
    env = {"INNERGRAPH_EXPECT_FORM": form, "INNERGRAPH_EXPECT_SERIES_LEVEL": str(level)}
    command = [str(python), "-m", "pytest", "-x", "-q", "-p", "no:randomly", "-p", "no:cacheprovider"]
    if form == "patched pytensor":  # the property tests' 200 examples ran in the main suite already
        command += ["-m", "not monkey_patch_only", "--hypothesis-profile=repeat", "tests"]
    else:
        command += ["tests"] if whole else list(PARTIAL_TESTS)
    code, output, seconds = _run(command, env=env, cwd=REPOSITORY)
    summary = next((line for line in reversed(output.splitlines()) if re.search(r"\d+ (passed|failed)", line)), "no summary")
    what = "whole suite" if whole or form == "patched pytensor" else "the forms' and the series' tests"
    detail = "" if code == 0 else "\n" + output[-4000:]
    return code == 0, f"innergraph ({what}): {summary.strip('= ')} in {seconds:.0f}s{detail}"


def verify(each: bool, venv: Path, suite: str, upstream: str, files: str | None, levels: set[int] | None = None) -> bool:
    """Apply the committed series patch by patch and check after the last (every one if ``each``, those in ``levels`` if given); True if all passed."""
    patches = sorted((REPOSITORY / "patches").glob("[0-9][0-9][0-9][0-9]-*.patch"))
    if len(patches) != len(SERIES):
        raise SystemExit(f"patches/ holds {len(patches)} patches, the series has {len(SERIES)}: run `python -m innergraph.patches build`")
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    with tempfile.TemporaryDirectory() as scratch:
        tree = extract(sdist_path(), Path(scratch))
        for level, patch in enumerate(patches, start=1):
            subprocess.run(["git", "apply", str(patch)], cwd=tree, check=True)
            if (levels is not None and level not in levels) or (levels is None and not each and level < len(patches)):
                continue
            start = time.monotonic()
            _install(python, tree, first=not (venv / ".installed").exists())
            (venv / ".installed").touch()
            installed = _installed_level(python)
            _say(f"== patch {level}/{len(patches)} {patch.name}: PyTensor {PYTENSOR_VERSION} + patches 1-{level} installed in {time.monotonic() - start:.0f}s (series level {installed})")
            if installed != level:
                _say(f"   FAILED: the installed PyTensor carries {installed} patches of the series, not {level}")
                return False
            form = _expected_form(level)
            code, output, _ = _run([str(python), "-c", _FORM_CHECK[form]], cwd=Path("/"))
            _say(f"   {output.strip().splitlines()[-1] if output.strip() else 'no output'}")
            if code:
                _say(f"   FAILED: import innergraph\n{output[-3000:]}")
                return False
            checks = []
            skip = untouched_reason(patch, level) if upstream == "touched" and level < len(patches) else None
            if skip:
                _say(f"   upstream: not run, {skip}: PyTensor's tests see what they saw before this patch")
            elif upstream in ("each", "touched") or level == len(patches):
                checks.append(lambda: _check_upstream(python, files if level < len(patches) else None))
            if suite != "none" and form != "refused" and (suite == "each" or level == len(patches) or form == "monkey-patched"):
                checks.append(lambda: _check_suite(python, level, whole=suite == "each"))
            for check in checks:
                good, line = check()
                _say(f"   {line}")
                if not good:
                    return False
    return True


def main(argv: list[str]) -> int:
    """``python -m innergraph.patches verify``'s command line."""
    parser = argparse.ArgumentParser(prog="python -m innergraph.patches verify", description=__doc__.split("\n\n")[0])
    parser.add_argument("--each", action="store_true", help="check after every patch (default: after the last one only)")
    parser.add_argument("--venv", type=Path, default=REPOSITORY / ".venv-patched", help="the environment to (re)create")
    parser.add_argument("--suite", choices=["final", "each", "none"], default="final", help="innergraph's whole suite after the last patch only (and PARTIAL_TESTS after inert ones), after every patch, or never")
    parser.add_argument(
        "--upstream",
        choices=["touched", "each", "final"],
        default="touched",
        help="PyTensor's test files after the last patch and every checked patch that can change them (default), after every checked patch, or after the last only",
    )
    parser.add_argument("--files", default=None, help="PyTensor's test files to run after the intermediate patches (default: run.sh's whole list)")
    parser.add_argument("--levels", default=None, help="check after these patches only (``2,3``), for a run split across machines or a re-run")
    args = parser.parse_args(argv)
    levels = {int(n) for n in args.levels.split(",")} if args.levels else None
    if not _UPSTREAM_RUNNER.is_file():
        raise SystemExit(f"PyTensor's test runner {_UPSTREAM_RUNNER} is missing")
    return 0 if verify(args.each, args.venv, args.suite, args.upstream, args.files, levels) else 1
