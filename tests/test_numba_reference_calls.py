"""Call, branch and loop bodies compiled once as their own unit and called by reference under Numba.

A loop's step body under PyTensor's Scan is called by reference (`tests/test_numba_reference.py`);
so are the bodies innergraph's generated code calls (an in-graph call, both branches of a lazy
conditional, a generated loop's step) and the inner graph of an `OpFromGraph` innergraph leaves
to PyTensor, when they have ``MIN_NODES`` nodes or more. Each test reads fresh processes
(`_child`) on a compile directory of their own: one process compiles five functions, one per
kind below, and reports their values, what it compiled and what each compiled function links.
"""

import textwrap

import numpy as np
import pytest

from children import WATCH, spawn

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

_CHILD = textwrap.dedent(
    """
    import json, sys, warnings
    variant = sys.argv[1]
    import innergraph
    if variant == "linked":
        from innergraph.backends import numba_reference
        numba_reference.MIN_NODES = sys.maxsize
    import numpy as np, pytensor, pytensor.tensor as pt
    from numba.core import event
    from pytensor.compile.builders import OpFromGraph
    from pytensor.raise_op import Assert
    from innergraph.backends.numba_link import final_function

    # children.WATCH: compiled (what Numba compiles), dispatchers(root), linked(dispatcher)

    def big(v, B):  # eight nodes and more once converted, with a check that can fail
        v = Assert("the state left the box")(v, pt.all(pt.abs(v) < 50.0))
        y = pt.tanh(B @ v) * 1.5
        z = y / (1.0 + pt.abs(y).sum())
        w = pt.concatenate([z[1:], z[:1]])
        return w + pt.dot(B.T, z) * 0.5 + pt.max(w)

    x, A = pt.dvector("x"), pt.dmatrix("A")
    a, b = pt.dvector("a"), pt.dmatrix("b")
    shared_ofg = OpFromGraph([a, b], [big(a, b)])
    lone_ofg = OpFromGraph([a, b], [big(a, b) * 2.0])
    graphs = {
        "call": shared_ofg(x, A) + shared_ofg(2.0 * x, A),  # lifted: an in-graph call of one body, twice
        "ofg": lone_ofg(x, A),  # left to PyTensor: its OpFromGraph conversion
        "branch": innergraph.ifelse(pt.sum(x) > 0, big(x, A), big(2.0 * x, A.T)),
        "loop": innergraph.while_loop(lambda v: pt.sum(v ** 2) < 1e5, lambda v: big(v, A) * 1.1, x, max_steps=20),
        "small": innergraph.call(lambda v: v * 2.0 + 1.0, x) + innergraph.call(lambda v: v * 2.0 + 1.0, 3.0 * x),
    }


    rng = np.random.default_rng(0)
    xv, Av = rng.normal(size=4), rng.normal(size=(4, 4))
    report = {}
    for kind, out in graphs.items():
        before = len(compiled)
        fn = pytensor.function([x, A], out, mode="NUMBA", on_unused_input="ignore")
        value = fn(xv, Av).tolist()
        try:
            fn(xv + 100.0, Av)
            error = None
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
        everything = dispatchers(final_function(fn.vm.jit_fn))
        callers = set().union(*(linked(d) for d in everything))
        stubs = [d for d in everything if d.py_func.__name__ == "body_by_reference"]
        bodies = {o.library.name for s in stubs for o in s.py_func.__globals__["BODY"].overloads.values()}
        report[kind] = {"value": value, "error": error, "stubs": len(stubs), "body_libraries": len(bodies),
                        "bodies_in_callers": len(bodies & callers), "compiled": compiled[before:]}
    print(json.dumps({"report": report, "compiled": compiled}))
    """
).replace("# children.WATCH: compiled (what Numba compiles), dispatchers(root), linked(dispatcher)\n", WATCH)


def _child(compiledir, variant="reference"):
    return spawn(_CHILD, compiledir, variant)


def _big(v, B):
    if not np.all(np.abs(v) < 50.0):
        raise AssertionError("the state left the box")
    y = np.tanh(B @ v) * 1.5
    z = y / (1.0 + np.abs(y).sum())
    w = np.concatenate([z[1:], z[:1]])
    return w + B.T @ z * 0.5 + np.max(w)


def _numpy(kind, x, A):
    """Each kind's value, by NumPy."""
    if kind == "call":
        return _big(x, A) + _big(2.0 * x, A)
    if kind == "ofg":
        return _big(x, A) * 2.0
    if kind == "branch":
        return _big(x, A) if x.sum() > 0 else _big(2.0 * x, A.T)
    if kind == "loop":
        for _ in range(20):
            if not np.sum(x**2) < 1e5:
                break
            x = _big(x, A) * 1.1
        return x
    return (x * 2.0 + 1.0) + (3.0 * x * 2.0 + 1.0)


KINDS = ("call", "ofg", "branch", "loop", "small")


@pytest.fixture(scope="module")
def cold(tmp_path_factory):
    """One cold process with bodies by reference and one with every body linked, on compile directories of their own."""
    folders = {v: tmp_path_factory.mktemp(v) for v in ("reference", "linked")}
    return folders, {v: _child(folder, v) for v, folder in folders.items()}


def test_values_equal_numpys_under_either_call(cold):
    rng = np.random.default_rng(0)
    x, A = rng.normal(size=4), rng.normal(size=(4, 4))
    for variant, got in cold[1].items():
        for kind in KINDS:
            np.testing.assert_allclose(got["report"][kind]["value"], _numpy(kind, x, A), rtol=1e-12, atol=1e-14, err_msg=f"{variant} {kind}")


@pytest.mark.parametrize("kind", ["call", "ofg", "branch", "loop"])
def test_a_large_body_is_called_by_reference_and_linked_into_no_caller(cold, kind):
    reference, linked = (cold[1][v]["report"][kind] for v in ("reference", "linked"))
    # one body for both calls; the step; two branches, of which the one never taken is never compiled
    stubs, compiled = {"call": (1, 1), "ofg": (1, 1), "branch": (2, 1), "loop": (1, 1)}[kind]
    assert reference["stubs"] == stubs and reference["body_libraries"] == compiled, reference
    assert reference["bodies_in_callers"] == 0, reference
    assert linked["stubs"] == 0, linked


def test_a_small_body_stays_inline(cold):
    """A call body of three nodes (one once fused) is written inline: no stub, nothing compiled on its own."""
    small = cold[1]["reference"]["report"]["small"]
    assert small["stubs"] == 0 and small["body_libraries"] == 0, small


def test_an_exception_in_a_body_called_by_reference_reaches_the_caller(cold):
    for variant, got in cold[1].items():
        for kind in ("call", "ofg", "branch", "loop"):
            error = got["report"][kind]["error"]
            assert error is not None and "the state left the box" in error, (variant, kind, error)


def test_the_next_process_compiles_no_body_and_no_caller(cold):
    folders, got = cold
    again = _child(folders["reference"])
    assert [n for n in again["compiled"] if not (n.startswith("get_") and n.endswith("_pointer"))] == [], again["compiled"]
    for kind in KINDS:
        assert again["report"][kind]["value"] == got["reference"]["report"][kind]["value"]
