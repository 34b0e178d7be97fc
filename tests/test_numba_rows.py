"""A Numba Scan's array rows are written by a loop, not by Numba's slice assignment.

`innergraph.backends.numba_rows`: PyTensor's generated Scan stores each step's output
with ``storage[index] = value``; for an array value Numba compiles that as a slice
assignment whose shape check formats its message with f-strings, and so compiles and
links its string code (seconds in a fresh process). innergraph compiles the same source
with those stores as `store_row` calls. Checked here: `store_row`'s meaning (overlap,
shapes, dimensions), the rewrite of PyTensor's real sources, values against vanilla's,
what the compiled functions link, and the cache key.
"""

import re
import textwrap

import numpy as np
import pytest

import numba
import pytensor
from pytensor.link.numba.dispatch import scan as numba_scan

from children import WATCH, spawn
from vanilla import vanilla_values

import innergraph
from innergraph.backends.numba_rows import rows_by_loop, rows_key, store_row

_ROW_STORE = re.compile(r"_([a-z]+)_storage\[[^\]]+\] = inner_out_\d+")  # the group: the storage's kind
_SHAPE_MESSAGE = "raise_with_shape_context"  # numba's f-string formatting of a slice assignment's shape error


@numba.njit
def _store(storage, index, value):
    store_row(storage, index, value)


def test_store_row_copies_a_row_checks_its_shape_and_reads_an_overlapping_value_first():
    storage = np.zeros((3, 4))
    _store(storage, 1, np.arange(4.0))
    np.testing.assert_array_equal(storage, [[0, 0, 0, 0], [0, 1, 2, 3], [0, 0, 0, 0]])
    # the value is the destination row reversed: read whole before any element is written, as numpy does
    _store(storage, 1, storage[1][::-1])
    np.testing.assert_array_equal(storage[1], [3, 2, 1, 0])
    _store(storage, 2, storage[1])  # another row of the same storage
    np.testing.assert_array_equal(storage[2], [3, 2, 1, 0])
    with pytest.raises(ValueError, match="does not have the shape of its output's storage row"):
        _store(storage, 0, np.ones(3))
    cube = np.zeros((2, 3, 2))
    _store(cube, 1, np.asfortranarray(np.arange(6.0).reshape(3, 2)))  # a 2-d row, not C-contiguous
    np.testing.assert_array_equal(cube[1], np.arange(6.0).reshape(3, 2))
    _store(cube, 0, cube[1][::-1, ::-1])
    _store(cube, 1, cube[1][::-1, ::-1])  # overlapping, two dimensions
    np.testing.assert_array_equal(cube[0], np.arange(6.0).reshape(3, 2)[::-1, ::-1])
    np.testing.assert_array_equal(cube[1], cube[0])
    # reversed values that start inside the row and reach past it: only the row's whole extent shows the overlap
    storage, expected = np.arange(12.0).reshape(3, 4), np.arange(12.0).reshape(3, 4)
    expected[1] = expected.reshape(-1)[9:5:-1]
    _store(storage, 1, storage.reshape(-1)[9:5:-1])
    np.testing.assert_array_equal(storage, expected)
    stack, expected_stack = np.arange(18.0).reshape(3, 3, 2), np.arange(18.0).reshape(3, 3, 2)
    value = stack.reshape(-1)[13:7:-1].reshape(3, 2)
    expected_stack[1] = expected_stack.reshape(-1)[13:7:-1].reshape(3, 2)  # numpy reads an overlapping value whole first
    _store(stack, 1, value)
    np.testing.assert_array_equal(stack, expected_stack)
    block = np.zeros((2, 2, 3, 2))  # a 3-d row, through np.ndindex
    _store(block, 1, np.arange(12.0).reshape(2, 3, 2))
    _store(block, 0, block[1][::-1])
    np.testing.assert_array_equal(block[1], np.arange(12.0).reshape(2, 3, 2))
    np.testing.assert_array_equal(block[0], np.arange(12.0).reshape(2, 3, 2)[::-1])
    vector = np.zeros(3)
    _store(vector, 2, np.asarray(5.0))  # a 0-d value is an element, assigned as before
    np.testing.assert_array_equal(vector, [0, 0, 5])


def test_store_row_broadcasts_an_axis_of_length_one_along_its_row_as_numpy_does():
    # Numba's slice assignment and NumPy (PyTensor's other linkers) broadcast a value's axis of length 1
    storage, expected = np.zeros((2, 3)), np.zeros((2, 3))
    for target in (storage, expected):
        target[1] = np.array([7.0])
    _store(storage, 1, np.array([7.0]))
    np.testing.assert_array_equal(storage, expected)
    storage, expected = np.zeros((2, 3, 4)), np.zeros((2, 3, 4))
    for index, value in ((0, np.arange(4.0).reshape(1, 4)), (1, np.arange(3.0).reshape(3, 1)), (1, np.array([[5.0]]))):
        _store(storage, index, value)
        expected[index] = value
        np.testing.assert_array_equal(storage, expected)
    # a value that is its own row's first element, broadcast: read whole before it is overwritten
    _store(storage, 0, storage[0][:1, :1])
    expected[0] = expected[0][:1, :1].copy()
    np.testing.assert_array_equal(storage, expected)
    # a broadcast value inside its row, past the row's first line: only the row's whole extent (not the value's
    # shape) shows the overlap, and line 2 reads what line 1 wrote if it is missed
    grid, expected_grid = np.arange(24.0).reshape(2, 4, 3), np.arange(24.0).reshape(2, 4, 3)
    _store(grid, 1, grid[1][1:, :1].T)
    expected_grid[1] = expected_grid[1][1:, :1].T.copy()
    np.testing.assert_array_equal(grid, expected_grid)
    block, expected_block = np.zeros((2, 2, 3, 2)), np.zeros((2, 2, 3, 2))  # more dimensions
    _store(block, 1, np.arange(4.0).reshape(2, 1, 2))
    expected_block[1] = np.arange(4.0).reshape(2, 1, 2)
    np.testing.assert_array_equal(block, expected_block)
    _store(np.zeros((2, 0)), 1, np.ones(1))  # an empty row takes a broadcast value, as in NumPy
    with pytest.raises(ValueError, match="does not have the shape of its output's storage row"):
        _store(np.zeros((2, 3)), 0, np.ones(2))
    with pytest.raises(ValueError, match="does not have the shape of its output's storage row"):
        _store(np.zeros((2, 1)), 0, np.ones(3))  # the row's axis of length 1 does not broadcast


def test_a_step_returning_a_row_of_length_one_for_a_longer_state_gives_vanillas_values():
    # The step returns a row of length k = 1 for a state of length 3: every linker of vanilla broadcasts it
    def build():
        k, x0 = pytensor.tensor.iscalar("k"), pytensor.tensor.dvector("x0")
        states = pytensor.scan(lambda x_tm1, k: x_tm1[:k] + 1.0, outputs_info=[x0], non_sequences=[k], n_steps=3, return_updates=False)
        return [x0, k], states

    values = [np.array([1.0, 2.0, 3.0]), 1]
    expected = vanilla_values(build, values, mode="NUMBA")
    np.testing.assert_array_equal(expected, [[2.0] * 3, [3.0] * 3, [4.0] * 3])
    inputs, outputs = build()
    np.testing.assert_array_equal(pytensor.function(inputs, outputs, mode="NUMBA")(*values), expected)


_LOOPS = textwrap.dedent(
    """
    import numpy as np, pytensor, pytensor.tensor as pt
    from pytensor.scan.utils import until
    
    def loops():
        # loops of every storage kind PyTensor's Numba Scan writes rows of
        x, h0, m0, v0 = pt.dmatrix("x"), pt.dvector("h0"), pt.dtensor3("m0"), pt.dvector("v0")
        sit_sot = pytensor.scan(lambda xt, h: pt.tanh(xt + h[::-1] * 0.5), sequences=x, outputs_info=h0, return_updates=False)
        mit_sot = pytensor.scan(
            lambda a, b: a * 0.5 + b.T @ b[:, :1].repeat(2, axis=1) * 0.1,
            outputs_info=[{"initial": m0, "taps": [-2, -1]}], n_steps=4, return_updates=False,
        )
        nit_sot = pytensor.scan(lambda xt: pt.exp(xt) * xt.sum(), sequences=x, return_updates=False)
        reversed_state = pytensor.scan(lambda v: v[::-1] + 1.0, outputs_info=v0, n_steps=5, return_updates=False)
        while_loop = pytensor.scan(lambda v: (v * 2.0, until(pt.sum(v) > 40.0)), outputs_info=v0, n_steps=20, return_updates=False)
        return [x, h0, m0, v0], [sit_sot, mit_sot, nit_sot, reversed_state[-1], while_loop]

    def values():
        rng = np.random.default_rng(0)
        return [rng.normal(size=(6, 2)), np.arange(2.0), rng.normal(size=(2, 2, 2)), np.array([1.0, 2.0, 3.0])]
    """
)

_CHILD = _LOOPS + textwrap.dedent(
    """
    import json, re
    import innergraph
    from numba.core import event
    from pytensor.link.numba.dispatch import scan as numba_scan
    from innergraph.backends.numba_link import final_function
    
    # children.WATCH: compiled (what Numba compiles), dispatchers(root), linked(dispatcher)
    sources, compile_src = [], numba_scan.compile_numba_function_src

    def record(src, *args, **kwargs):
        sources.append(src)
        return compile_src(src, *args, **kwargs)

    numba_scan.compile_numba_function_src = record  # scan_rows_by_loop wraps what it finds there
    inputs, outputs = loops()
    # and innergraph's generated loop with its derivative (a vector state; its code stores no row by slice assignment)
    v0 = inputs[-1]
    grown = innergraph.while_loop(lambda v: pt.sum(v) < 40.0, lambda v: v * 2.0 + pt.sin(v), v0, max_steps=20)
    outputs += [grown, pytensor.grad(pt.sum(grown ** 2), v0)]
    fn = pytensor.function(inputs, outputs, mode="NUMBA")
    got = [a.tolist() for a in fn(*values())]
    python = pytensor.function([v0], outputs[-2:], mode=pytensor.compile.mode.Mode(linker="py", optimizer="fast_run"))
    got_python = [a.tolist() for a in python(values()[-1])]
    # PyTensor's Scans ("scan") and innergraph's generated loop ("innergraph_whileloop")
    loops = [d for d in dispatchers(final_function(fn.vm.jit_fn)) if d.py_func.__name__ in ("scan", "innergraph_whileloop")]
    print(json.dumps({"value": got, "python": got_python, "sources": [s for s in sources if "def scan(" in s],
                      "loops": sorted(d.py_func.__name__ for d in loops),
                      "linking_the_message": sum(any("raise_with_shape_context" in n for n in linked(d)) for d in loops)}))
    """
).replace("# children.WATCH: compiled (what Numba compiles), dispatchers(root), linked(dispatcher)\n", WATCH)


def _loops():
    namespace: dict = {}
    exec(_LOOPS, namespace)  # noqa: S102 -- the same loops built here and in the child
    return namespace["loops"](), namespace["values"]()


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """A fresh process's Numba function of the loops with innergraph (`_CHILD`), vanilla's sources and its values (Python linker)."""
    sources: list[str] = []
    compile_src = numba_scan.compile_numba_function_src

    def record(src, name, *args, **kwargs):
        sources.append(src)
        return compile_src(src, name, *args, **kwargs)

    (inputs, outputs), values = _loops()
    numba_scan.compile_numba_function_src = record  # type: ignore[assignment]
    try:
        with innergraph.uninstalled():
            pytensor.function(inputs, outputs, mode="NUMBA")  # vanilla's sources, not compiled by Numba (no call)
            reference = pytensor.function(inputs, outputs, mode=pytensor.compile.mode.Mode(linker="py", optimizer="fast_run"))
            expected = reference(*values)
    finally:
        numba_scan.compile_numba_function_src = compile_src
    return spawn(_CHILD, tmp_path_factory.mktemp("rows")), [s for s in sources if "def scan(" in s], expected


def test_every_row_store_of_pytensors_sources_becomes_a_store_row_call(compiled):
    child, vanilla, _ = compiled
    kinds = [kind for src in vanilla for kind in _ROW_STORE.findall(src)]
    assert {"sitsot", "mitsot", "nitsot"} <= set(kinds)  # vanilla merges the two loops over x: each kind is exercised
    for src in vanilla:  # an untraced state (the reversed one, read at its end) is reassigned, not stored: left as it is
        stores = _ROW_STORE.findall(src)
        rewritten = rows_by_loop(src)
        assert _ROW_STORE.findall(rewritten) == [] and rewritten.count("store_row(") == len(stores)
        # nothing else changed: the calls written back as stores give PyTensor's source again
        back = re.sub(r"store_row\((\w+_storage), ([^\n]+), (inner_out_\d+)\)", r"\1[\2] = \3", rewritten)
        assert back == src
    ours = child["sources"]
    assert all(_ROW_STORE.findall(src) == [] for src in ours) and sum(src.count("store_row(") for src in ours) >= 3


def _links(dispatcher, name):
    todo = [o.library for o in dispatcher.overloads.values()]
    while todo:
        library = todo.pop()
        if name in library.name:
            return True
        todo.extend(getattr(library, "_linking_libraries", ()))
    return False


def test_values_are_vanillas_and_no_compiled_loop_links_numbas_shape_message(compiled):
    child, _, expected = compiled
    for ours, theirs in zip(child["value"], [*expected, *child["python"]], strict=True):
        np.testing.assert_allclose(ours, theirs, rtol=1e-12, atol=1e-14)
    v = np.array([1.0, 2.0, 3.0])  # the while loop, in NumPy
    for _ in range(20):
        if v.sum() >= 40.0:
            break
        v = v * 2.0 + np.sin(v)
    np.testing.assert_allclose(child["value"][-2], v, rtol=1e-12)
    assert child["loops"].count("scan") >= 3 and "innergraph_whileloop" in child["loops"], child["loops"]
    assert child["linking_the_message"] == 0


def test_a_slice_assignment_of_an_array_links_numbas_shape_message():
    # the check above can fail: Numba's own row store links the message's code (`children.WATCH`'s `linked` reads the same)
    @numba.njit
    def slice_store(storage, value):
        storage[0] = value

    slice_store(np.zeros((2, 3)), np.ones(3))
    assert _links(slice_store, _SHAPE_MESSAGE)


def test_a_loop_with_its_rows_stored_by_a_loop_has_a_cache_key_of_its_own():
    # vanilla's entry (PyTensor's key, Numba's stores) is never served for innergraph's code, nor the other way
    from pytensor.scan.op import Scan

    from innergraph.backends.numba import funcify_scan_by_reference
    from innergraph.core.hooks import original

    with innergraph.uninstalled():
        (inputs, outputs), _ = _loops()
        fgraph = pytensor.function(inputs[:2], outputs[:1], mode=pytensor.compile.mode.Mode(linker="py", optimizer="fast_run")).maker.fgraph
    node = next(n for n in fgraph.apply_nodes if isinstance(n.op, Scan))
    _, theirs = original(numba_scan, "numba_funcify_Scan")(node.op, node=node)
    _, ours = funcify_scan_by_reference(node.op, node=node)
    assert theirs is not None and ours == rows_key(theirs) != theirs


def test_one_thread_at_a_time_swaps_pytensors_name_and_it_is_always_restored():
    # interleaved, the second thread would restore the first one's rewrite for good (vanilla's keys, innergraph's code)
    import threading

    from innergraph.backends.numba_rows import scan_rows_by_loop

    original = numba_scan.compile_numba_function_src
    entered, release, seen = threading.Event(), threading.Event(), []

    def first():
        with scan_rows_by_loop():
            entered.set()
            release.wait(10)

    def second():
        entered.wait(10)
        with scan_rows_by_loop():
            seen.append(numba_scan.compile_numba_function_src)
            with scan_rows_by_loop():  # a nested loop's conversion, same thread
                seen.append(numba_scan.compile_numba_function_src)

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    entered.wait(10)
    threads[1].join(0.3)
    assert seen == []  # the second waits while the first holds the swap
    release.set()
    for thread in threads:
        thread.join(10)
    assert numba_scan.compile_numba_function_src is original
    assert len(seen) == 2 and seen[0] is not original and seen[1] is not seen[0]
