import numpy as np
import pytest

import innergraph  # noqa: F401  (installs the patches for every test)


@pytest.fixture
def rng():
    return np.random.default_rng(20261121)
