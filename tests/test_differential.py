"""innergraph never gives a different number than vanilla PyTensor, under any linker.

Random user programs (`innergraph.testing.programs`: ``pytensor.scan`` with every state
kind, ``ifelse``, ``OpFromGraph``, nested, around random recipe bodies) with their first,
second and third derivatives, compiled with innergraph's pipeline and as vanilla PyTensor
under the ``py``, ``cvm``, ``numba`` and ``jax`` linkers, on random inputs. Where vanilla
cannot compile or run a program under a linker, innergraph must fail too or give vanilla's
numbers under ``cvm``.

Profiles: ``ci`` (the default) runs a few programs per linker (Numba and JAX compile
slowly); ``--hypothesis-profile=thorough`` runs `THOROUGH` programs in all (>= 2,000).
With ``INNERGRAPH_DIFFERENTIAL_LOG=path`` every program's outcome is appended to ``path``
(one line each: linker, outcome, seconds, order, errors), to follow a long run.
"""

import os
import time

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from innergraph.testing.programs import LINKERS, check_against_vanilla, programs

#: Programs per linker under the ``ci`` profile and under ``thorough``.
CI = {"py": 6, "cvm": 6, "numba": 3, "jax": 4}
THOROUGH = {"py": 500, "cvm": 600, "numba": 400, "jax": 500}


def examples(linker):
    thorough = settings.default.max_examples > settings.get_profile("ci").max_examples
    return (THOROUGH if thorough else CI)[linker]


def log(line):
    path = os.environ.get("INNERGRAPH_DIFFERENTIAL_LOG")
    if path:
        with open(path, "a") as file:
            file.write(line + "\n")


@pytest.mark.parametrize("linker", LINKERS)
def test_innergraph_gives_vanilla_numbers(linker):
    @settings(max_examples=examples(linker))
    @given(programs(), st.integers(0, 2**16))
    def check(program, seed):
        start = time.perf_counter()
        try:
            outcomes = check_against_vanilla(program, [linker], seed=seed)
        except Exception as error:
            log(f"{linker}\tFAILED\t{time.perf_counter() - start:.1f}\t{program.order}\t{str(error)[:300]!r}")
            raise
        for outcome in outcomes:
            event(outcome.kind, f"{outcome.error} / {outcome.our_error}" if outcome.error else "")
            log(f"{linker}\t{outcome.kind}\t{time.perf_counter() - start:.1f}\t{program.order}\t"
                f"{outcome.error} / {outcome.our_error}")

    check()


def test_the_thorough_profile_runs_at_least_2000_programs():
    assert sum(THOROUGH.values()) >= 2000
