"""innergraph never gives a different number than vanilla PyTensor, under any linker.

Random user programs (`innergraph.testing.programs`: ``pytensor.scan`` with every state
kind, ``ifelse``, ``OpFromGraph``, nested, around random recipe bodies) with their first,
second and third derivatives, compiled with innergraph's pipeline and as vanilla PyTensor
(built, compiled and first called with innergraph uninstalled) under the ``py``, ``cvm``,
``numba`` and ``jax`` linkers, on random inputs.

**Each run draws other programs.** The run's seed comes from ``INNERGRAPH_DIFF_SEED`` or,
unset, from the clock; pytest prints it in its header (``innergraph differential seed:
...``). Under each linker the run draws `count` programs (40 under the ``ci`` profile,
`THOROUGH` under ``--hypothesis-profile=thorough``, 14 under ``repeat``;
``INNERGRAPH_DIFF_PROGRAMS`` to choose), stratified (`plan`): every run covers, under every linker, each of
`FEATURES` (sit-sot, mit-sot, nit-sot, untraced and shared states, multi-tap
sequences, ``until``, ``ifelse``, ``OpFromGraph``, nesting) and derivatives of order 1,
2 and 3. Program ``i`` under a linker has its own seed (`program_seed`), so the programs
differ between linkers and between runs: each run checks another slice.

**Replaying.** ``INNERGRAPH_DIFF_SEED=<seed> pytest
'tests/test_differential.py::test_innergraph_gives_vanilla_numbers[<linker>]'`` runs the same
programs again (``-k <linker>`` would match every test: the file name holds ``py``). A
failure message also gives each failing program's own seed, wanted feature and order (a
``compare_with_vanilla(random_program(...))`` expression that replays it alone) and its
``Program(...)``, to paste into `FOUND`: a fixed regression case, run whatever the seed.

**What fails the test.** Other numbers than vanilla's, or innergraph failing where
vanilla runs; vanilla failing where innergraph runs, unless the difference is one of
`EXPECTED_DIFFERENCES` (each named, with its reason); more programs failing in both than
`BOTH_FAILED_BOUND` allows, outside the classes `BOTH_FAILED_CLASSES` names (they are counted and listed in the run's summary, printed at
the end of the session).

With ``INNERGRAPH_DIFFERENTIAL_LOG=path`` every program's outcome is appended to ``path``
(one line each: linker, outcome, seconds, order, errors), to follow a long run.
"""

from __future__ import annotations

import dataclasses
import os
import random
import time
from collections import Counter
from dataclasses import dataclass

import pytensor
import pytest
from hypothesis import settings

from innergraph.testing.programs import (
    FEATURES,
    LINKERS,
    LOOP_FEATURES,
    SMALL,
    Cond,
    Graph,
    Group,
    Leaf,
    Loop,
    Outcome,
    Program,
    State,
    check_against_vanilla,
    compare_with_vanilla,
    features,
    random_program,
)
from innergraph.testing.recipes import Param, Recipe, Step

#: Programs per linker: the ``ci`` profile (the default), ``thorough``, and profiles with fewer
#: examples than ``ci`` (``repeat``: CI's second run of the same code, on a patched PyTensor),
#: which still cover every stratum.
CI = 40
THOROUGH = {"py": 500, "cvm": 600, "numba": 400, "jax": 500}
FEWER = 15  # the fewest that leave every linker as many programs with loops as there are FEATURES

#: The orders of derivation of a run's programs under each linker, in proportion (shuffled by
#: the run's seed): every order at least once; third derivatives cost most, so they are few,
#: and Numba, which compiles slowest, gets more programs of order 0 and 1.
ORDERS = {
    "py": {0: 6, 1: 19, 2: 11, 3: 4},
    "cvm": {0: 6, 1: 20, 2: 10, 3: 4},
    "numba": {0: 10, 1: 22, 2: 5, 3: 3},
    "jax": {0: 6, 1: 19, 2: 11, 3: 4},
}

#: The highest order a program with a loop is differentiated to under each linker, outside
#: the thorough profile: compilation dominates, and a loop's derivatives compile slowly (the
#: simplest sit-sot's second derivative takes Numba about 15 s, its third about 40 s, C
#: about a third of that). Higher orders go to loop-free programs (`NO_LOOPS`: ifelse,
#: OpFromGraph, both nested); `test_the_second_derivative_of_a_loop` keeps one under every linker.
LOOP_ORDER = {"py": 3, "cvm": 2, "numba": 1, "jax": 3}

#: The features a program without loops can have.
NO_LOOPS = ("ifelse", "opfromgraph", "nesting")

#: The features each linker's programs must cover in every run (`features`).
REQUIRED = frozenset(FEATURES) | {"order 1", "order 2", "order 3"}


@dataclass(frozen=True)
class Difference:
    """A program vanilla cannot compile or run under ``linker`` while innergraph can, on purpose."""

    linker: str
    feature: str | None  # the program has it (None: any program)
    error: str  # how vanilla's error starts: its class and message (`Outcome.error`)
    reason: str

    def matches(self, outcome: Outcome, program: Program) -> bool:
        return (outcome.linker == self.linker and (self.feature is None or self.feature in features(program))
                and outcome.error.startswith(self.error))


#: Every expected difference between innergraph and vanilla, in one place. innergraph's numbers
#: are then compared with vanilla's under the py linker (`REFERENCES`).
EXPECTED_DIFFERENCES = {
    "jax-while-loop": Difference(
        "jax", "until", "NotImplementedError('While Scan cannot yet be converted to JAX",
        "PyTensor's JAX linker refuses a scan with an until condition; innergraph runs it as a "
        "lax.while_loop (README, innergraph/backends/jax_loop.py)",
    ),
    "jax-eager-fallback": Difference(
        "jax", None, "TypeError('Shapes must be 1D sequences of concrete values",
        "a Scan whose number of steps is symbolic (or a while loop) writes buffers whose shapes "
        "jax.jit cannot trace, and PyTensor's JAX linker fails; innergraph's runs such a function "
        "eagerly, with concrete shapes (innergraph/backends/jax.py, jit_compile)",
    ),
    "jax-eager-fallback-concrete": Difference(
        "jax", None, "ConcretizationTypeError('Abstract tracer value encountered where concrete value is expected",
        "the same where a traced value must be concrete (a loop's length; found by CI's run of 2026-11-27, seed "
        "278013772, a mit-sot): innergraph runs the function eagerly",
    ),
    "jax-eager-fallback-index": Difference(
        "jax", None, "IndexError('Array slice indices must have static start/stop/step",
        "the same where the traced shape reaches a slice (found by the 500-program thorough run on "
        "PyTensor 3.3.8: a mit-sot's second derivative); innergraph runs the function eagerly",
    ),
    "py-more-than-32-operands": Difference(
        "py", "group", "NotImplementedError('Elemwise.perform (Python mode) does not support more than 32 operands",
        "vanilla fuses the work around K loops over one step into an Elemwise of more than 32 inputs, which "
        "the py linker's perform refuses; innergraph batches the K loops into one (batch_loops), and its "
        "fused nodes read fewer (found by a clock-seeded run on 2026-11-28, seed 234379267, a group of loops "
        "at order 3)",
    ),
    "py-scan-inner-storage-none": Difference(
        "py", "multi-tap sequence", "ValueError('expected an ndarray, not None'",
        "vanilla's FAST_RUN rewrites of the second derivative of a loop over a sequence read at taps (-2, 0) "
        "leave a Scan whose inner function reads a value nothing wrote (its inner VM's C thunk gets None; "
        "scan_push_out_non_seq logs a failed rewrite on the way), and the same graph fails under cvm, so "
        "innergraph's numbers go unchecked; vanilla under FAST_COMPILE runs it (found by a clock-seeded "
        "run on 2026-11-30, seed 832639319, also failing on the library before that day's changes)",
    ),
    "py-scan-inner-storage-none-state": Difference(
        "py", "sit-sot", "ValueError('expected an ndarray, not None'",
        "the same failure of vanilla's, under py and cvm alike, on the second derivative of a loop over one "
        "state with per-step outputs and no sequence (found by the patched form's clock-seeded run on "
        "2026-12-02, seed 818157234, program seed 120682875693958; failing on the library at that day's "
        "first commit too): innergraph's numbers go unchecked",
    ),
}

#: Where vanilla's numbers come from when vanilla fails under the linker tested (py compiles
#: no C: the cheapest).
REFERENCES = ("py", "cvm")

#: How many of a run's programs may fail both with and without innergraph, per linker (as a
#: fraction of the programs), outside `BOTH_FAILED_CLASSES`. More means the generator drifted or
#: a backend regressed.
BOTH_FAILED_BOUND = {"py": 0.05, "cvm": 0.05, "numba": 0.05, "jax": 0.05}

#: Failures with and without innergraph that are vanilla's own limits, by linker and the start
#: of vanilla's error (`Outcome.error`): not counted against `BOTH_FAILED_BOUND`, however many.
#: Under JAX these are the classes of the thorough runs (design/testing.md): jax.jit needs
#: concrete shapes, and Scan gradients (and symbolic n_steps) make shapes that depend on traced
#: values; innergraph fails too where its eager fallback meets the same limit.
BOTH_FAILED_CLASSES = {
    "jax": {
        "traced-shape": "TypeError('Shapes must be 1D sequences of concrete values",
        "traced-value": "ConcretizationTypeError(",
        "traced-slice": "IndexError('Array slice indices must have static",
        "while-loop": "NotImplementedError('While Scan cannot yet be converted to JAX",
    },
}


def thorough() -> bool:
    return settings().max_examples > settings.get_profile("ci").max_examples


def count(linker: str) -> int:
    """Programs per linker in this run (``INNERGRAPH_DIFF_PROGRAMS`` overrides the profile's)."""
    if os.environ.get("INNERGRAPH_DIFF_PROGRAMS"):
        return int(os.environ["INNERGRAPH_DIFF_PROGRAMS"])
    if thorough():
        return THOROUGH[linker]
    return CI if settings().max_examples == settings.get_profile("ci").max_examples else FEWER


def program_seed(run_seed: int, linker: str, index: int) -> int:
    """The seed of program ``index`` under ``linker`` in the run of ``run_seed``."""
    return random.Random(f"{run_seed}/{linker}/{index}").getrandbits(48)


@dataclass(frozen=True)
class Planned:
    index: int
    seed: int
    want: str
    order: int
    loops: bool

    @property
    def depth(self) -> int:
        # one level of nesting where the feature may sit inside another construct, else a flat
        # program (a loop in a loop, differentiated three times, takes minutes to compile)
        return 2 if self.want in NO_LOOPS else 1

    def program(self) -> Program:
        sizes = dataclasses.replace(SMALL, loops=self.loops)
        return random_program(self.seed, [self.want], order=self.order, depth=self.depth, sizes=sizes)

    def replay(self, linker: str) -> str:
        return (f"compare_with_vanilla(random_program({self.seed}, [{self.want!r}], order={self.order}, "
                f"depth={self.depth}, sizes=dataclasses.replace(SMALL, loops={self.loops})), {linker!r}, "
                f"seed={self.seed}, references={REFERENCES})")


def plan(run_seed: int, linker: str, n: int, loop_order: int | None = None) -> list[Planned]:
    """The run's ``n`` programs under ``linker``, stratified.

    Each gets an order from `ORDERS` (shuffled by the seed; every order once at least) and
    wants one of `FEATURES` in turn, from an offset the seed chooses; a program whose order
    is above ``loop_order`` (`LOOP_ORDER`) has no loop and wants one of `NO_LOOPS`.
    """
    loop_order = LOOP_ORDER[linker] if loop_order is None else loop_order
    rng = random.Random(f"{run_seed}/{linker}")
    shares = ORDERS[linker]
    total = sum(shares.values())
    orders = [order for order, share in shares.items() for _ in range(max(1, round(share * n / total)))]
    rng.shuffle(orders)
    orders = (orders * (n // len(orders) + 1))[:n]
    for order in (1, 2, 3):  # a small n still has each order
        if order not in orders:
            orders[order % n] = order
    with_loops = [i for i in range(n) if orders[i] <= loop_order]
    if len(with_loops) < len(FEATURES):
        raise ValueError(f"plan: {n} programs leave {len(with_loops)} for loops, fewer than the {len(FEATURES)} features")
    offset, other = rng.randrange(len(FEATURES)), rng.randrange(len(NO_LOOPS))
    wants = {i: FEATURES[(offset + k) % len(FEATURES)] for k, i in enumerate(with_loops)}
    wants |= {i: NO_LOOPS[(other + k) % len(NO_LOOPS)] for k, i in enumerate(sorted(set(range(n)) - set(with_loops)))}
    return [Planned(i, program_seed(run_seed, linker, i), wants[i], orders[i], orders[i] <= loop_order)
            for i in range(n)]


def log(line: str) -> None:
    path = os.environ.get("INNERGRAPH_DIFFERENTIAL_LOG")
    if path:
        with open(path, "a") as file:
            file.write(line + "\n")


@pytest.mark.parametrize("linker", LINKERS)
def test_innergraph_gives_vanilla_numbers(linker, differential_seed, differential_report):
    start = time.perf_counter()
    planned = plan(differential_seed, linker, count(linker), 3 if thorough() else None)
    covered: set[str] = set()
    kinds: Counter[str] = Counter()
    problems: list[str] = []
    both_failed: list[str] = []
    expected: list[str] = []
    for entry in planned:
        program = entry.program()
        covered |= features(program)
        began = time.perf_counter()
        with pytensor.config.change_flags(traceback__limit=0):  # no stack kept per variable: faster
            outcome = compare_with_vanilla(program, linker, seed=entry.seed, references=REFERENCES)
        kinds[outcome.kind] += 1
        log(f"{linker}\t{outcome.kind}\t{time.perf_counter() - began:.1f}\t{program.order}\t"
            f"{outcome.error} / {outcome.our_error}\t{entry.replay(linker)}")
        described = f"{entry.replay(linker)}: {outcome.kind} {outcome.error} {outcome.our_error}\n    {program!r}"
        if outcome.failed:
            problems.append(described)
        elif outcome.kind == "both_failed":
            named = [n for n, start in BOTH_FAILED_CLASSES.get(linker, {}).items() if outcome.error.startswith(start)]
            (expected if named else both_failed).append(f"{outcome.error} / {outcome.our_error}" if not named
                                                        else f"[both failed: {named[0]}] {described}")
        elif outcome.kind in ("vanilla_failed", "unchecked"):
            known = [name for name, d in EXPECTED_DIFFERENCES.items() if d.matches(outcome, program)]
            (expected if known else problems).append(f"[{', '.join(known) or 'not expected'}] {described}")
    seconds = time.perf_counter() - start
    differential_report(
        f"{linker}: {len(planned)} programs in {seconds:.0f} s (seed {differential_seed}): "
        + ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items()))
        + "".join(f"\n  both failed: {n} x {error}" for error, n in Counter(both_failed).most_common())
        + "".join(f"\n  expected difference: {line.splitlines()[0]}" for line in expected)
    )
    replay = (f"replay: INNERGRAPH_DIFF_SEED={differential_seed} pytest "
              f"'tests/test_differential.py::test_innergraph_gives_vanilla_numbers[{linker}]'")
    assert not problems, f"{len(problems)} of {len(planned)} programs differ from vanilla ({replay}):\n" + "\n".join(problems)
    assert REQUIRED <= covered, f"the run's programs miss {sorted(REQUIRED - covered)} (a generator defect)"
    bound = BOTH_FAILED_BOUND[linker] * len(planned)
    assert len(both_failed) <= bound, (
        f"{len(both_failed)} of {len(planned)} programs failed with and without innergraph (at most {bound:.0f}; "
        f"{replay}): {Counter(both_failed).most_common()}"
    )


def test_every_stratum_gets_its_feature():
    """`plan` and `random_program` give every run its strata (no compilation: the generator alone)."""
    for run_seed in range(3):
        for linker in LINKERS:
            planned = plan(run_seed, linker, CI if run_seed else FEWER)
            assert {order for p in planned for order in [p.order]} >= {1, 2, 3}
            covered: set[str] = set()
            for entry in planned:
                got = features(entry.program())
                assert entry.want in got, entry
                assert f"order {entry.order}" in got
                assert entry.loops == (entry.order <= LOOP_ORDER[linker])
                assert entry.loops or not got & set(LOOP_FEATURES), entry
                covered |= got
            assert covered >= REQUIRED


def test_runs_draw_other_programs():
    first, second = plan(1, "numba", CI), plan(2, "numba", CI)
    assert [p.program() for p in first] != [p.program() for p in second]
    assert [p.program() for p in first] == [p.program() for p in plan(1, "numba", CI)]  # a seed replays


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


#: Programs the random runs found (each failed under innergraph where vanilla compiled):
#: an OpFromGraph around a Scan with a repeated argument (closure broken by dead-slot removal);
#: an ifelse in a lifted OpFromGraph (closure broken by the IfElse lift); nit-sots through an
#: ifelse (an assertion in the per-step push-out). ``design/testing.md``. A failing program of
#: a run goes here, as ``name: (linker, Program(...))`` (the failure message prints both).
FOUND = {
    "ofg-around-scan": ("cvm", Program(inputs=(((3,), (3,)), ((), ())), expr=Graph(args=(1, 0, 0), body=Loop(sequences=((1, (-1, 0)), (1, (-2, 0))), states=(State(init=0, taps=(-1,)),), non_sequences=((2, False), (1, False)), bodies=(Leaf(recipe=Recipe(params=(Param(dtype='float64', static=(3,), actual=(3,)), Param(dtype='float64', static=(3,), actual=(3,)), Param(dtype='float64', static=(), actual=())), steps=(Step(op='mul', args=(1, 1), value=0.0, nested=None, identity=None), Step(op='index0', args=(1,), value=0.0, nested=None, identity=None), Step(op='neg', args=(4,), value=0.0, nested=None, identity=None), Step(op='add', args=(3, 1), value=0.0, nested=None, identity=None)), outputs=(6,), shapes=(((3,), (3,)), ((3,), (3,)), ((), ()), ((3,), (3,)), ((), ()), ((), ()), ((3,), (3,)))), args=(5, 6, 0)), Leaf(recipe=Recipe(params=(Param(dtype='float64', static=(), actual=()), Param(dtype='float64', static=(), actual=()), Param(dtype='float64', static=(), actual=())), steps=(Step(op='sub', args=(2, 0), value=0.0, nested=None, identity=None),), outputs=(3,), shapes=(((), ()), ((), ()), ((), ()), ((), ()))), args=(2, 4, 3))), n_steps=1, explicit_n_steps=False, stop=None, threshold=2.0, summed=(True,), result=0, last=False, all_live=False)), order=3)),
    "ifelse-in-lifted-ofg": ("py", Program(inputs=(((), ()), ((), ())), expr=Graph(args=(0, 0, 1), body=Cond(cond=0, then=Leaf(recipe=Recipe(params=(Param(dtype='float64', static=(), actual=()),), steps=(Step(op='exp', args=(0,), value=0.0, nested=None, identity=None),), outputs=(1,), shapes=(((), ()), ((), ()))), args=(0,)), other=Leaf(recipe=Recipe(params=(Param(dtype='float64', static=(), actual=()),), steps=(Step(op='neg', args=(0,), value=0.0, nested=None, identity=None),), outputs=(1,), shapes=(((), ()), ((), ()))), args=(2,)), summed=False)), order=1)),
    # the 500-program thorough run on PyTensor 3.3.8: the loop in the conditional simplified away, its gradient's
    # IncSubtensor stop was a traced shape under jax.jit, where vanilla's graph has none (now: eager fallback)
    "jax-slice-after-simplified-loop": ("jax", Program(inputs=(((3,), (3,)), ((None, 3), (4, 3)), ((2, 3), (2, 3))), expr=Cond(cond=0, then=Loop(sequences=((1, (0,)),), states=(), non_sequences=(), bodies=(Leaf(recipe=Recipe(params=(Param(dtype='float64', static=(3,), actual=(3,)),), steps=(Step(op='sub', args=(0, 0), value=0.0, nested=None, identity=None),), outputs=(1,), shapes=(((3,), (3,)), ((3,), (3,)))), args=(0,)),), n_steps=1, explicit_n_steps=False, stop=None, threshold=0.5, summed=(), result=0, last=True, all_live=True), other=Leaf(recipe=Recipe(params=(Param(dtype='float64', static=(2, 3), actual=(2, 3)), Param(dtype='float64', static=(2, 3), actual=(2, 3)), Param(dtype='float64', static=(3,), actual=(3,))), steps=(Step(op='exp', args=(2,), value=0.0, nested=None, identity=None),), outputs=(3,), shapes=(((2, 3), (2, 3)), ((2, 3), (2, 3)), ((3,), (3,)), ((3,), (3,)))), args=(2, 2, 0)), summed=False), order=1)),
    # issue 47's generator, seed 327891608: two calls of one body, Call(body, x, ones) and Call(body, ones, ones),
    # shared one Numba conversion, which read its first argument twice (the derivative was 2 x x, not 2 x)
    "numba-calls-wired-otherwise": ("numba", Program(inputs=(((None,), (3,)),), expr=Graph(args=(0, 0, 0), body=Leaf(recipe=Recipe(params=(Param(dtype='float64', static=(None,), actual=(3,)),), steps=(Step(op='sqr', args=(0,), value=0.0, nested=None, identity=None, dtype='float64'),), outputs=(1,), shapes=(((None,), (3,)), ((None,), (3,)))), args=(0,))), order=2)),
    # issue 47's generator, seed 12345: four loops over a matrix's columns with symbolic rows; the pickling check's
    # loaded function lost JAX's eager fallback (the lifted mark did not pickle) and raised where vanilla ran
    "jax-group-of-loops": ("jax", Program(inputs=(((3,), (3,)), ((), ()), ((None,), (3,)), ((None, 4), (6, 4))), expr=Group(matrix=3, columns=(1, 3, 2, 0), taps=((-3, -1), (-2, -1), (-3, -1), (-3, -1)), n_steps=(3, 3, 3, 3), step=Recipe(params=(Param(dtype='float64', static=(), actual=()), Param(dtype='float64', static=(), actual=()), Param(dtype='float64', static=(), actual=()), Param(dtype='float64', static=(), actual=())), steps=(Step(op='exp', args=(3,), value=0.0, nested=None, identity=None, dtype='float64'), Step(op='tanh', args=(3,), value=0.0, nested=None, identity=None, dtype='float64')), outputs=(5,), shapes=(((), ()), ((), ()), ((), ()), ((), ()), ((), ()), ((), ()))), last=True), order=0)),
    "nit-sots-through-ifelse": ("cvm", Program(inputs=(((), ()), ((3,), (3,))), expr=Loop(sequences=(), states=(), non_sequences=((1, True),), bodies=(Cond(cond=0, then=Leaf(recipe=Recipe(params=(Param(dtype='float64', static=(3,), actual=(3,)),), steps=(Step(op='sum0', args=(0,), value=0.0, nested=None, identity=None), Step(op='index0', args=(0,), value=0.0, nested=None, identity=None), Step(op='mul', args=(2, 1), value=0.0, nested=None, identity=None), Step(op='index0', args=(0,), value=0.0, nested=None, identity=None)), outputs=(4,), shapes=(((3,), (3,)), ((), ()), ((), ()), ((), ()), ((), ()))), args=(0,)), other=Leaf(recipe=Recipe(params=(Param(dtype='float64', static=(3,), actual=(3,)),), steps=(Step(op='neg', args=(0,), value=0.0, nested=None, identity=None),), outputs=(1,), shapes=(((3,), (3,)), ((3,), (3,)))), args=(0,)), summed=True), Leaf(recipe=Recipe(params=(Param(dtype='float64', static=(3,), actual=(3,)),), steps=(Step(op='sum0', args=(0,), value=0.0, nested=None, identity=None), Step(op='index0', args=(0,), value=0.0, nested=None, identity=None), Step(op='mul', args=(2, 1), value=0.0, nested=None, identity=None), Step(op='index0', args=(0,), value=0.0, nested=None, identity=None)), outputs=(4,), shapes=(((3,), (3,)), ((), ()), ((), ()), ((), ()), ((), ()))), args=(0,))), n_steps=3, explicit_n_steps=True, stop=None, threshold=0.5, summed=(), result=1, last=True, all_live=True), order=1)),
}


@pytest.mark.parametrize("name", list(FOUND))
def test_the_programs_the_random_runs_found(name):
    linker, program = FOUND[name]
    (outcome,) = check_against_vanilla(program, [linker])
    assert outcome.kind == "equal", outcome
