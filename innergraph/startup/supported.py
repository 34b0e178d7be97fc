"""The PyTensor versions innergraph supports, and the import-time check.

``import innergraph`` patches PyTensor's linker and rewrite database; on a
PyTensor outside `SUPPORTED` those patches would break working programs (on
2.38 every ``pytensor.scan`` failed in the patched ``Linker.schedule``). So
``innergraph/__init__.py`` imports this module first, and importing it runs
`check_pytensor`: an unsupported PyTensor gets one `ImportError` and an
untouched PyTensor. `SUPPORTED` is the one place the range is written; a test
checks that ``pyproject.toml`` pins the same range.
"""

from __future__ import annotations

import re
import sys

__all__ = ["SUPPORTED", "check_pytensor", "parse_version"]

#: Supported PyTensor releases: lowest included, highest excluded (``>=3.3.6,<3.4``). 3.3.6 is the
#: oldest PyMC 6.4 accepts, and the first whose IfElse is lazy under Numba and JAX itself.
SUPPORTED: tuple[tuple[int, ...], tuple[int, ...]] = ((3, 3, 6), (3, 4))


def parse_version(text: str) -> tuple[int, ...]:
    """The leading numeric release of a version string: ``"3.0.7+12.gabc"`` -> ``(3, 0, 7)``."""
    match = re.match(r"\d+(?:\.\d+)*", text.strip())
    return tuple(int(n) for n in match.group().split(".")) if match else ()


def _spelled(release: tuple[int, ...]) -> str:
    return ".".join(map(str, release))


def check_pytensor(found: str | None = None) -> None:
    """Raise `ImportError` unless the imported PyTensor (or version ``found``) is in `SUPPORTED`."""
    if found is None:
        import pytensor  # the module Python imports, whatever metadata lies elsewhere on the path

        found = pytensor.__version__
    low, high = SUPPORTED
    if not low <= parse_version(found) < high:
        raise ImportError(
            f"innergraph supports PyTensor >={_spelled(low)},<{_spelled(high)}; "
            f"found PyTensor {found}. innergraph was not installed and PyTensor is unchanged."
        )


try:
    check_pytensor()
except ImportError:
    # Python drops this module and the half-run ``innergraph`` package; drop the
    # ``innergraph.startup`` package too, so a refused import leaves nothing behind.
    sys.modules.pop(__name__.rpartition(".")[0], None)
    raise
