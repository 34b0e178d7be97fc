"""A stand-in for PyTensor's sdist, for the tests of the series' tools (no download)."""

import io
import tarfile
from pathlib import Path

from innergraph_patches.sdist import PYTENSOR_VERSION


def stand_in_sdist(folder: Path, files: dict[str, str]) -> Path:
    """An sdist archive in ``folder`` holding ``files`` (path in the tree -> text)."""
    path = folder / f"pytensor-{PYTENSOR_VERSION}.tar.gz"
    with tarfile.open(path, "w:gz") as archive:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"pytensor-{PYTENSOR_VERSION}/{name}")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return path
