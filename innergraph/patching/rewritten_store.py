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
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import warnings
from pathlib import Path

from pytensor import config

__all__ = ["ENV", "MAGIC", "MAX_BYTES", "discard", "folder", "read", "write"]

#: The environment variable that moves the store (a folder) or turns it off (``off``).
ENV = "INNERGRAPH_REWRITTEN_CACHE"

#: The first bytes of every entry (the format's version is in the key, `rewritten_key.FORMAT`).
MAGIC = b"innergraph rewritten graph\n"

#: Entries larger than this are not written (a graph holding large constants: loading it would cost what it saves).
MAX_BYTES = 64 * 2**20

_DIGEST = 32


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
    return payload


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
    path = _path(key)
    if path is None or len(payload) > MAX_BYTES:
        return False
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
