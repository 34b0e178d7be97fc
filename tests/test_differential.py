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

from innergraph.testing.programs import LINKERS, Leaf, Loop, Program, State, check_against_vanilla, programs
from innergraph.testing.recipes import Param, Recipe, Step

#: Programs per linker under the ``ci`` profile and under ``thorough``.
CI = {"py": 4, "cvm": 4, "numba": 4, "jax": 8}
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
            log(f"{linker}\tFAILED\t{time.perf_counter() - start:.1f}\t{program.order}\t{str(error)!r}\t{program!r}")
            raise
        for outcome in outcomes:
            event(outcome.kind, f"{outcome.error} / {outcome.our_error}" if outcome.error else "")
            log(f"{linker}\t{outcome.kind}\t{time.perf_counter() - start:.1f}\t{program.order}\t"
                f"{outcome.error} / {outcome.our_error}")

    check()


# y <- y/2 + tanh(sin(y * a) + y)/2 for 4 steps from y0 = a; the second derivative of the
# result takes PyTensor's Scan gradient of a Scan gradient: a mit-mot whose in taps include
# a negative one. Under JAX this gave another number than vanilla (the reason for this file).
SCALAR = Param("float64", (), ())
SIN_LOOP = Program(
    inputs=(((), ()),),
    expr=Loop(
        sequences=(),
        states=(State(init=0, taps=(-1,)),),
        non_sequences=((0, True),),
        bodies=(Leaf(Recipe((SCALAR, SCALAR), (Step("mul", (0, 1)), Step("exp", (2,)), Step("add", (3, 0))), (4,),
                            (((), ()),) * 5), (0, 1)),),
        n_steps=4, explicit_n_steps=True, stop=None, threshold=0.0, summed=(False,), result=0, last=True,
        all_live=False,
    ),
    order=2,
)


@pytest.mark.parametrize("linker", LINKERS)
def test_the_second_derivative_of_a_loop(linker):
    (outcome,) = check_against_vanilla(SIN_LOOP, [linker], seed=3)
    assert outcome.kind == "equal"


def test_the_thorough_profile_runs_at_least_2000_programs():
    assert sum(THOROUGH.values()) >= 2000
