"""Step bodies compiled once as their own unit and called by reference under Numba.

Each test runs fresh processes (`_child`) on a compile directory of its own, as users'
processes share ``base_compiledir``: what a process compiles is counted with Numba's
compile events, what its compiled functions link is read from their libraries
(`innergraph.backends.numba_reference`, ``design/numba-linking.md``).
"""

import shutil
import textwrap
from pathlib import Path

import numpy as np
import pytest

import numba
from children import WATCH, result, spawn

from innergraph.backends.numba_reference import _BODIES, body_address, call_by_reference

_CHILD = textwrap.dedent(
    """
    import json, sys, warnings
    variant, number, inputs, graph = sys.argv[1], float(sys.argv[2]), sys.argv[3], sys.argv[4]
    if variant != "python":
        import innergraph
    if variant == "linked":
        from innergraph.backends import numba_reference
        numba_reference.MIN_NODES = sys.maxsize
    import numpy as np, pytensor, pytensor.tensor as pt
    from numba.core import event
    from pytensor.raise_op import Assert

    # children.WATCH: compiled (what Numba compiles), dispatchers(root), linked(dispatcher)
    x, A = pt.dvector("x"), pt.dmatrix("A")

    def small_step(v, A):
        return v * number + 1.0

    def step(v, A):
        v = Assert("the state left the box")(v, pt.all(pt.abs(v) < 50.0))
        y = pt.tanh(A @ v) * number
        z = y / (1.0 + pt.abs(y).sum())
        w = pt.concatenate([z[1:], z[:1]])
        return w + pt.dot(A.T, z) * 0.5 + pt.max(w)

    ys = pytensor.scan(small_step if graph == "small" else step, outputs_info=[x], non_sequences=[A], n_steps=7,
                       return_updates=False)
    y = ys[-1]
    g = pytensor.grad((y ** 2).sum(), x) if graph != "plain" else 2.0 * y
    # the reference values: vanilla PyTensor's Python linker (no Numba compilation: the cheap referee)
    mode = pytensor.compile.mode.Mode(linker="py", optimizer="fast_run") if variant == "python" else "NUMBA"
    fn = pytensor.function([x, A], [y, g], mode=mode)
    rng = np.random.default_rng(0)
    xv, Av = rng.normal(size=4), rng.normal(size=(4, 4))
    if inputs == "outside":
        xv = xv + 100.0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            value, error = [a.tolist() for a in fn(xv, Av)], None
        except Exception as exc:
            value, error = None, f"{type(exc).__name__}: {exc}"


    facts = {"loops": 0, "stubs": 0, "bodies_in_callers": 0, "body_libraries": 0}
    if variant != "python" and error is None:
        from innergraph.backends.numba_link import final_function
        final = final_function(fn.vm.jit_fn)
        everything = dispatchers(final)
        callers = set().union(*(linked(d) for d in everything))
        for d in everything:
            inner = d.py_func.__globals__.get("scan_inner_func")
            if inner is None:
                continue
            facts["loops"] += 1
            body = inner.py_func.__globals__.get("BODY") if inner.py_func.__name__ == "body_by_reference" else inner
            facts["stubs"] += body is not inner
            libraries = {o.library.name for o in body.overloads.values()}
            facts["body_libraries"] += len(libraries)
            facts["bodies_in_callers"] += len(libraries & callers)
    print(json.dumps({"value": value, "error": error, "compiled": compiled, **facts,
                      "warnings": [str(w.message) for w in caught if "innergraph" in str(w.message)]}))
    """
).replace("# children.WATCH: compiled (what Numba compiles), dispatchers(root), linked(dispatcher)\n", WATCH)


def _child(compiledir, variant="reference", number=1.5, inputs="inside", graph="grad", wait=True):
    """One process: ``graph`` is the loop and its derivative ("grad"), the loop alone ("plain") or a small loop ("small")."""
    return spawn(_CHILD, compiledir, variant, str(number), inputs, graph, wait=wait)


def _body_entries(compiledir, suffix=".nbi"):
    return sorted((Path(compiledir) / "numba").glob(f"*_innergraph_body_*{suffix}"))


def _assert_compiled_nothing(child):
    """The child compiled only what every process compiles, vanilla's too (Numba's BLAS pointer getters), and warned of nothing."""
    assert [n for n in child["compiled"] if not (n.startswith("get_") and n.endswith("_pointer"))] == [], child["compiled"]
    assert child["warnings"] == [], child["warnings"]


@pytest.fixture(scope="module")
def cold(tmp_path_factory):
    """One cold process of each variant, on compile directories of their own (shared by the module's tests).

    ``python``: vanilla PyTensor (innergraph never imported) with the Python linker,
    the referee of values; ``reference``: innergraph as installed; ``linked``:
    innergraph with every body linked into its loop.
    """
    folders = {v: tmp_path_factory.mktemp(v) for v in ("python", "reference", "linked")}
    return folders, {v: _child(folder, v) for v, folder in folders.items()}


def _assert_values_equal(got, expected):
    assert got["error"] is None and expected["error"] is None, (got["error"], expected["error"])
    for ours, theirs in zip(got["value"], expected["value"], strict=True):
        np.testing.assert_allclose(ours, theirs, rtol=1e-12, atol=1e-14)


def test_values_equal_vanillas_under_either_call(cold):
    _, got = cold
    for variant in ("reference", "linked"):
        _assert_values_equal(got[variant], got["python"])


def test_no_callers_module_holds_a_body_called_by_reference(cold):
    """The loops call their bodies through a stub, and no compiled function links a body's code; linked, every loop does."""
    _, got = cold
    reference, linked = got["reference"], got["linked"]
    assert reference["loops"] == 2 and linked["loops"] == 2  # the loop and its derivative's
    assert reference["stubs"] == 2 and reference["body_libraries"] >= 2
    assert reference["bodies_in_callers"] == 0
    assert linked["stubs"] == 0 and linked["bodies_in_callers"] == linked["body_libraries"] >= 2


def test_an_exception_in_a_body_called_by_reference_reaches_the_caller(cold):
    folders, _ = cold
    vanilla = _child(folders["python"], "python", inputs="outside")
    reference = _child(folders["reference"], "reference", inputs="outside")  # the functions compiled: from the cache
    assert vanilla["error"] is not None and "the state left the box" in vanilla["error"]
    assert reference["error"] == vanilla["error"]


def test_the_next_process_compiles_nothing_and_loads_each_body(cold):
    folders, got = cold
    again = _child(folders["reference"])
    assert again["value"] == got["reference"]["value"]
    _assert_compiled_nothing(again)
    assert len(_body_entries(folders["reference"])) == 2  # one entry per body, each its own unit


def test_two_processes_compiling_at_once_both_succeed_and_leave_one_entry_per_body(cold, tmp_path):
    first, second = (_child(tmp_path, wait=False) for _ in range(2))
    for process in (first, second):
        _assert_values_equal(result(process), cold[1]["python"])
    again = _child(tmp_path)
    _assert_compiled_nothing(again)
    assert len(_body_entries(tmp_path)) == 2


def test_an_unreadable_body_entry_is_removed_and_compiled_again_with_one_warning(cold, tmp_path):
    folders, got = cold
    shutil.copytree(folders["reference"], tmp_path / "cache")
    entry = _body_entries(tmp_path / "cache", ".nbc")[0]
    entry.write_bytes(entry.read_bytes()[:100])
    damaged = _child(tmp_path / "cache")
    _assert_values_equal(damaged, got["python"])
    assert len(damaged["warnings"]) == 1 and "could not be read" in damaged["warnings"][0], damaged["warnings"]
    assert damaged["compiled"].count("numba_scan") == 1  # the damaged body alone
    again = _child(tmp_path / "cache")
    _assert_compiled_nothing(again)


def test_another_model_of_the_same_body_compiles_no_body_and_a_changed_body_is_compiled_again(cold, tmp_path):
    """The same loop in another function compiles no body; a number of the body changed (types kept) compiles both anew."""
    folders, got = cold
    tmp_path, first = tmp_path / "cache", got["reference"]
    shutil.copytree(folders["reference"], tmp_path)  # the cold process's cache, left as it was for the other tests
    other = _child(tmp_path, number=1.5, graph="plain")  # another outer function, the forward loop unchanged
    assert other["stubs"] == 1 and "numba_scan" not in other["compiled"], other["compiled"]
    assert other["compiled"], "the new outer function was compiled: the check above is not vacuous"
    np.testing.assert_allclose(other["value"][0], first["value"][0], rtol=0, atol=0)
    changed = _child(tmp_path, number=0.7)
    assert changed["value"] != first["value"]
    assert changed["compiled"].count("numba_scan") == 2, changed["compiled"]  # both bodies hold the number
    _assert_values_equal(changed, _child(folders["python"], "python", number=0.7))


def test_a_body_unknown_to_the_process_is_refused_by_name():
    with pytest.raises(RuntimeError, match="the body 0123abcd by reference"):
        body_address("0123abcd", ())


def test_a_caller_whose_body_is_unknown_raises_in_python_and_runs_once_it_is_known():
    """The address is fetched on the first call through Python's C API: its exception reaches Python, no crash."""
    body = numba.njit(lambda a: a * 2.0 + 1.0)
    _BODIES["feedbeef"] = body  # weak: ``body`` holds it

    @numba.njit
    def caller(x):
        return call_by_reference("feedbeef", (x,)) - 1.0  # type: ignore[call-arg]  # an intrinsic: typed by Numba

    caller.compile((numba.types.float64,))  # typed while the body is known
    del _BODIES["feedbeef"]
    with pytest.raises(RuntimeError, match="the body feedbeef by reference"):
        caller(3.0)
    _BODIES["feedbeef"] = body
    assert caller(3.0) == 6.0  # the address was not stored by the failed call


def test_a_body_below_the_threshold_stays_linked(tmp_path):
    small = _child(tmp_path, graph="small")
    assert small["loops"] >= 1 and small["stubs"] == 0 and small["bodies_in_callers"] == small["body_libraries"] >= 1
    x = np.random.default_rng(0).normal(size=4)
    for _ in range(7):
        x = x * 1.5 + 1.0
    np.testing.assert_allclose(small["value"][0], x, rtol=1e-14)



def test_a_body_of_scalar_nodes_only_stays_linked_whatever_its_size():
    """Eight scalar recursions in one Scan (eight fused scalar nodes), and a call body of scalars: each costs less than the call."""
    import pytensor
    import pytensor.tensor as pt
    from pytensor.graph.fg import FunctionGraph
    from pytensor.scan.op import Scan

    from innergraph import body_of, inner_graph
    from innergraph.backends.numba import ReferencedCode, caller_code
    from innergraph.backends.numba_code import BodyCode
    from innergraph.backends.numba_reference import MIN_NODES, called_by_reference

    xs = [pt.dscalar(f"x{i}") for i in range(MIN_NODES)]
    ys = pytensor.scan(
        lambda *vs: [pt.sin(v) * (1.0 + i) + pt.cos(v) / (2.0 + i) for i, v in enumerate(vs)],
        outputs_info=xs, n_steps=5, return_updates=False,
    )
    fn = pytensor.function(xs, pt.add(*(y[-1] for y in ys)), mode="NUMBA")
    [scan] = [node.op for node in fn.maker.fgraph.apply_nodes if isinstance(node.op, Scan)]
    assert len(scan.fgraph.apply_nodes) >= MIN_NODES  # large enough: linked for its scalars alone
    assert not called_by_reference(scan.fgraph)
    v = pt.dvector("v")
    assert called_by_reference(FunctionGraph([v], [pt.sin(v) * float(i + 2) for i in range(MIN_NODES)], clone=True))

    def scalars(a):  # eight indexing nodes with scalar outputs, then their arithmetic
        return [pt.sin(a[i]) * (1.0 + i) for i in range(MIN_NODES)]

    def arrays(a):  # the same on slices
        return [pt.sin(a[i:]) * (1.0 + i) for i in range(MIN_NODES)]

    for body, referenced in ((scalars, False), (arrays, True)):
        code = caller_code(body_of(inner_graph(body, [pt.dvector("a").type]).function))
        assert isinstance(code, ReferencedCode) is referenced, (body.__name__, code)
        if isinstance(code, BodyCode):
            assert len(code.functions) >= MIN_NODES  # large enough: linked for its scalars alone
