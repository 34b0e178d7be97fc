"""innergraph is installed for every test; ``PYMC_MODELS`` narrows the NUTS comparisons.

``PYMC_MODELS`` (space-separated ids of `innergraph_bench.pymc_models.MODELS`), when set,
deselects the tests parametrized by a ``case_id`` outside it: `.ci/pymc` keeps CI's run in
budget with it, judging the light models on every run and one of the four whose Numba
compilation takes minutes per variant, in rotation (design/testing.md, "CI on 2 cores").
Unset or ``all``, every model runs.
"""

import os

import innergraph  # noqa: F401  (installs the patches for every test)


def pytest_collection_modifyitems(config, items):
    chosen = os.environ.get("PYMC_MODELS")
    if chosen is None or chosen == "all":
        return
    from innergraph_bench.pymc_models import MODELS

    wanted = set(chosen.split())
    unknown = wanted - set(MODELS)
    if unknown:
        raise ValueError(f"PYMC_MODELS names no model of innergraph_bench.pymc_models.MODELS: {sorted(unknown)}")
    keep, drop = [], []
    for item in items:
        case = getattr(item, "callspec", None) and item.callspec.params.get("case_id")
        (drop if case in MODELS and case not in wanted else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
