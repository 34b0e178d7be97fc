import numpy as np
import pytest
from hypothesis import HealthCheck, settings

import innergraph  # noqa: F401  (installs the patches for every test)

# Property-based tests: deterministic in CI; `--hypothesis-profile=thorough` runs thousands.
_common = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
settings.register_profile("ci", max_examples=200, derandomize=True, print_blob=True, **_common)
settings.register_profile("thorough", max_examples=3000, **_common)
settings.load_profile("ci")


@pytest.fixture
def rng():
    return np.random.default_rng(20261121)
