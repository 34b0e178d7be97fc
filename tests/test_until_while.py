"""``innergraph_until_to_while``: a Scan with ``until`` read only at its final states becomes one
WhileLoop (by default under Numba and JAX, and under py and cvm with INNERGRAPH_UNTIL_TO_WHILE=always); the
values equal vanilla PyTensor's; a Scan any other way (traces read whole, sequences, per-step
outputs, multi-tap traces, a linker that runs no WhileLoop, the rewrite excluded) stays a Scan.
Several tests come from the module's mutation run (design/testing.md, "Planted faults as a habit")."""

import warnings
from typing import Any

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.compile.mode import Mode, get_mode
from pytensor.graph.basic import Constant
from pytensor.graph.fg import FunctionGraph
from pytensor.scan.op import Scan as NativeScan
from pytensor.scan.utils import until

import innergraph
from innergraph.ops.loop import WhileLoop
from innergraph.ops.scan import Scan
from innergraph.protocol.signature import Meaning, consumers, replace_consumer
from innergraph.rewriting.outer import first_row
from innergraph.rewriting.untrace import last_step_reads
from innergraph.rewriting.until_while import ENV_FLAG, until_scans_to_while_loops
from test_foreign_linker import ToyLinker
from vanilla import vanilla_function, vanilla_values

c = pt.dvector("c")
a, x0 = pt.dscalar("a"), pt.dscalar("x0")
n = pt.lscalar("n")
VALUES: list[Any] = [np.linspace(1.0, 50.0, 7), 0.7, 0.3, 40]


def newton(c):
    """Newton's iteration for sqrt(c) written as PyTensor users do: scan until, the trace's last row."""
    def step(x):
        y = 0.5 * (x + c / x)
        return y, until(pt.max(pt.abs(y * y - c)) < 1e-10)

    return pytensor.scan(step, outputs_info=[pt.ones_like(c)], n_steps=200, return_updates=False)[-1]


def two_states(a, x0, n):
    """A fixed point with a step counter: two states, a non-sequence, a symbolic bound."""
    def step(x, k, a):
        y = pt.cos(a * x)
        return [y, k + 1], until(pt.abs(y - x) < 1e-12)

    xs, ks = pytensor.scan(step, outputs_info=[x0, pt.constant(0, dtype="int64")], non_sequences=[a], n_steps=n, return_updates=False)
    return [xs[-1], ks[-1]]


def graphs():
    return [newton(c), *two_states(a, x0, n)]


def kinds(fn):
    return sorted(type(node.op).__name__ for node in fn.maker.fgraph.apply_nodes if isinstance(node.op, WhileLoop | Scan | NativeScan))


def mode_for(linker, convert=True):
    mode = get_mode("NUMBA") if linker == "numba" else Mode(linker=linker, optimizer="fast_run")
    return mode.including("scan_until_to_while") if convert else mode


@pytest.fixture(scope="module", params=["numba", "cvm", "py"])
def compiled(request):
    """(converted function, vanilla function) per linker, compiled once for the module."""
    mode = mode_for(request.param)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(ENV_FLAG, "always")
        fn = pytensor.function([c, a, x0, n], graphs(), mode=mode)
    vanilla = vanilla_function(lambda: ([c, a, x0, n], graphs()), mode_for(request.param, convert=False), first_call=VALUES)
    return request.param, fn, vanilla


def test_each_until_scan_is_one_while_loop_with_vanilla_values(compiled):
    linker, fn, vanilla = compiled
    assert kinds(fn) == ["WhileLoop", "WhileLoop"], linker
    assert kinds(vanilla) == ["Scan", "Scan"]
    for bound in (40, 3, 1, 0):  # converged, stopped by n_steps, one step, no step at all
        values = [*VALUES[:3], bound]
        for got, want in zip(fn(*values), vanilla(*values), strict=True):
            np.testing.assert_allclose(got, want, rtol=0, atol=0)
    assert fn(*VALUES)[2] < 40  # the condition, not the bound, stopped the fixed point


def test_the_loop_is_a_bounded_do_while_with_the_negated_condition(compiled):
    linker, fn, _ = compiled
    loops = [node for node in fn.maker.fgraph.apply_nodes if isinstance(node.op, WhileLoop)]
    assert {(node.op.do_while, node.op.bounded) for node in loops} == {(True, True)}
    assert sorted(node.op.n_carry for node in loops) == [1, 2]


@pytest.mark.parametrize("flag", [None, "never"])
def test_not_converted_under_thunk_linkers_unless_the_flag_says_always(monkeypatch, flag):
    if flag is None:
        monkeypatch.delenv(ENV_FLAG, raising=False)
    else:
        monkeypatch.setenv(ENV_FLAG, flag)  # any value but "always" ("never" sorts after it)
    fn = pytensor.function([c], newton(c), mode=mode_for("cvm"))
    assert kinds(fn) == ["Scan"]


@pytest.mark.parametrize("name", ["NUMBA", "JAX"])
def test_on_by_default_under_numba_and_jax_and_excluded_on_request(name):
    cs = pt.dvector("cs", shape=(7,))
    default = pytensor.function([cs], newton(cs), mode=get_mode(name))
    excluded = pytensor.function([cs], newton(cs), mode=get_mode(name).excluding("scan_until_to_while"))
    assert kinds(default) == ["WhileLoop"] and kinds(excluded) == ["Scan"]
    np.testing.assert_array_equal(default(VALUES[0]), excluded(VALUES[0]))


@pytest.fixture(scope="module")
def numba_others():
    """Under Numba: a trace read whole, a trace read at [-2], the rewrite excluded; with vanilla twins."""
    def whole(a, x0, n):
        def step(x):
            return pt.cos(a * x), until(x > 10)

        return pytensor.scan(step, outputs_info=[x0], n_steps=n, return_updates=False)

    trace = whole(a, x0, n)
    outs = [trace, trace[-2]]
    mode = mode_for("numba")
    kept = pytensor.function([a, x0, n], outs, mode=mode)
    excluded = pytensor.function([c], newton(c), mode=mode.excluding("scan_until_to_while"))
    vanilla = vanilla_function(lambda: ([a, x0, n], [(t := whole(a, x0, n)), t[-2]]), get_mode("NUMBA"), first_call=(0.7, 0.3, 9))
    return kept, excluded, vanilla


def test_traces_read_otherwise_and_exclusion_keep_the_scan(numba_others):
    kept, excluded, vanilla = numba_others
    assert kinds(kept) == ["Scan"] and kinds(excluded) == ["Scan"]
    for got, want in zip(kept(0.7, 0.3, 9), vanilla(0.7, 0.3, 9), strict=True):
        np.testing.assert_array_equal(got, want)
    np.testing.assert_allclose(excluded(VALUES[0]), np.sqrt(VALUES[0]), rtol=1e-10)


def test_under_jax_the_until_scan_runs_as_a_while_loop():
    from innergraph.core.dispatch import runs
    from innergraph.core.dispatch import load_on_demand
    from pytensor.link.jax.linker import JAXLinker

    load_on_demand(JAXLinker)
    cs = pt.dvector("cs", shape=(7,))
    fn = pytensor.function([cs], newton(cs), mode=get_mode("JAX").including("scan_until_to_while"))
    assert runs(JAXLinker(), WhileLoop)  # the loop's JAX code, generated from its declaration
    assert kinds(fn) == ["WhileLoop"]
    np.testing.assert_allclose(fn(VALUES[0]), np.sqrt(VALUES[0]), rtol=1e-10)


xs = pt.dvector("xs")


def fixed_point(x0, a, n):
    """``two_states``' fixed point alone: cos(a x) until it stops moving, at most n steps."""
    def step(x, a):
        y = pt.cos(a * x)
        return y, until(pt.abs(y - x) < 1e-12)

    return pytensor.scan(step, outputs_info=[x0], non_sequences=[a], n_steps=n, return_updates=False)


def beside_others(a, x0, n, xs):
    """Until-scans the rewrite leaves (and a counted scan), then two it takes that read them all.

    Left: a trace read whole; a sequence; a per-step output; a trace with taps (-1, -2) and one
    with tap -2 alone; a scan without ``until``. Taken: a fixed point started from all of them, and one
    whose non-sequence is that fixed point's final state (its node's input, replaced when the
    first is converted).
    """
    whole = pytensor.scan(lambda x: (pt.cos(a * x), until(x > 10)), outputs_info=[x0], n_steps=n, return_updates=False)
    seq = pytensor.scan(lambda v, x: (x + v, until(x > 100)), sequences=[xs], outputs_info=[x0], return_updates=False)
    state, per_step = pytensor.scan(
        lambda x: ([pt.sin(a * x), 2 * x], until(x > 10)), outputs_info=[x0, None], n_steps=n, return_updates=False
    )
    start = pt.stack([x0, a])
    two_taps = pytensor.scan(
        lambda x1, x2: (0.5 * x1 + 0.3 * x2, until(x1 > 10)), outputs_info=[dict(initial=start, taps=[-1, -2])], n_steps=n, return_updates=False
    )
    minus_two = pytensor.scan(
        lambda x2: (pt.cos(a * x2), until(x2 > 10)), outputs_info=[dict(initial=start, taps=[-2])], n_steps=n, return_updates=False
    )
    counted = pytensor.scan(lambda x: pt.cos(a * x), outputs_info=[x0], n_steps=n, return_updates=False)
    left = [whole, seq[-1], state[-1], per_step, two_taps[-1], minus_two[-1], counted[-1]]
    first = fixed_point(pt.cos(x0 + pt.max(pt.stack([pt.max(v) for v in left]))), a, n)[-1]  # max: exact in any order
    second = fixed_point(x0, first, n)[-1]
    return [*left, first, second]


OTHERS: list[Any] = [0.7, 0.3, 9, np.linspace(-1.0, 1.0, 5)]


@pytest.fixture(scope="module")
def numba_beside_others():
    """``beside_others`` under Numba (the rewrite on by default) and vanilla's."""
    fn = pytensor.function([a, x0, n, xs], beside_others(a, x0, n, xs), mode=get_mode("NUMBA"))
    vanilla = vanilla_function(lambda: ([a, x0, n, xs], beside_others(a, x0, n, xs)), get_mode("NUMBA"), first_call=OTHERS)
    return fn, vanilla


def test_the_until_scans_it_cannot_take_stay_scans_and_the_later_ones_are_taken(numba_beside_others):
    fn, vanilla = numba_beside_others
    # exactly the two it takes become loops (PyTensor's scan merge joins some of the others, in vanilla too)
    assert kinds(fn) == ["Scan"] * (kinds(vanilla).count("Scan") - 2) + ["WhileLoop"] * 2
    for bound in (9, 2, 0):
        values = [*OTHERS[:2], bound, OTHERS[3]]
        for got, want in zip(fn(*values), vanilla(*values), strict=True):
            np.testing.assert_array_equal(got, want)


def test_a_jit_linker_that_runs_no_while_loop_keeps_the_scan():
    """`test_foreign_linker`'s toy JIT linker converts PyTensor's own Ops only: the until-scans stay Scans."""
    fn = pytensor.function([a, x0, n], two_states(a, x0, n), mode=Mode(linker=ToyLinker(), optimizer="fast_run"))
    vanilla = vanilla_function(lambda: ([a, x0, n], two_states(a, x0, n)), mode_for("py", convert=False))
    assert kinds(fn) == ["Scan"]  # its two states in one
    for got, want in zip(fn(*VALUES[1:]), vanilla(*VALUES[1:]), strict=True):
        np.testing.assert_array_equal(got, want)


def with_a_shared_total(a, x0, n):
    """``fixed_point`` that also adds each step's value to a shared variable (PyTensor's untraced state, which
    innergraph lifts as a trace read at ``[-1]``)."""
    total = pytensor.shared(np.float64(0.0), name="total")

    def step(x, a):
        y = pt.cos(a * x)
        return y, {total: total + y}, until(pt.abs(y - x) < 1e-12)

    with warnings.catch_warnings():  # PyTensor 3.3 returns shared updates only with return_updates=True, deprecated
        warnings.simplefilter("ignore", DeprecationWarning)
        trace, updates = pytensor.scan(step, outputs_info=[x0], non_sequences=[a], n_steps=n, return_updates=True)
    return total, trace[-1], updates


def test_a_shared_update_reads_the_loop():
    total, last, updates = with_a_shared_total(a, x0, n)
    fn = pytensor.function([a, x0, n], last, updates=updates, mode=get_mode("NUMBA"))
    with innergraph.uninstalled():
        vanilla_total, vanilla_last, vanilla_updates = with_a_shared_total(a, x0, n)
    vanilla = vanilla_function(lambda: ([a, x0, n], vanilla_last), get_mode("NUMBA"), updates=vanilla_updates)
    assert kinds(fn) == ["WhileLoop"]
    for bound in (40, 3, 0):
        np.testing.assert_array_equal(fn(0.7, 0.3, bound), vanilla(0.7, 0.3, bound))
        np.testing.assert_array_equal(total.get_value(), vanilla_total.get_value())  # the sums so far


def until_scan_graph(*scales):
    """A FunctionGraph of innergraph's own until-scans (``innergraph.scan``), one per scale, each read at ``[-1]``."""
    def step(x, a):
        y = pt.cos(a * x)
        return y, until(pt.abs(y - x) < 1e-12)

    lasts = []
    for k in scales:
        steps = innergraph.scan(step, outputs_info=[x0], non_sequences=[k * a], n_steps=n, return_updates=False)
        lasts.append(steps.owner.inputs[0][-1])  # the trace itself (steps is trace[1:])
    return FunctionGraph([a, x0, n], lasts, clone=True)


def test_called_directly_it_counts_what_it_turns_and_folds_as_the_scan_did(monkeypatch):
    monkeypatch.setenv(ENV_FLAG, "always")
    fgraph = until_scan_graph(1.0, 2.0)
    scans = [node for node in fgraph.apply_nodes if isinstance(node.op, Scan)]
    assert len(scans) == 2 and all(isinstance(node.inputs[0], Constant) for node in scans)  # innergraph.scan folds its body
    assert until_scans_to_while_loops(fgraph) == 2
    loops = [node for node in fgraph.apply_nodes if isinstance(node.op, WhileLoop)]
    assert len(loops) == 2 and not any(isinstance(node.op, Scan) for node in fgraph.apply_nodes)
    assert all(isinstance(node.inputs[0], Constant) and isinstance(node.inputs[1], Constant) for node in loops)
    assert until_scans_to_while_loops(FunctionGraph([a], [pt.cos(a)])) == 0  # no Scan


def test_called_directly_under_a_mode_it_cannot_name_it_keeps_the_scan(monkeypatch):
    monkeypatch.setenv(ENV_FLAG, "always")
    fgraph = until_scan_graph(1.0)
    fgraph._compile_mode = "no such mode"  # what FunctionMaker stamps; get_mode refuses it
    assert until_scans_to_while_loops(fgraph) == 0
    assert any(isinstance(node.op, Scan) for node in fgraph.apply_nodes)


def test_an_untraced_state_is_carried(monkeypatch):
    """An until-scan whose state is untraced (made here as `untrace_final_states` makes a counted scan's,
    through `replace_consumer`) becomes a loop carrying it, its result read from the loop."""
    monkeypatch.setenv(ENV_FLAG, "always")
    fgraph = until_scan_graph(1.0)
    (sig,) = consumers(fgraph)
    (state,) = sig.having(Meaning.TRACE)
    initial = first_row(state.args[0])
    final = initial.type()
    kind = sig.form.kind_for(Meaning.CARRY, state.bodies)
    carried = state.with_(kind=kind, args=(initial,), results=(final,))
    reads = dict.fromkeys(last_step_reads(fgraph, state.results[0]) or [], final)
    replace_consumer(fgraph, sig, [carried if s is state else s for s in sig.slots], forwarded=reads, reason="test")
    (untraced,) = consumers(fgraph)
    assert [untraced.meaning(s) for s in untraced.slots].count(Meaning.CARRY) == 1
    assert until_scans_to_while_loops(fgraph) == 1
    assert [type(node.op) for node in fgraph.apply_nodes if isinstance(node.op, WhileLoop | Scan)] == [WhileLoop]
    fn = pytensor.function(fgraph.inputs, fgraph.outputs, mode=mode_for("py"))
    for bound in (40, 3, 0):
        want = vanilla_values(lambda: ([a, x0, n], fixed_point(x0, a, n)[-1]), [0.7, 0.3, bound], mode_for("py", convert=False))
        np.testing.assert_array_equal(fn(0.7, 0.3, bound), [want])
