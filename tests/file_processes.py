"""Test files in forked processes: the suite's memory is a few files', not their sum.

Numba's compiled code lives as long as the process that compiled it (LLVM's MCJIT never frees
it: numba/numba#5976, #7831), so one pytest process that compiles the whole suite under Numba
holds every file's code at once, and its memory grows with every file (issue 49). Here pytest's
own process collects and reports, and the test files run in children forked from it: a child
runs files in collection order until its memory passes a budget, and exits; its code goes with
it, and the next file starts in a fresh child.

Terms:

- **the parent**: pytest's own process. It collects every test, then forks children and
  reports what they send, as if the tests had run in it (the terminal, ``-x``, the cache of
  last failures, junit XML all see ordinary reports).
- **a child**: a fork of the parent that runs whole test files through pytest's whole
  protocol (fixtures, captures, warnings), sends each report, warning and line of the
  differential summary back through a pipe, and after each file either goes on with the next
  one or exits.
- **the budget**: the resident memory (MB) above which a child starts no further file
  (``--child-memory``, or ``INNERGRAPH_CHILD_MEMORY``; default `DEFAULT_BUDGET_MB`). Each
  process costs its start: Numba's and JAX's first compilation, PyTensor's reading of its
  compile cache, the compiled functions earlier files left in memory (on eight Numba-heavy
  files with warm caches, a process per file took 98 s against 85 s in one process and 87 s
  under the budget). A child's memory is at most the budget plus one file's growth; 0 gives a
  process per file.

A child that dies (a crash, a signal) fails the test it was running, naming the exit status,
and the rest of its file is reported as not run with the same reason; the next file starts in
a new child. Everything runs in one process, as before, under ``--one-process`` (or
``INNERGRAPH_ONE_PROCESS=1``), when pytest's debugger or pytest-xdist is in use, with
``--benchmark-enable`` (benchmarks are measured and summarized in one process), and on systems
without ``fork``.
"""

from __future__ import annotations

import os
import pickle
import struct
import sys
import types
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from _pytest.reports import TestReport

__all__ = ["DEFAULT_BUDGET_MB", "file_groups", "pytest_addoption", "pytest_runtestloop", "register_child_state"]

_HEADER = struct.Struct("!I")

#: A child starts no further test file once its resident memory passes this many MB. Measured
#: on the suite (design/testing.md, "The suite's memory"): pytest's own process holds about
#: 300 MB after collecting, one file adds at most about 1.4 GB (tests/benchmarks/test_cases.py),
#: so a child stays under 3 GB (the warm suite's largest process held 1.20 GB, 2026-11-29).
DEFAULT_BUDGET_MB = 1200

#: Module-level state a child fills for the parent's summary: name -> (read the child's
#: entries, extend the parent's). `register_child_state` adds one.
_CHILD_STATE: dict[str, tuple[Callable[[], list[Any]], Callable[[list[Any]], None]]] = {}


def register_child_state(name: str, read: Callable[[], list[Any]], extend: Callable[[list[Any]], None]) -> None:
    """Carry a list the tests fill (e.g. lines of a terminal summary) from each child to the parent.

    ``read()`` is called in the child when its file starts and when it ends; ``extend(entries)``
    in the parent with the entries the child added (the list it inherited from the parent at
    the fork is the parent's already).
    """
    _CHILD_STATE[name] = (read, extend)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--one-process",
        action="store_true",
        default=os.environ.get("INNERGRAPH_ONE_PROCESS", "") not in ("", "0"),
        help="run every test file in pytest's own process instead of forked children "
        "(tests/file_processes.py; also INNERGRAPH_ONE_PROCESS=1)",
    )
    parser.addoption(
        "--child-memory",
        type=int,
        metavar="MB",
        default=int(os.environ.get("INNERGRAPH_CHILD_MEMORY", DEFAULT_BUDGET_MB)),
        help="a forked child starts no further test file once its resident memory passes MB "
        f"(default {DEFAULT_BUDGET_MB}; 0: a process per file; also INNERGRAPH_CHILD_MEMORY)",
    )


def _isolating(config: pytest.Config) -> bool:
    option = config.option
    if option.one_process or not hasattr(os, "fork"):
        return False
    if getattr(option, "usepdb", False) or getattr(option, "trace", False):
        return False
    if getattr(option, "numprocesses", None) or hasattr(config, "workerinput"):
        return False
    benchmark = getattr(config, "_benchmarksession", None)
    return benchmark is None or benchmark.disabled


def file_groups(items: list[pytest.Item]) -> Iterator[list[pytest.Item]]:
    """The collected items in runs of one file each, in collection order."""
    group: list[pytest.Item] = []
    for item in items:
        if group and item.path != group[-1].path:
            yield group
            group = []
        group.append(item)
    if group:
        yield group


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> bool | None:
    if not _isolating(session.config):
        return None  # pytest's own loop
    if session.testsfailed and not session.config.option.continue_on_collection_errors:
        raise session.Interrupted(f"{session.testsfailed} error{'s' if session.testsfailed != 1 else ''} during collection")
    if session.config.option.collectonly:
        return True
    groups = list(file_groups(session.items))
    budget = session.config.option.child_memory * 2**20
    start = 0
    while start < len(groups):
        start = _run_in_child(session, groups, start, budget)
        if session.shouldfail:
            raise session.Failed(session.shouldfail)
        if session.shouldstop:
            raise session.Interrupted(session.shouldstop)
    return True


def _resident_bytes() -> int:
    """This process's resident memory now (Linux), or its peak where /proc is missing."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak if sys.platform == "darwin" else peak * 1024


# --- the child ----------------------------------------------------------------------------


class _Sender:
    """The child's plugin: sends each report and warning to the parent as it happens."""

    def __init__(self, config: pytest.Config, fd: int) -> None:
        self.config = config
        self.fd = fd
        #: False while the plugin is registered: pluggy then replays to it every warning the
        #: parent recorded before the fork, which the parent has already (sent back, they would
        #: double with every file).
        self.live = False

    def send(self, message: tuple[Any, ...]) -> None:
        data = pickle.dumps(message)
        os.write(self.fd, _HEADER.pack(len(data)))
        view = memoryview(data)
        while view:
            view = view[os.write(self.fd, view) :]

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logstart(self, nodeid: str, location: tuple[str, int | None, str]) -> None:
        self.send(("start", nodeid, location))

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report: TestReport) -> None:
        self.send(("report", self.config.hook.pytest_report_to_serializable(config=self.config, report=report)))

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logfinish(self, nodeid: str, location: tuple[str, int | None, str]) -> None:
        self.send(("finish", nodeid, location))

    @pytest.hookimpl(tryfirst=True)
    def pytest_warning_recorded(self, warning_message: warnings.WarningMessage, when: str, nodeid: str, location: Any) -> None:
        if not self.live:
            return
        message = warning_message.message
        try:
            pickle.dumps(message)
        except Exception:
            message = warning_message.category(str(message)) if isinstance(message, Warning) else str(message)
        plain = warnings.WarningMessage(message, warning_message.category, warning_message.filename, warning_message.lineno)
        self.send(("warning", plain, when, nodeid, location))


#: The hooks through which the parent hears of what a child ran (`_Sender`).
_REPORTED_HOOKS = ("pytest_runtest_logreport", "pytest_warning_recorded", "pytest_runtest_logstart", "pytest_runtest_logfinish")


def _pytests_own(plugin: object) -> bool:
    module = plugin.__name__ if isinstance(plugin, types.ModuleType) else type(plugin).__module__
    return module.split(".")[0] in ("_pytest", "pytest")


def _child(session: pytest.Session, groups: list[list[pytest.Item]], start: int, budget: int, fd: int) -> None:
    config = session.config
    manager = config.pluginmanager
    # The parent reports what the child sends: a plugin that took reports or warnings here too
    # would take each one twice. pytest's terminal reporter and junit XML go; so do the
    # reporting hooks (only those) of every plugin that is not pytest's own: a conftest's, or
    # one recording outcomes to a file as CI's does. pytest's own keep theirs (the session
    # counts failures for -x; the logging plugin puts captured logs into the reports).
    for name in ("terminalreporter", "junitxml"):
        plugin = manager.get_plugin(name)
        if plugin is not None:
            manager.unregister(plugin)
    for hook in _REPORTED_HOOKS:
        caller = getattr(manager.hook, hook)
        for impl in list(caller.get_hookimpls()):
            if not _pytests_own(impl.plugin):
                caller._remove_plugin(impl.plugin)
    sender = _Sender(config, fd)
    manager.register(sender, "innergraph-file-process-sender")
    sender.live = True
    # what the parent held at the fork, then what was sent: only what the tests add goes back
    sent = {name: len(read()) for name, (read, _) in _CHILD_STATE.items()}
    for index in range(start, len(groups)):
        group = groups[index]
        for i, item in enumerate(group):
            # the next file's first test follows the last of this one, as in pytest's own loop:
            # the module is torn down after it, the session only at the very end
            nextitem = group[i + 1] if i + 1 < len(group) else (groups[index + 1][0] if index + 1 < len(groups) else None)
            item.config.hook.pytest_runtest_protocol(item=item, nextitem=nextitem)
            if session.shouldfail or session.shouldstop:
                break
        for name, (read, _) in _CHILD_STATE.items():
            entries = read()
            sender.send(("state", name, entries[sent[name] :]))
            sent[name] = len(entries)
        sender.send(("file", index))
        if session.shouldfail or session.shouldstop or index + 1 == len(groups):
            return
        if _resident_bytes() > budget:
            # past the budget: tear down what the next file would have shared (the session's
            # fixtures) and leave it to a fresh child
            session._setupstate.teardown_exact(None)
            return


# --- the parent ---------------------------------------------------------------------------


def _messages(fd: int) -> Iterator[tuple[Any, ...]]:
    with os.fdopen(fd, "rb") as pipe:
        while True:
            head = pipe.read(_HEADER.size)
            if len(head) < _HEADER.size:
                return
            (size,) = _HEADER.unpack(head)
            body = pipe.read(size)
            if len(body) < size:
                return
            yield pickle.loads(body)


def _run_in_child(session: pytest.Session, groups: list[list[pytest.Item]], start: int, budget: int) -> int:
    """Run files from ``groups[start]`` on in a child; the index of the first file it did not finish."""
    config = session.config
    read_fd, write_fd = os.pipe()
    _flush()  # else the child inherits the parent's unwritten output and writes it again
    pid = os.fork()
    if pid == 0:  # the child
        status = 0
        try:
            os.close(read_fd)
            _child(session, groups, start, budget, write_fd)
        except BaseException:  # noqa: BLE001 -- reported by the parent as the child's death
            status = 3
        finally:
            _flush()  # os._exit writes no buffer: what a test printed under -s would be lost
            os._exit(status)
    os.close(write_fd)
    running: str | None = None
    finished: set[str] = set()
    done = start  # the first file the child has not finished
    for message in _messages(read_fd):
        kind = message[0]
        if kind == "start":
            running = message[1]
            config.hook.pytest_runtest_logstart(nodeid=message[1], location=message[2])
        elif kind == "report":
            report = config.hook.pytest_report_from_serializable(config=config, data=message[1])
            config.hook.pytest_runtest_logreport(report=report)
        elif kind == "finish":
            finished.add(message[1])
            running = None
            config.hook.pytest_runtest_logfinish(nodeid=message[1], location=message[2])
        elif kind == "warning":
            _, warning_message, when, nodeid, location = message
            config.hook.pytest_warning_recorded.call_historic(
                kwargs=dict(warning_message=warning_message, when=when, nodeid=nodeid, location=location)
            )
        elif kind == "state":
            _CHILD_STATE[message[1]][1](message[2])
        elif kind == "file":
            done = message[1] + 1
    _, status = os.waitpid(pid, 0)
    if status == 0 or session.shouldfail or session.shouldstop or done == len(groups):
        return done
    # The child died: fail the test it was running and every later test of its file.
    group = groups[done]
    cause = _describe(status)
    stopped = False
    for item in group:
        if item.nodeid in finished:
            continue
        if stopped:
            break
        if item.nodeid != running:
            config.hook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
        report = TestReport(
            item.nodeid,
            item.location,
            {name: 1 for name in item.keywords},
            "failed",
            f"the process running {item.path.name} {cause} "
            + ("during this test" if item.nodeid == running else "before this test ran"),
            "call",
        )
        config.hook.pytest_runtest_logreport(report=report)
        config.hook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
        stopped = bool(session.shouldfail)
    return done + 1


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            pass


def _describe(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"was killed by signal {os.WTERMSIG(status)}"
    return f"exited with status {os.WEXITSTATUS(status)}"
