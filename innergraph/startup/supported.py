"""The PyTensor versions innergraph supports, and the import-time check.

``import innergraph`` patches PyTensor's linker and rewrite database; on a
PyTensor outside `SUPPORTED` those patches would break working programs (on
2.38 every ``pytensor.scan`` failed in the patched ``Linker.schedule``). So
``innergraph/__init__.py`` imports this module first, and importing it runs
`check_pytensor`: an unsupported PyTensor gets one `ImportError` and an
untouched PyTensor. `SUPPORTED` is the one place the range is written; a test
checks that ``pyproject.toml`` pins the same range.

unreleased PyTensor
    A PyTensor installed from a source tree rather than a release: a checkout of ``main``
    reports ``0+unknown`` (``git archive``) or ``0+untagged.N.gHASH`` (a clone without tags),
    and a tagged clone ``3.3.0+10.gf857e69``: a version no release number names. It is
    refused like any version outside the range, unless ``INNERGRAPH_UNRELEASED_PYTENSOR=1``
    says the user wants to try it (the upstream series is built and tested against ``main``
    this way: ``design/upstream.md``). The opt-in covers only such versions on the 3.3 line
    or without a release number; a released version outside the range is always refused.
"""

from __future__ import annotations

import os
import re
import sys

__all__ = ["SUPPORTED", "UNRELEASED_OPT_IN", "check_pytensor", "parse_version", "unreleased"]

#: Supported PyTensor releases: lowest included, highest excluded (``>=3.3.6,<3.4``). 3.3.6 is the
#: oldest PyMC 6.4 accepts, and the first whose IfElse is lazy under Numba and JAX itself.
SUPPORTED: tuple[tuple[int, ...], tuple[int, ...]] = ((3, 3, 6), (3, 4))

#: The environment variable that lets an unreleased PyTensor (`unreleased`) through the check.
UNRELEASED_OPT_IN = "INNERGRAPH_UNRELEASED_PYTENSOR"


def parse_version(text: str) -> tuple[int, ...]:
    """The leading numeric release of a version string: ``"3.0.7+12.gabc"`` -> ``(3, 0, 7)``."""
    match = re.match(r"\d+(?:\.\d+)*", text.strip())
    return tuple(int(n) for n in match.group().split(".")) if match else ()


def unreleased(text: str) -> bool:
    """Whether ``text`` is a source tree's version: a local part (``+...``), a ``.dev`` release, or no release number."""
    return "+" in text or ".dev" in text or parse_version(text) in ((), (0,))


def _spelled(release: tuple[int, ...]) -> str:
    return ".".join(map(str, release))


def check_pytensor(found: str | None = None) -> None:
    """Raise `ImportError` unless the imported PyTensor (or version ``found``) is in `SUPPORTED`."""
    if found is None:
        import pytensor  # the module Python imports, whatever metadata lies elsewhere on the path

        found = pytensor.__version__
    low, high = SUPPORTED
    release = parse_version(found)
    if low <= release < high:
        return
    on_the_line = release in ((), (0,)) or low[:2] <= release < high
    if unreleased(found) and on_the_line and os.environ.get(UNRELEASED_OPT_IN) == "1":
        return
    hint = (
        f" It is an unreleased PyTensor (a source tree): set {UNRELEASED_OPT_IN}=1 to try innergraph on it, unsupported."
        if unreleased(found) and on_the_line else ""
    )
    raise ImportError(
        f"innergraph supports PyTensor >={_spelled(low)},<{_spelled(high)}; "
        f"found PyTensor {found}. innergraph was not installed and PyTensor is unchanged.{hint}"
    )


try:
    check_pytensor()
except ImportError:
    # Python drops this module and the half-run ``innergraph`` package; drop the
    # ``innergraph.startup`` package too, so a refused import leaves nothing behind.
    sys.modules.pop(__name__.rpartition(".")[0], None)
    raise
