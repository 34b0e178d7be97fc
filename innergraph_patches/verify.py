"""Prove the series patch by patch: after each one, install that partial PyTensor and run the tests.

``python -m innergraph_patches verify [--each]`` extracts PyTensor's sdist, installs it as
released (the *vanilla* reference), then applies the committed ``patches/`` one at a time
and, after each patch it checks (every patch with ``--each``, else only the last), installs
the tree into one environment (``--venv``, created afresh with the project's test
dependencies; later patches reinstall PyTensor only) and runs there:

form
    What ``import innergraph`` does on that PyTensor (`innergraph.startup.upstream`): after
    patches 1-4 (inert code nothing imports) it monkey-patches as on a released PyTensor;
    after patch 5 (PyTensor enables its copy) it is ``pytensor.innergraph``.
upstream
    PyTensor's own test files (``../shared/upstream/run.sh``: its default list, the 3.3 tree
    for PyTensor 3.3; ``NO_X=1``, innergraph not imported by the harness: PyTensor enables
    its copy itself with patch 5), each test's outcome recorded by ``.ci/outcomes.py``'s
    pytest plugin and judged *test by test* against the vanilla run (`outcomes.compare`):
    a test vanilla passes or xfails must do so, one it runs must not be skipped or missing,
    no module may fail to collect, no pytest may be killed. Vanilla's own failures (`VANILLA`
    has the documented counts, `VANILLA_FAILURES` the four ids) are accepted because vanilla
    fails them too. After patch 5 (PyTensor enables innergraph) the differences listed in
    ``.ci/expected-differences.toml``'s ``[upstream]`` table are accepted as with the library.
    By default (``--upstream touched``) they run after the last patch and after every
    *touching* patch: one that edits a file PyTensor already had, or any file once PyTensor
    imports its copy. A patch that only adds or edits files under
    ``pytensor/innergraph/`` while nothing in PyTensor imports them cannot change what
    PyTensor's tests see, so running them again would only repeat the previous result
    (`untouched_reason`).
suite
    innergraph's own tests: after patches 1-4 in the monkey-patched form (``--suite
    each``: the whole suite; default: `PARTIAL_TESTS`, the tests of the two forms and the
    series); after patch 5 the whole suite with no monkey-patch, less the repository's
    tools, which the main suite checks (``-m "not monkey_patch_only and not
    repository_tools"``; ``--suite-tests`` names a subset), its property tests with 25
    examples each (the ``repeat`` profile of ``tests/conftest.py``):
    the main suite runs the same code with 200.

One line per step is printed as it finishes, with its time; the records of PyTensor's tests
are kept in ``<venv>/outcomes/``. The exit status is 1 at the first failure.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Any

from innergraph_patches.build import REPOSITORY
from innergraph_patches.sdist import PYTENSOR_VERSION, extract, sdist_path
from innergraph_patches.series import SERIES
from innergraph.startup.upstream import series_level

__all__ = ["OUTCOMES_PLUGIN", "PARTIAL_TESTS", "UPSTREAM_RUNNER", "VANILLA", "VANILLA_FAILURES", "counts", "judge", "main", "outcomes", "recording_python", "run_summary", "untouched_reason", "upstream_env", "vanilla_reference", "verify"]

#: PyTensor 3.3.8's own test files (``run.sh``'s default list, rel-3.3.0's tests) on vanilla
#: PyTensor (``../shared/upstream/README.md``): printed beside each run; the judge is per test id.
VANILLA = {"passed": 546, "xfailed": 8, "skipped": 19, "failed": 4, "deselected": 8}

#: Vanilla's own failures there (rel-3.3.0's tests meeting 3.3.8's code): accepted after
#: every patch because vanilla fails them too (the per-id judge compares with vanilla's run).
VANILLA_FAILURES = (
    "tests/test_ifelse.py::TestIfelse::test_not_lazy_if_inplace",
    "tests/test_ifelse.py::TestIfelse::test_grad_lazy_if",
    "tests/test_ifelse.py::TestIfelse::test_multiple_out_crash",
    "tests/scan/test_printing.py::test_debugprint_compiled_fn",
)

#: innergraph's tests run after each inert patch (1-4) by default: the two forms, the series.
PARTIAL_TESTS = ("tests/test_upstream_form.py", "tests/test_partial_series.py", "tests/test_patches_series.py")

#: PyTensor's own tests, run on the installed PyTensor from the matching tree (``../shared/upstream/``).
UPSTREAM_RUNNER = REPOSITORY.parent / "shared" / "upstream" / "run.sh"
#: CI's per-test judge: a pytest plugin recording each test's outcome, and `compare`.
OUTCOMES_PLUGIN = REPOSITORY / ".ci" / "outcomes.py"
_EXPECTED = REPOSITORY / ".ci" / "expected-differences.toml"
_FORM_CHECK = {
    "monkey-patched": "import innergraph, sys; assert innergraph.form() == 'monkey-patched', innergraph.form(); "
    "assert sys.modules['innergraph'] is not sys.modules.get('pytensor.innergraph'); print('form: monkey-patched')",
    "patched pytensor": "import innergraph, pytensor.innergraph as p; assert innergraph is p; "
    "assert innergraph.form() == 'patched pytensor', innergraph.form(); print('form: patched pytensor')",
}


def counts(summary: str) -> dict[str, int]:
    """``{"passed": 546, ...}`` from a pytest summary or ``run.sh``'s ``==== TOTAL:`` line."""
    found: dict[str, int] = {}
    for number, kind in re.findall(r"(\d+) (passed|failed|skipped|errors?|deselected|xfailed|xpassed)", summary):
        kind = "errors" if kind.startswith("error") else kind
        found[kind] = found.get(kind, 0) + int(number)
    return found


def outcomes() -> ModuleType:
    """``.ci/outcomes.py``, CI's per-test judge (a pytest plugin and `compare`), loaded from the repository."""
    name = "innergraph_ci_outcomes"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, OUTCOMES_PLUGIN)
        if spec is None or spec.loader is None:
            raise SystemExit(f"CI's per-test judge {OUTCOMES_PLUGIN} is missing")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # its dataclasses look their module up
        spec.loader.exec_module(module)
    return sys.modules[name]


def _expected_form(level: int) -> str:
    return "patched pytensor" if level == len(SERIES) else "monkey-patched"


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
    code, output, _ = _run([str(python), "-c", "import os, pytensor; print(os.path.dirname(pytensor.__file__))"], cwd=Path("/"))
    if code:
        raise SystemExit(f"the patched environment cannot import pytensor:\n{output[-3000:]}")
    folder = Path(output.strip().splitlines()[-1]) / "innergraph"
    return series_level(str(folder) if folder.is_dir() else None)


def recording_python(python: Path | str, folder: Path, *also: Path) -> Path:
    """An interpreter for run.sh that also finds ``.ci/outcomes.py`` (run.sh overwrites ``PYTHONPATH``; as ``.ci/upstream`` does).

    ``also``: more folders put on the path after it (a source tree's ``pytensor``).
    """
    wrapper = folder / "bin" / "python"
    wrapper.parent.mkdir(parents=True, exist_ok=True)
    path = ":".join(str(p) for p in (OUTCOMES_PLUGIN.parent, *also))
    wrapper.write_text(f'#!/bin/sh\nPYTHONPATH="${{PYTHONPATH:+$PYTHONPATH:}}{path}" exec "{python}" "$@"\n')
    wrapper.chmod(0o755)
    return wrapper


def upstream_env(wrapper: Path, record: Path, files: str, timeout: str, extra: str = "", **settings: str) -> dict[str, str]:
    """run.sh's settings for running ``files`` with ``wrapper`` (`recording_python`), each test's outcome recorded into ``record``.

    Every test of a file runs (``NO_X=1``), so every id has an outcome; innergraph is
    not imported by the harness; ``extra`` is added to pytest's arguments after the
    recording plugin. ``settings`` are more of run.sh's variables (``FULL``, ``COMPILEDIR``).
    """
    return {
        "PY": str(wrapper),
        "WITH_INNERGRAPH": "0",
        "NO_X": "1",
        "EXTRA": f"-p outcomes {extra}".strip(),
        "OUTCOMES_RECORD": str(record),
        "TIMEOUT": timeout,
        "FILES": files,
        **settings,
    }


def _run_upstream(python: Path, record: Path, files: str | None, append: bool = False) -> tuple[str, float, list[str]]:
    """Run run.sh (its default list, or ``files``) recording each test's outcome into ``record`` (added to it with ``append``).

    Returns its TOTAL line, its wall time and the files it says it ran (one line each,
    also for a pytest that crashed before recording anything).
    """
    if not append:
        record.unlink(missing_ok=True)
    # run.sh's 600 s per file is what scan/test_basic.py takes with a cold cache on a loaded machine
    timeout = os.environ.get("TIMEOUT", "1800")
    env = upstream_env(recording_python(python, record.parent), record, files or "", timeout, extra=os.environ.get("EXTRA", ""))
    _, output, seconds = _run(["bash", str(UPSTREAM_RUNNER)], env=env)
    total, ran = run_summary(output)
    return total, seconds, ran


def run_summary(output: str) -> tuple[str, list[str]]:
    """run.sh's TOTAL counts and the files it says it ran (one line each, also for a pytest that crashed)."""
    total = next((line for line in output.splitlines() if line.startswith("==== TOTAL:")), "==== TOTAL: no summary")
    ran = [m.group(1) for m in re.finditer(r"^(tests/\S+\.py) +rc=", output, flags=re.M)]
    return total.removeprefix("==== TOTAL: ").split("|")[0].strip().rstrip(","), ran


def _vanilla_line(record: Any, seconds: float | None, default: list[str] | None = None) -> tuple[bool, str]:
    """Whether the vanilla record can judge (every pytest finished, tests ran), and its line.

    ``default``: the files of run.sh's default list, whose counts `VANILLA` documents (a
    record may hold more files: ``--files`` beyond the list, a record of CI's wider tiers).
    """
    judge = outcomes()
    tests = record.tests.values() if default is None else [t for t in record.tests.values() if t.file in default]
    found = Counter(t.outcome for t in tests)
    killed = [" ".join(s.args) for s in record.sessions.values() if s.exitstatus is None]
    ran = any(found[o] for o in judge.RAN)
    files = sorted({t.file for t in record.tests.values()})
    if default is None:
        note = f"a record of {len(files)} files" + ("; run.sh's default list gives the documented counts" if found == VANILLA else "")
    else:
        note = "the documented counts" if found == VANILLA else f"NOT the documented counts {VANILLA}: the environment differs; judged against this run"
        if len(files) > len(default):
            note += f"; and {len(files) - len(default)} more files for --files"
    versions = {s.pytensor for s in record.sessions.values() if s.pytensor}
    own = sorted(t.id for t in record.tests.values() if t.outcome in ("failed", "error"))
    line = f"vanilla: {judge._counts_line(found)}{' on the default list' if default is not None and len(files) > len(default) else ''} ({note}){f' in {seconds:.0f}s' if seconds is not None else ''}"
    if own:
        line += f"\n   vanilla's own failures ({len(own)}, accepted after every patch): " + ", ".join(own)
    if killed or not ran or versions != {PYTENSOR_VERSION}:
        why = f"killed: {' '.join(killed)}" if killed else "no test ran" if not ran else f"PyTensor {', '.join(sorted(versions)) or '?'}, not {PYTENSOR_VERSION}"
        return False, line + f"\n   FAILED: the vanilla record cannot judge ({why})"
    return True, line


def vanilla_reference(record_path: Path | None, run_vanilla: Callable[[], tuple[Any, bool, str]]) -> tuple[Any, bool, str]:
    """The vanilla record the patched runs are judged against, whether it can judge, and its line.

    The record at ``record_path`` (CI's lane B's run of vanilla PyTensor) when it can judge;
    otherwise, or without one, what ``run_vanilla()`` (install the released sdist, run
    PyTensor's tests) gives.
    """
    if record_path is not None:
        record = outcomes().read_record(record_path, "vanilla")
        good, line = _vanilla_line(record, None)
        _say(f"== vanilla PyTensor {PYTENSOR_VERSION}: the record {record_path}")
        if good:
            return record, good, line
        _say(f"   {line}\n   so vanilla runs here")  # another PyTensor, a killed pytest
    return run_vanilla()


def judge(vanilla: Any, patched: Any, level: int, ran: list[str]) -> Any:
    """`outcomes.compare` of the run after patch ``level`` with vanilla's, on the files ``ran`` (run.sh's list or a subset).

    Vanilla's record may hold more files (a record of CI's wider tiers): only these are judged.
    """
    tool = outcomes()
    kept = tool.Record(vanilla.name)
    kept.sessions = {k: s for k, s in vanilla.sessions.items() if any(tool._same_file(a.split("::", 1)[0], f) for a in s.args for f in ran)}
    kept.tests = {k: t for k, t in vanilla.tests.items() if any(tool._same_file(t.file, f) for f in ran)}
    enabled = _expected_form(level) != "monkey-patched"  # PyTensor enables its copy of innergraph
    expected = tool.read_expected(_EXPECTED, "upstream") if enabled and _EXPECTED.is_file() else {}
    expected = {k: v for k, v in expected.items() if any(tool._same_file(k.split("::", 1)[0], f) for f in ran)}
    # "variant" asks whether the library was imported: a patched PyTensor imports its own copy
    # (`pytensor.innergraph`), never `innergraph`.
    disabled = {"variant"}
    return tool.compare(kept, patched, expected, files=ran, disabled=disabled)


def _check_upstream(python: Path, files: str | None, record: Path, vanilla: Any, level: int) -> tuple[bool, str]:
    total, seconds, ran = _run_upstream(python, record, files)
    tool = outcomes()
    patched = tool.read_record(record, f"patch {level}")
    versions = {s.pytensor for s in patched.sessions.values() if s.pytensor}
    comparison = judge(vanilla, patched, level, ran)
    failures = comparison.failures
    if versions - {PYTENSOR_VERSION}:
        failures = [*failures, tool.Finding("session", "(versions)", "", ", ".join(sorted(versions)), f"not PyTensor {PYTENSOR_VERSION}")]
    accepted = sum(1 for f in comparison.findings if f.rule == "expected")
    same_failures = sum(1 for t in patched.tests.values() if t.outcome in ("failed", "error") and _outcome(comparison.vanilla, t.id) == t.outcome)
    scope = f"{len(ran)} files" + ("" if not files else " (a subset)")
    verdict = "every test id as vanilla" if not failures else f"{len(failures)} ids NOT as vanilla"
    line = (
        f"upstream: {total} over {scope}: {verdict} ({same_failures} of vanilla's own failures, same"
        f"{f'; {accepted} listed differences' if accepted else ''}) in {seconds:.0f}s; record {record}"
    )
    if failures:
        line += "\n" + "\n".join("      " + row for row in tool.report(comparison).splitlines())
    return not failures, line


def _outcome(record: Any, test_id: str) -> str | None:
    found = record.tests.get(test_id)
    return None if found is None else found.outcome


def _check_suite(python: Path, level: int, whole: bool, tests: list[str] | None, record: Path) -> tuple[bool, str]:
    form = _expected_form(level)
    record.unlink(missing_ok=True)
    path = os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), str(OUTCOMES_PLUGIN.parent)) if p)
    env = {"INNERGRAPH_EXPECT_FORM": form, "INNERGRAPH_EXPECT_SERIES_LEVEL": str(level), "PYTHONPATH": path, "OUTCOMES_RECORD": str(record)}
    if form != "patched pytensor":  # a shard (INNERGRAPH_SHARD, .ci/patched) is of the last patch's whole suite only
        env["INNERGRAPH_SHARD"] = ""
    # up to ten failures, not the first only: CI's patched shard of b5e2007 stopped at the first of two unrelated ones
    command = [str(python), "-m", "pytest", "--maxfail=10", "-q", "-p", "no:randomly", "-p", "no:cacheprovider", "-p", "outcomes"]
    if form == "patched pytensor":  # the property tests' 200 examples and the repository's tools ran in the main suite already
        command += ["-m", "not monkey_patch_only and not repository_tools", "--hypothesis-profile=repeat", *(tests or ["tests"])]
    else:
        command += ["tests"] if whole else list(PARTIAL_TESTS)
    code, output, seconds = _run(command, env=env, cwd=REPOSITORY)
    summary = next((line for line in reversed(output.splitlines()) if re.search(r"\d+ (passed|failed)", line)), "no summary")
    if form == "patched pytensor":
        what = f"{len(tests)} files" if tests else "whole suite"
        if os.environ.get("INNERGRAPH_SHARD"):
            what += f", shard {os.environ['INNERGRAPH_SHARD']}"
    else:
        what = "whole suite" if whole else "the forms' and the series' tests"
    detail = "" if code == 0 else "\n" + output[-4000:]
    return code == 0, f"innergraph ({what}): {summary.strip('= ')} in {seconds:.0f}s; record {record}{detail}"


def verify(
    each: bool,
    venv: Path,
    suite: str,
    upstream: str,
    files: str | None,
    levels: set[int] | None = None,
    vanilla_record: Path | None = None,
    suite_tests: list[str] | None = None,
    keep_going: bool = False,
) -> bool:
    """Apply the committed series patch by patch and check after the last (every one if ``each``, those in ``levels`` if given); True if all passed.

    PyTensor's tests are judged against ``vanilla_record`` (a record of run.sh's default
    list on PyTensor `PYTENSOR_VERSION` as released, by ``.ci/outcomes.py``) or, without
    one, against a run of the unpatched sdist installed first into the same environment.
    With ``keep_going`` a failing test step does not stop the run (the result is still False).
    """
    patches = sorted((REPOSITORY / "patches").glob("[0-9][0-9][0-9][0-9]-*.patch"))
    if len(patches) != len(SERIES):
        raise SystemExit(f"patches/ holds {len(patches)} patches, the series has {len(SERIES)}: run `python -m innergraph_patches build`")
    begin = time.monotonic()
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    records = venv / "outcomes"
    records.mkdir()
    tool = outcomes()
    failed = False
    with tempfile.TemporaryDirectory() as scratch:
        tree = extract(sdist_path(), Path(scratch))
        vanilla = None
        if upstream != "none":
            def run_vanilla() -> tuple[Any, bool, str]:
                start = time.monotonic()
                _install(python, tree, first=True)
                (venv / ".installed").touch()
                _say(f"== vanilla PyTensor {PYTENSOR_VERSION} (the sdist as released) installed in {time.monotonic() - start:.0f}s")
                _, seconds, default = _run_upstream(python, records / "vanilla.jsonl", None)
                extra = [f for f in (files or "").split() if f not in default]  # the subset for the patches before the last
                if extra:
                    _, more, _ = _run_upstream(python, records / "vanilla.jsonl", " ".join(extra), append=True)
                    seconds += more
                record = tool.read_record(records / "vanilla.jsonl", "vanilla")
                return (record, *_vanilla_line(record, seconds, default))

            vanilla, good, line = vanilla_reference(vanilla_record, run_vanilla)
            _say(f"   {line}")
            if not good:
                return False
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
            code, output, seconds = _run([str(python), "-c", _FORM_CHECK[form]], cwd=Path("/"))
            _say(f"   {output.strip().splitlines()[-1] if output.strip() else 'no output'} ({seconds:.0f}s)")
            if code:
                _say(f"   FAILED: import innergraph\n{output[-3000:]}")
                return False
            checks: list[Callable[[], tuple[bool, str]]] = []
            skip = untouched_reason(patch, level) if upstream == "touched" and level < len(patches) else None
            if upstream == "none":
                pass
            elif skip:
                _say(f"   upstream: not run, {skip}: PyTensor's tests see what they saw before this patch")
            elif upstream in ("each", "touched") or level == len(patches):
                record = records / f"patch-{level}.jsonl"
                subset = files if level < len(patches) else None
                checks.append(partial(_check_upstream, python, subset, record, vanilla, level))
            if suite != "none" and (suite == "each" or level == len(patches) or form == "monkey-patched"):
                checks.append(partial(_check_suite, python, level, suite == "each", suite_tests, records / f"suite-{level}.jsonl"))
            for check in checks:
                good, line = check()
                _say(f"   {line}")
                if not good and not keep_going:
                    return False
                failed = failed or not good
    _say(f"== verify: {'FAILED' if failed else 'passed'} in {time.monotonic() - begin:.0f}s")
    return not failed


def main(argv: list[str]) -> int:
    """``python -m innergraph_patches verify``'s command line."""
    parser = argparse.ArgumentParser(prog="python -m innergraph_patches verify", description=__doc__.split("\n\n")[0])
    parser.add_argument("--each", action="store_true", help="check after every patch (default: after the last one only)")
    parser.add_argument("--venv", type=Path, default=REPOSITORY / ".venv-patched", help="the environment to (re)create")
    parser.add_argument("--suite", choices=["final", "each", "none"], default="final", help="innergraph's whole suite after the last patch only (and PARTIAL_TESTS after inert ones), after every patch, or never")
    parser.add_argument("--suite-tests", default=None, help="innergraph's test files (or ids) to run after the last patch instead of the whole suite (space-separated)")
    parser.add_argument(
        "--upstream",
        choices=["touched", "each", "final", "none"],
        default="touched",
        help="PyTensor's test files after the last patch and every checked patch that can change them (default), after every checked patch, after the last only, or never",
    )
    parser.add_argument("--files", default=None, help="PyTensor's test files to run after the intermediate patches (default: run.sh's whole list)")
    parser.add_argument("--vanilla", type=Path, default=None, help="a record of vanilla PyTensor on run.sh's default list or more (.ci/outcomes.py; CI's lane B leaves one): only the files each run covers are judged; a record that cannot judge (another PyTensor, a killed pytest) is replaced by a run here; default: run it first")
    parser.add_argument("--keep-going", action="store_true", help="run every step even after one failed (exit status 1 all the same)")
    parser.add_argument("--levels", default=None, help="check after these patches only (``2,3``), for a run split across machines or a re-run")
    args = parser.parse_args(argv)
    levels = {int(n) for n in args.levels.split(",")} if args.levels else None
    if args.upstream != "none" and not UPSTREAM_RUNNER.is_file():
        raise SystemExit(f"PyTensor's test runner {UPSTREAM_RUNNER} is missing")
    if args.vanilla is not None and not args.vanilla.is_file():
        raise SystemExit(f"no vanilla record {args.vanilla}")
    tests = args.suite_tests.split() if args.suite_tests else None
    return 0 if verify(args.each, args.venv, args.suite, args.upstream, args.files, levels, args.vanilla, tests, args.keep_going) else 1
