import hashlib
import os
import time
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from pytensor.graph.rewriting.basic import GraphRewriter

import innergraph  # noqa: F401  (installs the patches for every test)
from file_processes import pytest_addoption, pytest_runtestloop, register_child_state  # noqa: F401  (hooks: one process per test file)
from innergraph.rewriting.db import unregister

# Property-based tests: deterministic in CI; `--hypothesis-profile=thorough` runs thousands.
# `repeat` is for a second run of the whole suite on the same innergraph code in another form
# (the patched PyTensor, `innergraph_patches.verify`): the ci profile's examples already ran once.
_common: dict[str, Any] = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
settings.register_profile("ci", max_examples=200, derandomize=True, print_blob=True, **_common)
settings.register_profile("repeat", max_examples=25, derandomize=True, print_blob=True, **_common)
settings.register_profile("thorough", max_examples=3000, **_common)
settings.load_profile("ci")


# The differential test's seed (tests/test_differential.py): INNERGRAPH_DIFF_SEED, or one
# from the clock, so each run draws other programs; printed in the header to replay a run.
DIFFERENTIAL_SEED = int(os.environ.get("INNERGRAPH_DIFF_SEED") or time.time_ns() % 10**9)
_differential_lines: list[str] = []
register_child_state("differential lines", lambda: _differential_lines, _differential_lines.extend)


def _shard(text: str) -> tuple[int, int] | None:
    """``K/N`` (`INNERGRAPH_SHARD`): keep the tests whose id hashes to K modulo N (CI's second runs); empty: all."""
    if not text:
        return None
    k, _, n = text.partition("/")
    if not (k.isdigit() and n.isdigit() and 0 <= int(k) < int(n)):
        raise pytest.UsageError(f"INNERGRAPH_SHARD={text!r}: expected K/N with 0 <= K < N, e.g. 0/2")
    return int(k), int(n)


#: This session's shard, taken out of the environment: a pytest that a test starts runs whole.
SHARD = _shard(os.environ.pop("INNERGRAPH_SHARD", ""))


#: Files a shard takes whole: their module fixtures compile models in fresh processes on an
#: empty cache (about 175 s each at load 2 on PyTensor 3.3.6, 2026-11-29), which every shard
#: holding one of their tests would pay again.
WHOLE_FILES = frozenset({"tests/test_numba_reference.py", "tests/test_numba_reference_calls.py"})


def in_shard(nodeid: str, k: int, n: int) -> bool:
    """Whether the test ``nodeid`` is in shard ``k`` of ``n`` (a hash of the id, or of its file for `WHOLE_FILES`: the same on every machine)."""
    file = nodeid.split("::", 1)[0]
    key = file if file in WHOLE_FILES else nodeid
    return int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) % n == k


def pytest_collection_modifyitems(config, items):
    if SHARD is None:
        return
    keep: list[pytest.Item] = []
    drop: list[pytest.Item] = []
    for item in items:
        (keep if in_shard(item.nodeid, *SHARD) else drop).append(item)
    config.hook.pytest_deselected(items=drop)
    items[:] = keep


def pytest_report_header(config):
    lines = [f"innergraph differential seed: {DIFFERENTIAL_SEED} (replay: INNERGRAPH_DIFF_SEED={DIFFERENTIAL_SEED})"]
    if SHARD is not None:
        lines.append(f"innergraph shard {SHARD[0]}/{SHARD[1]} (INNERGRAPH_SHARD): the other tests are deselected")
    return lines


def pytest_terminal_summary(terminalreporter):
    if _differential_lines:
        terminalreporter.section("innergraph differential programs")
        for line in _differential_lines:
            terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def differential_seed():
    return DIFFERENTIAL_SEED


@pytest.fixture(scope="session")
def differential_report():
    """``differential_report(line)``: a line of the session's summary of differential programs."""
    return _differential_lines.append


@pytest.fixture
def rng():
    return np.random.default_rng(20261121)


@pytest.fixture
def fresh_body_table():
    """An empty body table (`innergraph.clear_body_cache`): for tests that count the work of one compilation.

    Bodies are interned across compilations (`innergraph.core.interning`), so an equal body
    an earlier test compiled would otherwise bring its compiled forms along.
    """
    import innergraph

    innergraph.clear_body_cache()
    yield
    innergraph.clear_body_cache()


class _Nothing(GraphRewriter):
    """A graph rewriter that changes nothing: registered to watch queries change."""

    def apply(self, fgraph):
        pass


@pytest.fixture
def registered_nothing():
    """``with registered_nothing(db, name, *tags, **kwargs) as rewriter``: a do-nothing rewriter registered in ``db`` for the block."""

    @contextmanager
    def register(db, name, *tags, **kwargs):
        rewriter = _Nothing()
        db.register(name, rewriter, *tags, **kwargs)
        try:
            yield rewriter
        finally:
            unregister(db, name, rewriter)
            db.__db__.pop(type(rewriter).__name__, None)  # the tag PyTensor adds for the class

    return register
