"""The on-disk store of rewritten graphs, called directly (issue 47).

`innergraph.patching.rewritten_store` keeps one file per key: a magic line, the SHA-256
digest of the payload and the payload, written to a temporary file and renamed over the
entry, checked when read (a corrupted entry is removed with one warning). Every test
here works in a folder of its own (``INNERGRAPH_REWRITTEN_CACHE``), never in PyTensor's
compile directory, and compiles nothing.
"""

import hashlib
import os
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
