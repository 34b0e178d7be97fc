"""The on-disk store of rewritten graphs: one file per key, written whole or not at all, checked when read.

Terms
-----
folder
    ``<PyTensor's compiledir>/innergraph_rewritten``: beside PyTensor's and Numba's
    compiled code, so whatever clears PyTensor's compile cache clears it too, and
    apart from every file vanilla PyTensor writes. ``INNERGRAPH_REWRITTEN_CACHE=off``
    turns the store off; any other value names another folder.
entry
    ``<key>.graph``: a magic line, the SHA-256 digest of the payload, the payload
    (a pickle). It is written to a temporary file in the folder and renamed over
    the entry (`os.replace`, atomic on one file system): two processes that write
    the same key at once both succeed and leave one whole entry.
corrupted entry
    A file whose magic, digest or pickle does not check out (truncated, overwritten,
    written by something else). `read` removes it with one warning and reports a
    miss, so the graph is rewritten again and the entry written anew.
last use
    An entry's modification time: set when it is written, and set again by a hit
    when it is more than `TOUCH_AFTER` seconds old (a write per read would cost
    more than it tells). A time in the future (another machine's clock, on a shared
    folder) is left as it is: the entry counts as just used.
trim
    Remove the entries not used for PyTensor's own age limit of a compiled module
    (``config.cmodule__age_thresh_use``, 24 days by default), and while the
    entries take more than `MAX_TOTAL` bytes, the least recently used ones, down
    to three quarters of it; and temporary files a killed writer left, an hour
    old. Every edit of a model writes an entry (its constants are part of the
    key), so without it the folder only grows. Only files named as the store
    names them are removed. A trim that removes an entry another process has just
    written again loses that entry, never a value: the next compilation misses
    and rewrites.
stamp
    ``.trimmed`` in the folder, set by each trim that `write` starts: the first
    write of a process trims when the stamp is older than `TRIM_EVERY`, absent, or
    more than that in the future (a clock that was wrong), so processes started
    many times an hour list the folder once an hour, not once each (a trim of
    5,000 entries took 25-64 ms).
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
import time
import warnings
from pathlib import Path

from pytensor import config

__all__ = [
    "ENV", "MAGIC", "MAX_BYTES", "MAX_TOTAL", "STALE_TEMPORARY", "STAMP", "TOUCH_AFTER", "TRIM_EVERY", "discard", "folder", "read",
    "trim", "write",
]

#: The environment variable that moves the store (a folder) or turns it off (``off``).
ENV = "INNERGRAPH_REWRITTEN_CACHE"

#: The first bytes of every entry (the format's version is in the key, `rewritten_key.FORMAT`).
MAGIC = b"innergraph rewritten graph\n"

#: Entries larger than this are not written (a graph holding large constants: loading it would cost what it saves).
MAX_BYTES = 64 * 2**20

#: Above this many bytes of entries, a trim removes the least recently used ones, down to 3/4 of it.
MAX_TOTAL = 256 * 2**20

#: A hit sets its entry's last use again when it is older than this (seconds).
TOUCH_AFTER = 3600.0

#: A temporary file older than this (seconds) was left by a writer that was killed.
STALE_TEMPORARY = 3600.0

#: A process's first write trims the store when its last trim (the stamp) is older than this (seconds).
TRIM_EVERY = 3600.0

#: The stamp's name in the folder (no entry's or temporary file's name).
STAMP = ".trimmed"

_DIGEST = 32

#: The names the store gives its files: an entry, a temporary file (`write`).
_ENTRY = re.compile(r"[0-9a-f]{64}\.graph")
_TEMPORARY = re.compile(r"\.[0-9a-f]{16}\..+\.tmp")

#: Whether this process has considered trimming the store (its first `write` does).
_trimmed = False


def folder() -> Path | None:
    """The store's folder (created when first written), or None when turned off."""
    setting = os.environ.get(ENV, "")
    if setting == "off":
        return None
    return Path(setting) if setting else Path(config.compiledir) / "innergraph_rewritten"


def _path(key: str) -> Path | None:
    where = folder()
    return None if where is None else where / f"{key}.graph"


def read(key: str) -> bytes | None:
    """The payload stored under ``key``, or None: no entry, or a corrupted one (removed, one warning)."""
    path = _path(key)
    if path is None:
        return None
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        _corrupted(path, f"unreadable: {exc}")
        return None
    head, payload = data[: len(MAGIC) + _DIGEST], data[len(MAGIC) + _DIGEST :]
    if not head.startswith(MAGIC) or len(head) != len(MAGIC) + _DIGEST:
        _corrupted(path, "not an entry of this store")
        return None
    if hashlib.sha256(payload).digest() != head[len(MAGIC) :]:
        _corrupted(path, "its digest does not match its content (truncated or overwritten)")
        return None
    _used(path)
    return payload


def _used(path: Path) -> None:
    """Set ``path``'s last use to now when it is older than `TOUCH_AFTER`; a store this process cannot write keeps its times."""
    try:
        if time.time() - path.stat().st_mtime > TOUCH_AFTER:
            os.utime(path)
    except OSError:
        pass


def discard(key: str, why: str) -> None:
    """Remove the entry of ``key`` with one warning: it checked out but could not be used (``why``)."""
    path = _path(key)
    if path is not None:
        _corrupted(path, why)


def _corrupted(path: Path, why: str) -> None:
    try:
        path.unlink()
    except FileNotFoundError:  # another process removed it first
        pass
    warnings.warn(
        f"innergraph: removed the rewritten-graph cache entry {path} ({why}); the graph is rewritten again",
        RuntimeWarning,
        stacklevel=3,
    )


def write(key: str, payload: bytes) -> bool:
    """Store ``payload`` under ``key`` atomically; False when turned off, too large or the folder is not writable."""
    global _trimmed
    path = _path(key)
    if path is None or len(payload) > MAX_BYTES:
        return False
    if not _trimmed:
        _trimmed = True
        _trim_when_due(path.parent)
    data = MAGIC + hashlib.sha256(payload).digest() + payload
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{key[:16]}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError:
        return False
    return True


def _trim_when_due(where: Path) -> None:
    """Trim the store when its stamp is older than `TRIM_EVERY`, absent or as far in the future, setting the stamp first."""
    stamp = where / STAMP
    try:
        if abs(time.time() - stamp.stat().st_mtime) <= TRIM_EVERY:
            return  # trimmed within the hour (a stamp far in the future, another clock's, does not count)
    except FileNotFoundError:
        pass
    except OSError:  # a folder this process cannot read
        return
    try:
        stamp.touch()
    except OSError:  # nor write: trimming would fail too
        return
    trim()


def trim(now: float | None = None) -> int:
    """Remove unused, excess and stale files of the store (see "trim" above); the number of files removed.

    ``now``: the time to judge ages against (seconds since the epoch; the clock by default).
    """
    where = folder()
    if where is None:
        return 0
    now = time.time() if now is None else now
    entries: list[tuple[float, int, str]] = []
    removed = 0
    try:
        listing = list(os.scandir(where))
    except OSError:  # no folder yet, or not readable
        return 0
    for item in listing:
        temporary = _TEMPORARY.fullmatch(item.name)
        if not temporary and not _ENTRY.fullmatch(item.name):
            continue
        try:
            stat = item.stat()
        except OSError:  # removed meanwhile
            continue
        if temporary:
            if now - stat.st_mtime > STALE_TEMPORARY:
                removed += _remove(item.path)
        elif now - stat.st_mtime > config.cmodule__age_thresh_use:
            removed += _remove(item.path)
        else:
            entries.append((stat.st_mtime, stat.st_size, item.path))
    total = sum(size for _, size, _ in entries)
    if total > MAX_TOTAL:
        newest_first = sorted(entries, reverse=True)
        while total > MAX_TOTAL * 3 // 4:
            _, size, path = newest_first.pop()
            removed += _remove(path)
            total -= size
    return removed


def _remove(path: str) -> int:
    """1 when ``path`` was removed by this call, 0 when it was gone already or cannot be removed."""
    try:
        os.unlink(path)
    except OSError:
        return 0
    return 1
