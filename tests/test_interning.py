"""Final bodies interned across compilations (`innergraph.core.interning`).

Two separately built, equal graphs compiled one after the other share their folded
bodies (the same `Body` object) and the second compilation prepares, converts and
fuses nothing; bodies that differ in a constant, a dtype or a static shape are not
shared; each linker gets its own code from a shared body; the table stays bounded.
Values are compared with vanilla PyTensor (`pytensor.ifelse.ifelse` built, compiled and
first called with innergraph uninstalled) and with NumPy. Compiled functions are shared
within the module (Numba compiles slowly).
"""

from typing import Any

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.compile.mode import Mode
from pytensor.ifelse import ifelse as vanilla_ifelse

import innergraph
import innergraph.backends.numba as numba_backend
import innergraph.rewriting.fusion as fusion
from innergraph.core.interning import body_table_size, interned_bodies
from innergraph.protocol import runtime
from innergraph.core.types import Body
from vanilla import vanilla_function

NUMBA = Mode(linker="numba", optimizer="fast_run")
CVM = Mode(linker="cvm", optimizer="fast_run")
PY = Mode(linker="py", optimizer="fast_run")
INPUTS = (np.linspace(-1.0, 2.0, 7), 0.7)


def model(cond_fn, scale=2.0, dtype="float64", length=None) -> tuple[list, Any]:
    """Two conditionals whose branches fuse (``exp``, ``*``, ``sum``); built anew on every call."""
    x = pt.tensor("x", dtype=dtype, shape=(length,))
    s = pt.scalar("s", dtype=dtype)
    a = cond_fn(s > 0, (pt.exp(x) * scale).sum() + s, (x**2).sum())
    b = cond_fn(s > 1, (pt.exp(x) * scale).sum() - s, pt.cos(x).sum())
    return [x, s], a + b


def reference(xv, sv, scale=2.0):
    a = (np.exp(xv) * scale).sum() + sv if sv > 0 else (xv**2).sum()
    b = (np.exp(xv) * scale).sum() - sv if sv > 1 else np.cos(xv).sum()
    return a + b


def bodies(fn):
    """The folded bodies the compiled function's graph reads, by id."""
    return {id(v.data): v.data for v in fn.maker.fgraph.variables if isinstance(getattr(v, "data", None), Body)}


class Counting:
    """Counts calls of module attributes while installed (``with Counting(...) as counts``)."""

    def __init__(self, monkeypatch, *targets):
        self.counts = {name: 0 for _, name in targets}
        for module, name in targets:
            original = getattr(module, name)

            def counted(*args, _original=original, _name=name, **kwargs):
                self.counts[_name] += 1
                return _original(*args, **kwargs)

            monkeypatch.setattr(module, name, counted)


@pytest.fixture(scope="module")
def twice():
    """One model compiled twice with Numba, each time from a graph built anew, on an empty table.

    Returns the two functions and, per compilation, how often bodies were prepared,
    converted, fused and compiled.
    """
    mp = pytest.MonkeyPatch()
    innergraph.clear_body_cache()
    counting = Counting(
        mp,
        (numba_backend, "prepared_body"),
        (numba_backend, "body_code"),
        (fusion, "_fused"),
    )
    fns, work = [], []
    try:
        for _ in range(2):
            before = dict(counting.counts), sum(runtime.compile_count.values())
            inputs, out = model(innergraph.ifelse)
            fns.append(pytensor.function(inputs, out, mode=NUMBA))
            done = {k: v - before[0][k] for k, v in counting.counts.items()}
            done["compiled"] = sum(runtime.compile_count.values()) - before[1]
            work.append(done)
    finally:
        mp.undo()
    return fns, work


def test_equal_graphs_share_their_folded_bodies(twice):
    (first, second), _ = twice
    shared = bodies(first)
    assert len(shared) == 4, "the test lost its subject: expected two then bodies and two else bodies"
    assert bodies(second).keys() == shared.keys()  # the same objects, not only equal ones


def test_the_second_compilation_prepares_converts_and_fuses_nothing(twice):
    _, (cold, warm) = twice
    assert cold["prepared_body"] >= 3 and cold["body_code"] >= 3 and cold["_fused"] >= 1 and cold["compiled"] >= 3
    assert warm == {"prepared_body": 0, "body_code": 0, "_fused": 0, "compiled": 0}


@pytest.mark.parametrize("sv", [1.5, 0.7, -1.0])
def test_values_equal_vanilla_under_numba(twice, sv):
    (first, second), _ = twice
    xv = INPUTS[0]
    vanilla = vanilla_function(lambda: model(vanilla_ifelse), NUMBA, first_call=(xv, sv))
    want = vanilla(xv, sv)
    np.testing.assert_allclose(want, reference(xv, sv), rtol=1e-12)
    assert first(xv, sv) == second(xv, sv)
    np.testing.assert_allclose(first(xv, sv), want, rtol=1e-14)


@pytest.mark.parametrize("mode", [CVM, PY, "FAST_COMPILE"], ids=["cvm", "py", "fast_compile"])
def test_a_shared_body_gets_each_linkers_own_code(twice, mode):
    (first, _), _ = twice
    inputs, out = model(innergraph.ifelse)
    fn = pytensor.function(inputs, out, mode=mode)
    vanilla = vanilla_function(lambda: model(vanilla_ifelse), Mode(linker="cvm", optimizer="fast_run"))
    for sv in (1.5, 0.7, -1.0):
        np.testing.assert_allclose(fn(INPUTS[0], sv), vanilla(INPUTS[0], sv), rtol=1e-14)
    if mode is not CVM:
        return
    assert bodies(fn).keys() == bodies(first).keys()  # the bodies Numba compiled, interned
    for body in bodies(fn).values():
        linkers = {k[1] for k in body.cache if isinstance(k, tuple) and k[0] == "function"}
        assert linkers == {"cvm"} and any(isinstance(k, tuple) and k[0] == "numba" for k in body.cache)


def test_values_equal_vanilla_under_jax(twice):
    pytest.importorskip("jax")  # in the test extra; the skip is for a bare environment only
    jax_mode = Mode(linker="jax", optimizer="fast_run")
    inputs, out = model(innergraph.ifelse)
    fn = pytensor.function(inputs, out, mode=jax_mode)
    vanilla = vanilla_function(lambda: model(vanilla_ifelse), jax_mode, first_call=(INPUTS[0], 1.5))
    for sv in (1.5, -1.0):
        np.testing.assert_allclose(fn(INPUTS[0], sv), vanilla(INPUTS[0], sv), rtol=1e-12)


@pytest.mark.parametrize(
    "variant, differs",
    [({"scale": 3.0}, "a small constant"), ({"dtype": "float32"}, "a dtype"), ({"length": 7}, "a static shape")],
    ids=["constant", "dtype", "static-shape"],
)
def test_bodies_that_differ_are_not_shared(twice, variant, differs):
    (first, _), _ = twice
    inputs, out = model(innergraph.ifelse, **variant)
    fn = pytensor.function(inputs, out, mode=NUMBA)
    new, old = bodies(fn), bodies(first)
    differing = [body for body in new.values() if body not in old.values()]  # by equality: alpha-equivalence
    assert differing, "the test lost its subject: no body differs"
    assert not any(id(body) in old for body in differing), f"bodies differing in {differs} were shared"
    assert all(id(body) in old for body in new.values() if body in old.values())  # equal ones are shared
    dtype = variant.get("dtype", "float64")
    xv = INPUTS[0].astype(dtype)
    vanilla = vanilla_function(lambda: model(vanilla_ifelse, **variant), NUMBA, first_call=(xv, np.asarray(1.5, dtype)))
    for value in (1.5, 0.7, -1.0):
        sv = np.asarray(value, dtype=dtype)
        np.testing.assert_allclose(fn(xv, sv), vanilla(xv, sv), rtol=1e-6 if dtype == "float32" else 1e-14)
    np.testing.assert_allclose(fn(INPUTS[0].astype(dtype), np.asarray(1.5, dtype)), reference(INPUTS[0], 1.5, variant.get("scale", 2.0)), rtol=1e-5)


def test_fastmath_gets_its_own_code(twice, monkeypatch):
    """A change of ``numba__fastmath`` (part of PyTensor's own cache keys) prepares the shared bodies anew."""
    (first, _), _ = twice
    counting = Counting(monkeypatch, (numba_backend, "body_code"))
    with pytensor.config.change_flags(numba__fastmath=not pytensor.config.numba__fastmath):
        inputs, out = model(innergraph.ifelse)
        fn = pytensor.function(inputs, out, mode=NUMBA)
    assert bodies(fn).keys() == bodies(first).keys()
    assert counting.counts["body_code"] >= 3
    np.testing.assert_allclose(fn(INPUTS[0], 1.5), reference(INPUTS[0], 1.5), rtol=1e-12)


def test_the_table_is_bounded_and_cleared():
    previous = body_table_size()
    try:
        innergraph.clear_body_cache()
        body_table_size(2)
        for scale in (5.0, 6.0):
            pytensor.function(*model(innergraph.ifelse, scale=scale), mode=NUMBA)  # 3 bodies each
        assert len(interned_bodies()) == 2
        body_table_size(1)
        assert len(interned_bodies()) == 1
        with pytest.raises(ValueError, match="non-negative int"):
            body_table_size(-1)
        with innergraph.uninstalled():
            assert interned_bodies() == []
    finally:
        body_table_size(previous)
    innergraph.clear_body_cache()
    assert interned_bodies() == []


def test_a_user_built_body_is_not_interned():
    """Only bodies the pipeline rewrote are interned: a user's own folded body, compiled with innergraph
    installed and its rewrites excluded, stays out of the table."""
    innergraph.clear_body_cache()
    inputs, out = model(innergraph.ifelse, scale=7.0)
    pytensor.function(inputs, out, mode=NUMBA.excluding("innergraph"))
    assert interned_bodies() == []


@pytest.mark.repository_tools  # the bench command's own behaviour (pyproject.toml's markers)
@pytest.mark.parametrize("fresh", [False, True])
def test_the_bench_empties_the_table_before_each_timed_innergraph_compile_only_when_asked(fresh, monkeypatch):
    import innergraph_bench.bench as bench
    from innergraph_bench.cases import select

    calls = []
    monkeypatch.setattr(bench, "clear_body_cache", lambda: calls.append(len(interned_bodies())))
    result = bench.measure_case(select(["ifelse"])[0], rounds=2, steady_budget=0.01, fresh_bodies=fresh)
    assert len(calls) == (2 if fresh else 0)
    assert all(calls), "the table held the case's bodies when it was emptied"
    np.testing.assert_array_equal(result.innergraph.result[0], result.vanilla.result[0])
