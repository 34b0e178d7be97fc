#!/usr/bin/env python3
"""Per-test outcomes of pytest runs: record them, compare vanilla with innergraph test by test.

Issue 37 item 3. Standard library only. One file, two roles:

**A pytest plugin** (``-p outcomes``, with this folder on ``sys.path``). When the environment
variable ``OUTCOMES_RECORD`` names a file, each pytest process APPENDS JSON lines to it:

* ``{"kind": "session", "session": S, "args": [...], ...}`` when pytest is configured
  (``args``: pytest's positional arguments, the test files);
* ``{"kind": "test", "session": S, "id": ID, "outcome": O, "duration": s, "message": ...}``,
  one per test id, ``O`` one of ``passed failed error skipped xfailed xpassed`` (from its
  setup/call/teardown reports, as pytest's own summary counts them), ``deselected``,
  ``notrun`` (collected, never run: ``-x`` stopped the session) or ``collect-error``
  (``ID`` is then the module or class that could not be collected);
* ``{"kind": "finish", "session": S, "exitstatus": N, "wall": s, "innergraph": bool, ...}``
  at the end of the session; a session without it was killed (a timeout) or crashed.

Without ``OUTCOMES_RECORD`` the plugin does nothing.

Why this and not ``--junitxml``: PyTensor's upstream files are run by
``../shared/upstream/run.sh``, one pytest process per file, with extra pytest arguments only
through ``EXTRA=`` (the same for every file) and ``PYTHONPATH`` overwritten. A fixed
``--junitxml=path`` would be overwritten by every file (pytest expands environment variables
in that path, but run.sh sets none per file), and a killed process writes no XML at all.
Appending one line per test to a file named by an environment variable survives any number
of processes, keeps what a process did before a timeout killed it, and marks the kill (no
``finish`` line). The plugin is importable in the test process because ``.ci/upstream``
hands run.sh a two-line wrapper as its ``PY`` that appends this folder to run.sh's
``PYTHONPATH`` and execs the real interpreter; ``.ci/pymc`` runs pytest itself and sets
``PYTHONPATH``. The record also says whether ``innergraph`` was imported in each session, so
a vanilla run that imported it (or an innergraph run that did not) is caught.

**A command**::

    python3 .ci/outcomes.py compare VANILLA.jsonl INNERGRAPH.jsonl \\
        [--expected .ci/expected-differences.toml --suite upstream] [--files F ...]
    python3 .ci/outcomes.py summary RECORD.jsonl [--markdown]

``compare`` exits 1 (after a table of the offending ids) when

* ``regressed``: a test passes, xfails or xpasses in vanilla and has another outcome with
  innergraph;
* ``skipped``: a test is skipped or deselected only with innergraph;
* ``fails-where-skipped``: a test skipped or deselected in vanilla fails or errors with
  innergraph (vanilla judged nothing there, but innergraph broke something it ran);
* ``missing``: a test of vanilla was not collected with innergraph;
* ``nothing-ran``: a variant ran no test at all (none passed, failed, errored or xfailed);
* ``collect-error``: a module errored at collection (in one variant or in both: a file that
  errors in both is not "equal", it was not judged);
* ``file-broken``: a file none of whose tests passed or xfailed in vanilla, but some failed
  or errored (the file judges nothing);
* ``session``: a pytest process that did not finish (timeout, crash) or ended with exit
  status 2, 3 or 4 (interrupted, internal error, usage error);
* ``file-not-run``: a file given with ``--files`` was not run in a variant;
* ``variant``: a vanilla session imported innergraph, or an innergraph session did not;
* ``stale``: an entry of the expected-differences file whose test no longer differs;

unless the differing id is listed in the expected-differences file (a TOML file, one table
per suite, ``"test id" = "one-line reason"``): listed differences are printed, not failed.
Vanilla's own failures (same outcome in both variants), tests that only innergraph
collects and tests innergraph fixes are printed and do not fail. Exit 2: unreadable input.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import tomllib
import uuid
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the plugin's hook arguments; nothing from pytest is imported at run time
    import pytest

OUTCOMES = (
    "passed",
    "failed",
    "error",
    "skipped",
    "xfailed",
    "xpassed",
    "deselected",
    "notrun",
    "collect-error",
)
GOOD = frozenset({"passed", "xfailed", "xpassed"})  # what innergraph must keep
RAN = frozenset({"passed", "failed", "error", "xfailed", "xpassed"})
NOT_RUN = frozenset({"skipped", "deselected"})
BAD = frozenset({"failed", "error", "collect-error"})
RULES = (
    "regressed",
    "skipped",
    "fails-where-skipped",
    "missing",
    "nothing-ran",
    "collect-error",
    "file-broken",
    "session",
    "file-not-run",
    "variant",
    "stale",
)
ENV = "OUTCOMES_RECORD"


# ---------------------------------------------------------------------------------------------
# The pytest plugin
# ---------------------------------------------------------------------------------------------


def _message(report: Any) -> str:
    """One line saying why a report failed or skipped ('' when it passed)."""
    longrepr = report.longrepr
    if longrepr is None:
        return ""
    if isinstance(longrepr, tuple) and len(longrepr) == 3:  # a skip: (path, line, reason)
        text = str(longrepr[2])
    else:
        crash = getattr(longrepr, "reprcrash", None)
        text = str(getattr(crash, "message", None) or "")
        if not text:  # a collection error: its last "E   ..." line says what was raised
            lines = [ln for ln in str(longrepr).splitlines() if ln.strip()]
            errors = [ln[1:].strip() for ln in lines if ln.startswith("E ")]
            text = errors[-1] if errors else (lines[-1] if lines else "")
    text = " ".join(text.split())
    return text if len(text) <= 300 else text[:297] + "..."


def phase_outcome(reports: dict[str, Any]) -> str:
    """A test's outcome from its ``{when: report}`` phases, as pytest's summary counts it."""
    setup, call, teardown = reports.get("setup"), reports.get("call"), reports.get("teardown")
    outcome = "notrun"
    if setup is not None and setup.failed:
        outcome = "error"
    elif setup is not None and setup.skipped:
        outcome = "xfailed" if hasattr(setup, "wasxfail") else "skipped"
    elif call is not None:
        if call.passed:
            outcome = "xpassed" if hasattr(call, "wasxfail") else "passed"
        elif call.failed:
            outcome = "failed"  # a strict xfail that passed is a failure too ("[XPASS(strict)]")
        else:
            outcome = "xfailed" if hasattr(call, "wasxfail") else "skipped"
    if teardown is not None and teardown.failed and outcome != "failed":
        outcome = "error"
    return outcome


class _Recorder:
    def __init__(self, path: str) -> None:
        self.path = path
        self.session = uuid.uuid4().hex[:12]
        self.start = time.time()
        self.phases: dict[str, dict[str, Any]] = {}
        self.done: set[str] = set()
        self.collected: list[str] = []

    def write(self, **line: Any) -> None:
        line["session"] = self.session
        with open(self.path, "a", encoding="utf-8") as out:  # one write per line, flushed
            out.write(json.dumps(line, sort_keys=True) + "\n")

    def test(self, nodeid: str, outcome: str, duration: float = 0.0, message: str = "") -> None:
        self.done.add(nodeid)
        self.write(kind="test", id=nodeid, outcome=outcome, duration=round(duration, 4), message=message)


_recorder: _Recorder | None = None


def pytest_configure(config: pytest.Config) -> None:
    global _recorder
    path = os.environ.get(ENV)
    if not path or hasattr(config, "workerinput"):  # not asked for; or an xdist worker
        return
    _recorder = _Recorder(os.path.abspath(path))
    _recorder.write(
        kind="session",
        args=[str(a) for a in config.args],
        cwd=os.getcwd(),
        pid=os.getpid(),
        python=sys.version.split()[0],
        start=_recorder.start,
    )


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if _recorder is None:
        return
    if report.failed:
        _recorder.test(report.nodeid, "collect-error", message=_message(report))
    elif report.skipped and report.nodeid:  # a module skipped as a whole (importorskip)
        _recorder.test(report.nodeid, "skipped", message=_message(report))


def pytest_deselected(items: Sequence[pytest.Item]) -> None:
    if _recorder is None:
        return
    for item in items:
        _recorder.test(item.nodeid, "deselected")


def pytest_collection_finish(session: pytest.Session) -> None:
    if _recorder is not None:
        _recorder.collected = [item.nodeid for item in session.items]


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if _recorder is None:
        return
    phases = _recorder.phases.setdefault(report.nodeid, {})
    phases[report.when or "call"] = report
    if report.when == "teardown":
        del _recorder.phases[report.nodeid]
        bad = [r for r in phases.values() if r.failed or r.skipped]
        _recorder.test(
            report.nodeid,
            phase_outcome(phases),
            duration=sum(float(r.duration) for r in phases.values()),
            message=_message(bad[0]) if bad else "",
        )


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    global _recorder
    recorder = _recorder
    if recorder is None:
        return
    for nodeid, phases in recorder.phases.items():  # interrupted mid-test
        recorder.test(nodeid, phase_outcome(phases))
    for nodeid in recorder.collected:
        if nodeid not in recorder.done:
            recorder.test(nodeid, "notrun")
    pytensor = sys.modules.get("pytensor")
    recorder.write(
        kind="finish",
        exitstatus=int(exitstatus),
        wall=round(time.time() - recorder.start, 3),
        innergraph="innergraph" in sys.modules,
        pytensor=getattr(pytensor, "__version__", None),
    )
    _recorder = None


# ---------------------------------------------------------------------------------------------
# Reading records
# ---------------------------------------------------------------------------------------------


class RecordError(Exception):
    """A record or an expected-differences file that cannot be read."""


@dataclass
class Result:
    id: str
    outcome: str
    message: str = ""
    duration: float = 0.0
    session: str = ""

    @property
    def file(self) -> str:
        return self.id.split("::", 1)[0]


@dataclass
class Session:
    session: str
    args: list[str]
    exitstatus: int | None = None  # None: no finish line (killed or crashed)
    wall: float | None = None
    innergraph: bool | None = None
    pytensor: str | None = None


@dataclass
class Record:
    name: str
    tests: dict[str, Result] = field(default_factory=dict)
    sessions: dict[str, Session] = field(default_factory=dict)
    repeated: int = 0  # test ids recorded more than once (the last one is kept)

    def counts(self) -> Counter[str]:
        return Counter(t.outcome for t in self.tests.values())

    def files(self) -> list[str]:
        """The files run: each session's arguments, in order, without node-id suffixes."""
        seen: dict[str, None] = {}
        for s in self.sessions.values():
            for a in s.args:
                seen.setdefault(a.split("::", 1)[0], None)
        return list(seen)


def read_record(path: str | Path, name: str | None = None) -> Record:
    record = Record(name or str(path))
    if not Path(path).exists():  # no pytest process wrote a line: judged as "nothing ran"
        return record
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise RecordError(f"{path}: {e}") from e
    for n, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        try:
            line = json.loads(raw)
            kind, sid = line["kind"], line["session"]
            if kind == "session":
                record.sessions.setdefault(sid, Session(sid, list(line["args"])))
            elif kind == "finish":
                s = record.sessions.setdefault(sid, Session(sid, []))
                s.exitstatus = int(line["exitstatus"])
                s.wall = float(line["wall"])
                s.innergraph = bool(line["innergraph"])
                s.pytensor = line.get("pytensor")
            elif kind == "test":
                outcome = line["outcome"]
                if outcome not in OUTCOMES:
                    raise ValueError(f"unknown outcome {outcome!r}")
                if line["id"] in record.tests:
                    record.repeated += 1
                record.tests[line["id"]] = Result(
                    line["id"], outcome, line.get("message", ""), float(line.get("duration", 0.0)), sid
                )
            else:
                raise ValueError(f"unknown kind {kind!r}")
        except (ValueError, KeyError, TypeError) as e:  # json.JSONDecodeError is a ValueError
            raise RecordError(f"{path}:{n}: not a record line ({e}): {raw[:120]}") from e
    return record


def read_expected(path: str | Path, suite: str) -> dict[str, str]:
    """``{test id: reason}`` from the table ``[suite]`` of an expected-differences file."""
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise RecordError(f"{path}: {e}") from e
    for key, value in data.items():
        if not isinstance(value, dict):
            raise RecordError(f"{path}: {key!r} is not in a [suite] table")
    table = data.get(suite, {})
    for test_id, reason in table.items():
        if not isinstance(reason, str) or not reason.strip() or "\n" in reason.strip():
            raise RecordError(f"{path}: [{suite}] {test_id!r} needs a one-line reason")
    return {k: v.strip() for k, v in table.items()}


# ---------------------------------------------------------------------------------------------
# Comparing
# ---------------------------------------------------------------------------------------------


@dataclass
class Finding:
    rule: str  # one of RULES, or "expected" / "info: ..." for lines that do not fail
    id: str
    vanilla: str
    innergraph: str
    note: str = ""

    @property
    def fails(self) -> bool:
        return self.rule in RULES


@dataclass
class Comparison:
    vanilla: Record
    innergraph: Record
    findings: list[Finding]

    @property
    def failures(self) -> list[Finding]:
        return [f for f in self.findings if f.fails]

    def rules(self) -> set[str]:
        return {f.rule for f in self.failures}


def _difference(v: Result | None, g: Result | None) -> tuple[str, str] | None:
    """(rule, note) when innergraph's outcome is worse than vanilla's; ("info: ...", note) when
    it differs without failing; None when equal."""
    vo = v.outcome if v else "absent"
    go = g.outcome if g else "absent"
    if vo == go:
        return None
    note = (g.message if g else "") or (v.message if v else "")
    if g is None:
        return "missing", "not collected with innergraph"
    if v is None:
        return "info: only with innergraph", note
    if go == "collect-error" or vo == "collect-error":
        return None  # reported per module below
    if go in NOT_RUN and vo not in NOT_RUN:
        return "skipped", note
    if vo in GOOD:
        return "regressed", note
    if vo in NOT_RUN and go in BAD:
        return "fails-where-skipped", note
    if vo in NOT_RUN:
        return "info: runs only with innergraph", note
    return "info: vanilla fails, innergraph differs", note


def _same_file(a: str, b: str) -> bool:
    a, b = a.replace(os.sep, "/").lstrip("./"), b.replace(os.sep, "/").lstrip("./")
    return a == b or a.endswith("/" + b) or b.endswith("/" + a)


def compare(
    vanilla: Record,
    innergraph: Record,
    expected: dict[str, str] | None = None,
    files: Iterable[str] = (),
    disabled: Iterable[str] = (),
) -> Comparison:
    """Compare two records test by test; ``disabled`` turns rules off (the unit tests show
    that each rule is what catches its case)."""
    expected = expected or {}
    off = set(disabled)
    unknown = off - set(RULES)
    if unknown:
        raise ValueError(f"unknown rules {sorted(unknown)}")
    findings: list[Finding] = []

    def add(rule: str, id_: str, v: str, g: str, note: str = "") -> None:
        if rule not in off:
            findings.append(Finding(rule, id_, v, g, note))

    vt, gt = vanilla.tests, innergraph.tests
    files_run = {test_id.split("::")[0] for test_id in (*vt, *gt)}
    for test_id in sorted(set(vt) | set(gt) | set(expected)):
        v, g = vt.get(test_id), gt.get(test_id)
        diff = _difference(v, g)
        vo, go = (v.outcome if v else "absent"), (g.outcome if g else "absent")
        if test_id in expected:
            if v is None and g is None and test_id.split("::")[0] not in files_run:
                continue  # its file was not run (another tier, another list): nothing to judge
            if diff is None and vo != "collect-error":
                add("stale", test_id, vo, go, f"listed ({expected[test_id]}) but no longer differs")
            else:
                findings.append(Finding("expected", test_id, vo, go, expected[test_id]))
            continue
        if "collect-error" in (vo, go):
            where = "both" if vo == go else ("vanilla" if vo == "collect-error" else "innergraph")
            msg = (g.message if g and go == "collect-error" else "") or (v.message if v else "")
            add("collect-error", test_id, vo, go, f"errored at collection in {where}: {msg}")
            continue
        if diff is not None:
            add(diff[0], test_id, vo, go, diff[1])

    for name, rec in (("vanilla", vanilla), ("innergraph", innergraph)):

        def cols(text: str, name: str = name) -> tuple[str, str]:  # the text in this variant's column
            return (text, "") if name == "vanilla" else ("", text)

        if not any(t.outcome in RAN for t in rec.tests.values()):
            counts = _counts_line(rec.counts()) if rec.tests else "no test recorded"
            add("nothing-ran", f"({name})", *cols(counts), f"{name} ran no test")
        collect_errors = {t.session for t in rec.tests.values() if t.outcome == "collect-error"}
        for s in rec.sessions.values():
            args = " ".join(s.args) or f"(session {s.session})"
            if s.exitstatus is None:
                add("session", args, *cols("killed"), f"{name}: pytest never finished (a timeout or a crash)")
            elif s.exitstatus in (3, 4) or (s.exitstatus == 2 and s.session not in collect_errors):
                add("session", args, *cols(f"exit {s.exitstatus}"),
                    f"{name}: pytest exit status {s.exitstatus} (2 interrupted, 3 internal error, 4 usage)")
            if s.innergraph is not None and s.innergraph != (name == "innergraph"):
                add("variant", args, "", "", f"{name} session {'imported' if s.innergraph else 'did not import'} innergraph")

    by_file: dict[str, Counter[str]] = {}
    for t in vt.values():
        by_file.setdefault(t.file, Counter())[t.outcome] += 1
    for f, c in sorted(by_file.items()):
        good = sum(c[o] for o in GOOD)
        bad = c["failed"] + c["error"]
        if good == 0 and bad > 0:
            add("file-broken", f, f"{bad} failed/errored, none passed", "", "vanilla judges nothing in this file")

    for f in files:
        for name, rec in (("vanilla", vanilla), ("innergraph", innergraph)):
            if not any(_same_file(f, ran) for ran in rec.files()):
                add("file-not-run", f, "", "", f"no pytest session ran it ({name})")
    return Comparison(vanilla, innergraph, findings)


# ---------------------------------------------------------------------------------------------
# Printing
# ---------------------------------------------------------------------------------------------


def _counts_line(c: Counter[str]) -> str:
    return ", ".join(f"{c[o]} {o}" for o in OUTCOMES if c[o]) or "nothing"


def _table(rows: list[Finding]) -> list[str]:
    width = min(max(len(r.id) for r in rows), 110)
    lines = [f"  {'rule':<14} {'test id':<{width}}  {'vanilla':<12} {'innergraph':<12} note"]
    for r in rows:
        note = r.note if len(r.note) <= 160 else r.note[:157] + "..."
        lines.append(f"  {r.rule:<14} {r.id:<{width}}  {r.vanilla:<12} {r.innergraph:<12} {note}")
    return lines


def report(cmp: Comparison) -> str:
    out = [
        f"outcomes: vanilla    {_counts_line(cmp.vanilla.counts())} ({len(cmp.vanilla.sessions)} sessions)",
        f"outcomes: innergraph {_counts_line(cmp.innergraph.counts())} ({len(cmp.innergraph.sessions)} sessions)",
    ]
    own = sorted(
        t.id for t in cmp.vanilla.tests.values()
        if t.outcome in ("failed", "error") and cmp.innergraph.tests.get(t.id, t).outcome == t.outcome
    )
    if own:
        out.append(f"vanilla's own failures, same with innergraph ({len(own)}, not judged):")
        out += [f"  {i}  -- {cmp.vanilla.tests[i].message[:150]}" for i in own]
    info = [f for f in cmp.findings if not f.fails]
    if info:
        out.append(f"differences that do not fail ({len(info)}):")
        out += _table(info)
    failures = cmp.failures
    if failures:
        per_rule = Counter(f.rule for f in failures)
        out.append(f"FAILED ({len(failures)}: " + ", ".join(f"{n} {r}" for r, n in sorted(per_rule.items())) + "):")
        out += _table(failures)
    else:
        out.append("outcomes: innergraph keeps vanilla's outcome for every test")
    return "\n".join(out)


def summary(rec: Record, markdown: bool = False, slowest: int = 0) -> str:
    files: dict[str, Counter[str]] = {}
    for t in rec.tests.values():
        files.setdefault(t.file, Counter())[t.outcome] += 1
    wall: dict[str, float] = {}
    for s in rec.sessions.values():
        for a in s.args:
            wall[a.split("::", 1)[0]] = wall.get(a.split("::", 1)[0], 0.0) + (s.wall or 0.0)
    out = []
    if markdown:
        out += ["| file | outcomes | pytest wall (s) |", "|---|---|---:|"]
    for f in sorted(set(files) | set(wall)):
        c = files.get(f, Counter())
        w = f"{wall[f]:.0f}" if f in wall else "?"
        out.append(f"| `{f}` | {_counts_line(c)} | {w} |" if markdown else f"{f:<55} {w:>6}s  {_counts_line(c)}")
    killed = [" ".join(s.args) for s in rec.sessions.values() if s.exitstatus is None]
    bad = sorted(t.id for t in rec.tests.values() if t.outcome in BAD)
    out.append(f"total: {_counts_line(rec.counts())}; {len(rec.sessions)} sessions"
               + (f", {len(killed)} killed: {' '.join(killed)}" if killed else "")
               + (f"; {rec.repeated} ids recorded twice" if rec.repeated else ""))
    out += [f"  {rec.tests[i].outcome}: {i}  -- {rec.tests[i].message[:150]}" for i in bad]
    if slowest:
        out.append(f"slowest {slowest} (setup + call + teardown):")
        ranked = sorted(rec.tests.values(), key=lambda t: -t.duration)[:slowest]
        out += [f"  {t.duration:8.1f}s  {t.id}" for t in ranked]
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("compare", help="vanilla vs innergraph, test by test (exit 1 on a failing rule)")
    c.add_argument("vanilla")
    c.add_argument("innergraph")
    c.add_argument("--expected", help="expected-differences TOML file")
    c.add_argument("--suite", default="upstream", help="its table (default: upstream)")
    c.add_argument("--files", nargs="*", default=[], help="files that must have run in both variants")
    s = sub.add_parser("summary", help="counts per file, wall time, failing ids of one record")
    s.add_argument("record")
    s.add_argument("--markdown", action="store_true")
    s.add_argument("--slowest", type=int, default=0, metavar="N", help="also list the N slowest tests")
    args = parser.parse_args(argv)
    try:
        if args.command == "summary":
            print(summary(read_record(args.record), args.markdown, args.slowest))
            return 0
        expected = read_expected(args.expected, args.suite) if args.expected else {}
        cmp = compare(read_record(args.vanilla, "vanilla"), read_record(args.innergraph, "innergraph"),
                      expected, args.files)
    except RecordError as e:
        print(f"outcomes: {e}", file=sys.stderr)
        return 2
    print(report(cmp))
    return 1 if cmp.failures else 0


if __name__ == "__main__":
    sys.exit(main())
