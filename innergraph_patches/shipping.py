"""How a library module reads once shipped in PyTensor: its imports made ``pytensor.innergraph``'s.

`rewrite_imports` turns the text of a module of ``innergraph/`` into that of
``pytensor/innergraph/<path>``, the form every patch of the series and every step of
the upstream path ships it in; `REPOSITORY` is the checkout both read from.
"""

from __future__ import annotations

import re
from pathlib import Path

__all__ = ["REPOSITORY", "library_source", "rewrite_imports"]

REPOSITORY = Path(__file__).resolve().parents[1]


def library_source(module: str) -> Path:
    """The file of library module ``module`` (a path under ``innergraph/``, or ``innergraph_pickle/__init__.py``)."""
    return REPOSITORY / module if module.startswith("innergraph_pickle/") else REPOSITORY / "innergraph" / module

_LIBRARY_ONLY_LINE = re.compile(r"#.*\blibrary only\b")  # a line the series leaves out (see innergraph/__init__.py)


def _module_name_in_string(match: re.Match[str]) -> str:
    """``"innergraph.backends.numba"`` -> ``"pytensor.innergraph.backends.numba"``: only names of modules (not ``reason="innergraph.lift"``)."""
    quote, rest = match.group(1), match.group(2)
    path = REPOSITORY / "innergraph" / Path(*rest.lstrip(".").split("."))
    if path.with_suffix(".py").is_file() or (path / "__init__.py").is_file():
        return f"{quote}pytensor.innergraph{rest}{quote}"
    return match.group(0)


def rewrite_imports(source: str, path: str) -> str:
    """A library module's text as ``pytensor/innergraph/<path>``: every import of innergraph made PyTensor's."""
    source = re.sub(r"^(\s*)import innergraph_pickle\b", r"\1from pytensor.innergraph import _pickle as innergraph_pickle", source, flags=re.M)
    source = re.sub(r"^(\s*)from innergraph(?=[\s.])", r"\1from pytensor.innergraph", source, flags=re.M)
    source = re.sub(r"^(\s*)import innergraph(?=[\s.])", r"\1import pytensor.innergraph", source, flags=re.M)
    source = re.sub(r"([\"'])innergraph((?:\.\w+)+)\1", _module_name_in_string, source)  # importlib.import_module("innergraph.x")
    source = "".join(line for line in source.splitlines(keepends=True) if not _LIBRARY_ONLY_LINE.search(line))
    source = source.rstrip("\n") + "\n" if source.strip() else ""  # git apply warns of blank lines at the end of a new file
    if path == "innergraph_pickle/__init__.py":
        source = source.replace('PACKAGE = "innergraph"', 'PACKAGE = "pytensor.innergraph"')
    return source
