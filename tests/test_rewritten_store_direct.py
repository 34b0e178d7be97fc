"""The on-disk store of rewritten graphs, called directly (issue 47).

`innergraph.patching.rewritten_store` keeps one file per key: a magic line, the SHA-256
digest of the payload and the payload, written to a temporary file and renamed over the
entry, checked when read (a corrupted entry is removed with one warning); a hit sets an
old entry's last use, and a process's first write trims the store (unused, excess and
stale files) when it was last trimmed more than an hour ago. Every test
here works in a folder of its own (``INNERGRAPH_REWRITTEN_CACHE``), never in PyTensor's
compile directory, and compiles nothing.
"""

import hashlib
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import pytest
from pytensor import config

from innergraph.patching import rewritten_store as store
from innergraph.patching.rewritten_store import ENV, MAGIC, MAX_BYTES, discard, folder, read, write

KEY = "0123456789abcdef" * 4  # a key's 64 hex digits


@pytest.fixture
def where(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A store folder of this test's own (not created yet: the first write creates it)."""
    monkeypatch.setenv(ENV, str(tmp_path / "store"))
    return tmp_path / "store"


def entry(where: Path, key: str = KEY) -> Path:
    return where / f"{key}.graph"


def test_the_folder_is_the_environments_or_beside_pytensors_compiled_code(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV, raising=False)
    assert folder() == Path(config.compiledir) / "innergraph_rewritten"
    monkeypatch.setenv(ENV, "off")
    assert folder() is None
    monkeypatch.setenv(ENV, str(tmp_path))
    assert folder() == tmp_path
    monkeypatch.setenv(ENV, "store")  # a relative folder, a name after "off"
    assert folder() == Path("store")


def test_an_entry_is_magic_digest_and_payload_and_reads_back(where: Path) -> None:
    payload = b"\x80\x05 a payload"
    assert write(KEY, payload) is True
    assert entry(where).read_bytes() == MAGIC + hashlib.sha256(payload).digest() + payload
    assert MAGIC == b"innergraph rewritten graph\n" and len(MAGIC) == 27
    assert read(KEY) == payload
    assert sorted(p.name for p in where.iterdir()) == [f"{KEY}.graph"]  # no temporary file left
    assert write(KEY, b"another") is True and read(KEY) == b"another"  # the folder exists: written over
    assert write(KEY, b"") is True and read(KEY) == b""


def test_the_folder_is_created_with_its_parents(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, str(tmp_path / "a" / "b"))
    assert write(KEY, b"payload") is True and read(KEY) == b"payload"


def test_turned_off_nothing_is_read_written_or_discarded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, "off")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert write(KEY, b"payload") is False
        assert read(KEY) is None
        discard(KEY, "why")


def test_a_missing_entry_is_a_silent_miss(where: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert read(KEY) is None
        where.mkdir()
        assert read(KEY) is None


def test_the_size_limit_is_64_mb_and_an_entry_of_exactly_the_limit_is_written(where: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert MAX_BYTES == 67_108_864  # 64 MB (design/rewritten-graphs.md)
    monkeypatch.setattr(store, "MAX_BYTES", 10)
    assert write(KEY, b"x" * 10) is True and read(KEY) == b"x" * 10
    other = "f" * 64
    assert write(other, b"x" * 11) is False and not entry(where, other).exists()
    assert write(other, b"x" * 9) is True and read(other) == b"x" * 9


def test_an_unwritable_folder_is_no_write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "file").write_text("not a folder")
    monkeypatch.setenv(ENV, str(tmp_path / "file" / "store"))
    assert write(KEY, b"payload") is False


def test_the_temporary_file_is_hidden_named_after_the_key_and_renamed_over_the_entry(where: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    renamed: list[tuple[Path, Path]] = []
    replace = os.replace

    def spy(src: Any, dst: Any) -> None:
        renamed.append((Path(src), Path(dst)))
        replace(src, dst)

    monkeypatch.setattr(os, "replace", spy)
    assert write(KEY, b"payload") is True
    ((tmp, dst),) = renamed
    assert dst == entry(where) and tmp.parent == where
    assert tmp.name.startswith(".0123456789abcdef.") and tmp.name.endswith(".tmp") and not tmp.exists()


@pytest.mark.parametrize("error", [OSError("disk full"), KeyboardInterrupt()], ids=["OSError", "KeyboardInterrupt"])
@pytest.mark.parametrize("renamed", [False, True], ids=["before the rename", "after the rename"])
def test_a_write_that_fails_leaves_no_temporary_file_and_an_interrupt_goes_through(
    where: Path, monkeypatch: pytest.MonkeyPatch, error: BaseException, renamed: bool
) -> None:
    replace = os.replace

    def failing(src: Any, dst: Any) -> None:
        if renamed:  # the interrupt arrived just after the rename: the temporary file is gone
            replace(src, dst)
        raise error

    monkeypatch.setattr(os, "replace", failing)
    if isinstance(error, OSError):
        assert write(KEY, b"payload") is False
    else:
        with pytest.raises(KeyboardInterrupt):
            write(KEY, b"payload")
    assert [p.name for p in where.iterdir()] == ([f"{KEY}.graph"] if renamed else [])


def _written(where: Path, payload: bytes) -> Path:
    assert write(KEY, payload) is True
    return entry(where)


def _removed_with_one_warning(where: Path, why: str) -> None:
    with pytest.warns(RuntimeWarning) as caught:
        assert read(KEY) is None  # the warning points here, at read's caller (stacklevel 3)
    (warning,) = [w for w in caught if "rewritten-graph" in str(w.message)]
    assert str(warning.message) == f"innergraph: removed the rewritten-graph cache entry {entry(where)} ({why}); the graph is rewritten again"
    assert (warning.filename, warning.lineno) == (__file__, _removed_with_one_warning.__code__.co_firstlineno + 2)
    assert not entry(where).exists()


NOT_OURS = "not an entry of this store"
DIGEST = "its digest does not match its content (truncated or overwritten)"


@pytest.mark.parametrize(
    ("damage", "why"),
    [
        (lambda data: b"\x00" * 100, NOT_OURS),  # garbage as long as an entry's head and more
        (lambda data: data[: len(MAGIC) + 10], NOT_OURS),  # truncated inside the digest
        (lambda data: data[:5], NOT_OURS),  # truncated inside the magic
        (lambda data: b"x" + data[1:], NOT_OURS),  # the magic changed
        (lambda data: data[:-3], DIGEST),  # truncated inside the payload
        (lambda data: data + b"more", DIGEST),  # appended to
    ],
    ids=["garbage", "head truncated", "magic truncated", "magic changed", "payload truncated", "appended"],
)
def test_a_corrupted_entry_is_removed_with_one_warning_naming_why(where: Path, damage: Any, why: str) -> None:
    path = _written(where, b"\x80\x05 a payload of some length")
    path.write_bytes(damage(path.read_bytes()))
    _removed_with_one_warning(where, why)


def test_a_payload_whose_digest_sorts_either_side_of_the_stored_one_is_corrupted(where: Path) -> None:
    """Another payload under the old digest, once with a smaller digest and once with a larger one."""
    payload = b"the payload"
    stored = hashlib.sha256(payload).digest()
    others = [b"other %d" % i for i in range(64)]
    smaller = next(p for p in others if hashlib.sha256(p).digest() < stored)
    larger = next(p for p in others if hashlib.sha256(p).digest() > stored)
    for other in (smaller, larger):
        path = _written(where, payload)
        path.write_bytes(MAGIC + stored + other)
        _removed_with_one_warning(where, DIGEST)


def test_an_unreadable_entry_is_removed_with_one_warning(where: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _written(where, b"payload")

    def unreadable(self: Path) -> bytes:
        raise PermissionError("no permission")

    monkeypatch.setattr(Path, "read_bytes", unreadable)
    _removed_with_one_warning(where, "unreadable: no permission")


def test_discard_removes_an_entry_with_one_warning_even_one_removed_first(where: Path) -> None:
    _written(where, b"payload")
    for _ in range(2):  # the second time another process removed it first
        with pytest.warns(RuntimeWarning, match="removed the rewritten-graph cache entry") as caught:
            discard(KEY, "its outputs do not fit the graph")
        (warning,) = [w for w in caught if "rewritten-graph" in str(w.message)]
        assert "(its outputs do not fit the graph)" in str(warning.message)
        assert not entry(where).exists()


# -- last use and trimming -----------------------------------------------------------------

HOUR = 3600.0
AGE = float(config.cmodule__age_thresh_use)  # PyTensor's age limit of a compiled module


def _aged(path: Path, seconds: float, now: float | None = None) -> Path:
    """``path`` with its last use set ``seconds`` before ``now`` (the clock by default)."""
    when = (time.time() if now is None else now) - seconds
    os.utime(path, (when, when))
    return path


def _entries(where: Path, *ages: float, size: int = 100, now: float = 1e9) -> list[Path]:
    """One entry per age (seconds before ``now``), each of ``size`` bytes, under keys "0...0", "1...1", ..."""
    made = []
    for k, age in enumerate(ages):
        key = f"{k:x}" * 64
        assert write(key, b"x" * (size - len(MAGIC) - 32)) is True
        made.append(_aged(entry(where, key), age, now))
    assert all(p.stat().st_size == size for p in made)
    return made


@pytest.fixture
def untrimmed(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process counts as one that has not trimmed the store yet."""
    monkeypatch.setattr(store, "_trimmed", False)


@pytest.fixture
def trimmed(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process counts as one that has trimmed the store already: writes trim nothing."""
    monkeypatch.setattr(store, "_trimmed", True)


def test_the_trims_limits_are_the_documented_ones() -> None:
    assert store.MAX_TOTAL == 256 * 2**20
    assert store.TOUCH_AFTER == HOUR
    assert store.STALE_TEMPORARY == HOUR
    assert AGE == 24 * 24 * HOUR  # PyTensor's default, which the store follows


def test_a_hit_sets_an_old_entrys_last_use_and_leaves_a_recent_one_alone(where: Path, trimmed: None) -> None:
    path = _aged(_written(where, b"payload"), HOUR + 60)
    assert read(KEY) == b"payload"
    assert time.time() - path.stat().st_mtime < 60
    _aged(path, HOUR - 60)
    before = path.stat().st_mtime
    assert read(KEY) == b"payload"
    assert path.stat().st_mtime == before


def test_a_hit_on_a_store_that_cannot_be_written_is_still_a_hit(where: Path, trimmed: None, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _aged(_written(where, b"payload"), 2 * HOUR)
    before = path.stat().st_mtime

    def refused(*args: Any, **kwargs: Any) -> None:
        raise PermissionError("read-only")

    monkeypatch.setattr(os, "utime", refused)
    assert read(KEY) == b"payload"
    assert path.stat().st_mtime == before


def test_a_miss_and_a_corrupted_entry_set_no_time(where: Path, trimmed: None) -> None:
    assert read(KEY) is None
    assert not entry(where).exists()  # nothing made by the miss
    path = _aged(_written(where, b"payload"), 2 * HOUR)
    path.write_bytes(path.read_bytes()[:-1])
    with pytest.warns(RuntimeWarning):
        assert read(KEY) is None
    assert not path.exists()


def test_trim_removes_entries_unused_for_pytensors_age_limit(where: Path, trimmed: None) -> None:
    now = 1e9
    old, limit, recent = _entries(where, AGE + 1, AGE, AGE - 1, now=now)
    assert store.trim(now=now) == 1
    assert not old.exists() and limit.exists() and recent.exists()


def test_trim_judges_ages_by_the_clock_by_default(where: Path, trimmed: None) -> None:
    now = time.time()
    old, recent = _entries(where, AGE + 60, AGE - 60, now=now)
    assert store.trim() == 1
    assert not old.exists() and recent.exists()


def test_trim_removes_the_least_recently_used_entries_down_to_three_quarters(where: Path, trimmed: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store, "MAX_TOTAL", 1000)
    # 11 entries of 100 bytes: 1,100 > 1,000, so the oldest go until 750 is reached: 4 of them (700 left)
    made = _entries(where, *[float(100 - k) for k in range(11)], now=1e9)
    assert store.trim(now=1e9) == 4
    assert [p.exists() for p in made] == [False] * 4 + [True] * 7


def test_trim_stops_at_three_quarters_exactly(where: Path, trimmed: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store, "MAX_TOTAL", 1000)
    made = _entries(where, 9.0, 8.0, 7.0, 6.0, 5.0, 4.0, size=250, now=1e9)  # 1,500 bytes: 3 go, 750 stay
    assert store.trim(now=1e9) == 3
    assert [p.exists() for p in made] == [False] * 3 + [True] * 3


def test_trim_leaves_a_store_at_its_limit_alone(where: Path, trimmed: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store, "MAX_TOTAL", 1000)
    made = _entries(where, *[float(10 - k) for k in range(10)], now=1e9)  # exactly 1,000 bytes
    assert store.trim(now=1e9) == 0
    assert all(p.exists() for p in made)


def test_trim_counts_aged_out_entries_before_the_size(where: Path, trimmed: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store, "MAX_TOTAL", 1000)
    # 1,100 bytes, of which the oldest 100 are past the age limit: what is left fits, nothing else goes
    made = _entries(where, AGE + 1, *[float(10 - k) for k in range(10)], now=1e9)
    assert store.trim(now=1e9) == 1
    assert [p.exists() for p in made] == [False] + [True] * 10


def test_trim_removes_temporary_files_a_killed_writer_left(where: Path, trimmed: None) -> None:
    now = 1e9
    where.mkdir(parents=True)
    stale, fresh = where / f".{KEY[:16]}.abc123.tmp", where / f".{KEY[:16]}.def456.tmp"
    for path, age in ((stale, HOUR + 1), (fresh, HOUR - 1)):
        path.touch()
        _aged(path, age, now)
    assert store.trim(now=now) == 1
    assert not stale.exists() and fresh.exists()


def test_trim_removes_only_files_named_as_the_store_names_them(where: Path, trimmed: None) -> None:
    now = 1e9
    where.mkdir(parents=True)
    foreign = [
        where / "notes.txt", where / f"{KEY.upper()}.graph", where / f"{KEY[:-1]}.graph", where / f"{KEY}.graph.bak",
        where / f"x{KEY}.graph", where / f"{KEY[:16]}.abc.tmp", where / f".{KEY[:15]}.abc.tmp",
    ]
    for path in foreign:
        path.write_bytes(b"y" * 100)
        _aged(path, 2 * AGE, now)
    (where / "a folder").mkdir()
    assert store.trim(now=now) == 0
    assert all(path.exists() for path in foreign)


def test_trim_of_no_folder_or_a_store_turned_off_removes_nothing(where: Path, trimmed: None, monkeypatch: pytest.MonkeyPatch) -> None:
    assert store.trim() == 0  # the folder is made by the first write
    assert not where.exists()
    monkeypatch.setenv(ENV, "off")
    assert store.trim() == 0


def test_trim_skips_a_file_another_process_removed_meanwhile(where: Path, trimmed: None, monkeypatch: pytest.MonkeyPatch) -> None:
    old, recent = _entries(where, AGE + 1, AGE + 2, now=1e9)
    listing = list(os.scandir(where))
    recent.unlink()  # gone between the listing and its stat
    monkeypatch.setattr(os, "scandir", lambda path: iter(listing))
    assert store.trim(now=1e9) == 1
    assert not old.exists()


def test_trim_counts_a_file_it_could_not_remove_as_kept(where: Path, trimmed: None, monkeypatch: pytest.MonkeyPatch) -> None:
    (old,) = _entries(where, AGE + 1, now=1e9)

    def refused(path: str) -> None:
        raise PermissionError("read-only")

    monkeypatch.setattr(os, "unlink", refused)
    assert store.trim(now=1e9) == 0
    assert old.exists()


def _old_entry(where: Path, name: str) -> Path:
    """A file named as an entry, unused for longer than PyTensor's age limit."""
    path = where / f"{name * 64}.graph"
    path.write_bytes(b"y")
    return _aged(path, AGE + 60)


def test_the_first_write_of_a_process_trims_and_sets_the_stamp_and_the_next_do_not(where: Path, untrimmed: None) -> None:
    where.mkdir(parents=True)
    first = _old_entry(where, "e")
    assert write(KEY, b"payload") is True
    assert not first.exists() and store._trimmed is True
    assert time.time() - (where / store.STAMP).stat().st_mtime < 60
    _aged(where / store.STAMP, 2 * HOUR)
    second = _old_entry(where, "f")
    assert write(KEY, b"other") is True
    assert second.exists()


def test_a_process_trims_only_when_the_last_trim_is_older_than_an_hour(where: Path, untrimmed: None, monkeypatch: pytest.MonkeyPatch) -> None:
    assert store.TRIM_EVERY == HOUR and store.STAMP == ".trimmed"
    where.mkdir(parents=True)
    stamp = where / store.STAMP
    stamp.touch()
    _aged(stamp, HOUR - 60)  # another process trimmed 59 minutes ago
    old = _old_entry(where, "e")
    assert write(KEY, b"payload") is True
    assert old.exists() and store._trimmed is True
    monkeypatch.setattr(store, "_trimmed", False)  # a new process, an hour and a minute after that trim
    _aged(stamp, HOUR + 60)
    assert write(KEY, b"other") is True
    assert not old.exists()
    assert time.time() - stamp.stat().st_mtime < 60


def test_the_stamp_is_no_entry_and_a_trim_keeps_it(where: Path, trimmed: None) -> None:
    where.mkdir(parents=True)
    stamp = where / store.STAMP
    stamp.touch()
    _aged(stamp, 2 * AGE)
    assert store.trim() == 0
    assert stamp.exists()


def test_a_store_whose_stamp_cannot_be_read_or_set_is_not_trimmed(where: Path, untrimmed: None, monkeypatch: pytest.MonkeyPatch) -> None:
    where.mkdir(parents=True)
    old = _old_entry(where, "e")
    real_stat = Path.stat

    def unreadable(self: Path, **kwargs: Any) -> os.stat_result:
        if self.name == store.STAMP:
            raise PermissionError("no permission")
        return real_stat(self, **kwargs)

    monkeypatch.setattr(Path, "stat", unreadable)
    assert write(KEY, b"payload") is True
    assert old.exists()
    monkeypatch.setattr(Path, "stat", real_stat)
    monkeypatch.setattr(store, "_trimmed", False)

    def unwritable(self: Path, *args: Any, **kwargs: Any) -> None:
        raise PermissionError("read-only")

    monkeypatch.setattr(Path, "touch", unwritable)
    assert write(KEY, b"other") is True
    assert old.exists()


def test_a_write_that_is_refused_trims_nothing(where: Path, untrimmed: None) -> None:
    where.mkdir(parents=True)
    old = _old_entry(where, "e")
    assert write(KEY, b"x" * (MAX_BYTES + 1)) is False
    assert old.exists() and store._trimmed is False
    assert not (where / store.STAMP).exists()


# -- boundaries, clocks that were wrong, and a fresh process -------------------------------

NOW = 1_000_000_000  # seconds: exact as a file time, so boundaries hold to the second


@pytest.fixture
def frozen(monkeypatch: pytest.MonkeyPatch) -> int:
    """The clock stopped at `NOW` for the store (``time.time`` is the module the store reads)."""
    monkeypatch.setattr(store.time, "time", lambda: float(NOW))
    return NOW


def test_a_hit_at_exactly_an_hour_leaves_the_time_and_one_second_more_sets_it(where: Path, trimmed: None, frozen: int) -> None:
    path = _aged(_written(where, b"payload"), HOUR, frozen)
    assert read(KEY) == b"payload"
    assert path.stat().st_mtime == frozen - HOUR
    _aged(path, HOUR + 1, frozen)
    assert read(KEY) == b"payload"
    assert path.stat().st_mtime > frozen  # set to the real clock's now (utime does not read the frozen one)


def test_a_hit_on_an_entry_dated_in_the_future_leaves_its_time(where: Path, trimmed: None, frozen: int) -> None:
    path = _aged(_written(where, b"payload"), -2 * HOUR, frozen)  # another machine's clock, two hours ahead
    assert read(KEY) == b"payload"
    assert path.stat().st_mtime == frozen + 2 * HOUR


def test_a_temporary_file_exactly_an_hour_old_is_kept(where: Path, trimmed: None) -> None:
    where.mkdir(parents=True)
    tmp = where / f".{KEY[:16]}.abc123.tmp"
    tmp.touch()
    _aged(tmp, HOUR, NOW)
    assert store.trim(now=NOW) == 0 and tmp.exists()


def test_files_dated_in_the_future_are_kept(where: Path, trimmed: None) -> None:
    where.mkdir(parents=True)
    tmp = where / f".{KEY[:16]}.abc123.tmp"
    tmp.touch()
    _aged(tmp, -2 * HOUR, NOW)
    (future,) = _entries(where, -AGE - HOUR, now=NOW)
    assert store.trim(now=NOW) == 0
    assert tmp.exists() and future.exists()


def test_a_store_between_three_quarters_and_its_limit_is_left_alone(where: Path, trimmed: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store, "MAX_TOTAL", 1000)
    made = _entries(where, *[float(10 - k) for k in range(9)], now=NOW)  # 900 bytes: over 750, under 1,000
    assert store.trim(now=NOW) == 0
    assert all(p.exists() for p in made)


def test_a_stamp_exactly_an_hour_old_or_a_little_in_the_future_trims_nothing(where: Path, untrimmed: None, frozen: int, monkeypatch: pytest.MonkeyPatch) -> None:
    where.mkdir(parents=True)
    stamp = where / store.STAMP
    stamp.touch()
    old = _aged(_old_entry(where, "e"), AGE + 60, frozen)
    for age in (HOUR, -HOUR, -600.0):
        monkeypatch.setattr(store, "_trimmed", False)
        _aged(stamp, age, frozen)
        assert write(KEY, b"payload") is True
        assert old.exists()


def test_a_stamp_far_in_the_future_does_not_stop_trimming(where: Path, untrimmed: None, frozen: int) -> None:
    where.mkdir(parents=True)
    stamp = where / store.STAMP
    stamp.touch()
    _aged(stamp, -HOUR - 1, frozen)  # a clock that was an hour and a second ahead
    old = _old_entry(where, "e")
    _aged(old, AGE + 60, frozen)
    assert write(KEY, b"payload") is True
    assert not old.exists()
    assert stamp.stat().st_mtime != frozen + HOUR + 1  # set again


def test_a_fresh_process_trims_on_its_first_write(where: Path, tmp_path: Path) -> None:
    """Not a fixture's doing: a new interpreter's first write trims a store that was never stamped."""
    where.mkdir(parents=True)
    old = _old_entry(where, "e")
    script = (
        "from innergraph.patching import rewritten_store as s\n"
        f"assert s.write({KEY!r}, b'payload')\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True, env={**os.environ, ENV: str(where)}, cwd=tmp_path)
    assert not old.exists() and (where / store.STAMP).exists() and entry(where).exists()
