"""Examples per hypothesis profile for the property tests whose examples compile (``tests/conftest.py``).

Such a test runs fewer examples than the profile's ``max_examples`` under ``ci`` (CI's time
budget); under another profile it follows the profile: ``thorough`` raises it, ``repeat``
lowers it.
"""

from hypothesis import settings


def examples(ci: int) -> int:
    """``ci`` under the ``ci`` profile; the loaded profile's count under ``thorough``; at most it under ``repeat``."""
    loaded = settings().max_examples  # the loaded profile's
    ci_profile = settings.get_profile("ci").max_examples
    if loaded == ci_profile:
        return ci
    return loaded if loaded > ci_profile else min(ci, loaded)
