"""PyTensor's source distribution the series is built on (`PYTENSOR_VERSION`), downloaded once with pip and cached.

The cache is ``$INNERGRAPH_CACHE`` or ``~/.cache/innergraph-patches``; ``--sdist`` (or
``$INNERGRAPH_SDIST``) names a file to use instead.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from pathlib import Path

__all__ = ["PYTENSOR_VERSION", "extract", "sdist_path"]

#: The one constant of the series' base: the sdist ``pytensor-<version>.tar.gz`` and its tree ``pytensor-<version>/``.
PYTENSOR_VERSION = "3.3.8"
_NAME = f"pytensor-{PYTENSOR_VERSION}.tar.gz"


def _cache() -> Path:
    return Path(os.environ.get("INNERGRAPH_CACHE", Path.home() / ".cache" / "innergraph-patches"))


def sdist_path(given: Path | None = None) -> Path:
    """The sdist to build on: ``given``, ``$INNERGRAPH_SDIST``, or the cached download (made now if missing)."""
    if given is None and os.environ.get("INNERGRAPH_SDIST"):
        given = Path(os.environ["INNERGRAPH_SDIST"])
    if given is not None:
        if not given.is_file():
            raise FileNotFoundError(f"PyTensor sdist {given} does not exist")
        return given
    cached = _cache() / _NAME
    if not cached.is_file():
        cached.parent.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", "pytensor"]
        subprocess.run([*command, f"pytensor=={PYTENSOR_VERSION}", "-d", str(cached.parent)], check=True)
    return cached


def extract(sdist: Path, into: Path) -> Path:
    """Extract ``sdist`` into ``into``; return the source tree (``into/pytensor-<PYTENSOR_VERSION>``)."""
    with tarfile.open(sdist) as archive:
        archive.extractall(into, filter="data")
    tree = into / f"pytensor-{PYTENSOR_VERSION}"
    if not (tree / "pytensor" / "__init__.py").is_file():
        raise RuntimeError(f"{sdist} is not PyTensor {PYTENSOR_VERSION}'s sdist (no {tree}/pytensor)")
    return tree
