"""The consumers under Numba: generated code, bodies called by reference, numbers as arguments.

Importing ``pytensor.innergraph.backends.numba_generated`` registers the Numba conversion
of every consumer that declares its step semantics, so the graphs below compile with
PyTensor's Numba linker as they are. The linker's own changes (numbers passed as
arguments) wait for the last step; their function is called here as the linker will.
"""

import warnings

import numba
import numpy as np

import pytensor
import pytensor.innergraph.backends.numba_generated
import pytensor.tensor as pt
from pytensor.compile.mode import Mode
from pytensor.graph.fg import FunctionGraph
from pytensor.innergraph.backends.numba_link import outline_constants_for_link
from pytensor.innergraph.loops import fori_loop, while_loop
from pytensor.innergraph.ops.call import call
from pytensor.innergraph.ops.ifelse import ifelse
from pytensor.link.numba.dispatch.basic import numba_funcify_and_cache_key


NUMBA = Mode(linker="numba", optimizer="fast_run")
PY = Mode(linker="py", optimizer="fast_run")


def compiled(inputs, outputs):
    """The function under Numba, refusing PyTensor's fallback to object mode, and under the py linker."""
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*object mode.*")
        return pytensor.function(inputs, outputs, mode=NUMBA), pytensor.function(
            inputs, outputs, mode=PY
        )


def assert_same_numbers(numba_fn, py_fn, *args):
    got, expected = numba_fn(*args), py_fn(*args)
    assert len(got) == len(expected)
    for ours, theirs in zip(got, expected, strict=True):
        np.testing.assert_allclose(ours, theirs, rtol=1e-14)


def test_calls_conditionals_and_loops_give_the_py_linkers_numbers():
    x, c, n = pt.dvector("x"), pt.dscalar("c"), pt.lscalar("n")
    outputs = [
        call(lambda a, b: a * b + pt.exp(a), x, c),
        ifelse(c < 1.0, x * 2.0, x - c),
        fori_loop(0, n, lambda i, s: s * c + pt.cast(i, "float64"), x),
        while_loop(lambda s: s.sum() < 40.0, lambda s: s * 2.0 + c, x, max_steps=n),
    ]
    numba_fn, py_fn = compiled([x, c, n], outputs)
    x_val = np.array([0.5, 1.0, 2.0])
    for c_val, n_val in [(0.5, 3), (2.0, 0), (1.0, 10)]:
        assert_same_numbers(numba_fn, py_fn, x_val, c_val, n_val)
    values = numba_fn(x_val, 0.5, 3)
    np.testing.assert_allclose(values[1], 2 * x_val)  # the branch taken
    np.testing.assert_allclose(values[2], ((x_val * 0.5) * 0.5 + 1) * 0.5 + 2)


def step(a, B):
    y = pt.tanh(pt.dot(B, a)) * 1.5
    z = y / (1.0 + pt.abs(y).sum())
    w = pt.concatenate([z[1:], z[:1]])
    return w + pt.dot(B.T, z) * 0.5 + pt.max(w)


def dispatchers(root):
    """The Numba functions ``root`` calls, directly or through others, and itself."""
    seen, todo = {}, [root]
    while todo:
        dispatcher = todo.pop()
        if id(dispatcher) in seen or not hasattr(dispatcher, "py_func"):
            continue
        seen[id(dispatcher)] = dispatcher
        todo.extend(
            value
            for value in dispatcher.py_func.__globals__.values()
            if hasattr(value, "py_func")
        )
    return list(seen.values())


def linked(dispatcher):
    """The names of the libraries LLVM linked into ``dispatcher``'s code."""
    names, todo = set(), [o.library for o in dispatcher.overloads.values()]
    while todo:
        library = todo.pop()
        for inner in getattr(library, "_linking_libraries", ()):
            names.add(inner.name)
            todo.append(inner)
    return names


def test_a_large_body_is_compiled_once_and_called_by_reference():
    x, M = pt.dvector("x"), pt.dmatrix("M")
    numba_fn, py_fn = compiled([x, M], [call(step, x, M), call(step, x * 2.0, M)])
    rng = np.random.default_rng(0)
    assert_same_numbers(numba_fn, py_fn, rng.normal(size=3), rng.normal(size=(3, 3)))

    everything = dispatchers(numba_fn.vm.jit_fn)
    stubs = [d for d in everything if "BODY" in d.py_func.__globals__]
    assert len(stubs) >= 1
    [body] = {
        id(s.py_func.__globals__["BODY"]): s.py_func.__globals__["BODY"] for s in stubs
    }.values()
    body_libraries = {o.library.name for o in body.overloads.values()}
    assert body_libraries
    callers = [d for d in everything if d is not body]
    assert not body_libraries & set().union(*(linked(d) for d in callers))


def test_numbers_outlined_as_arguments_leave_the_code_and_its_key_unchanged():
    keys, outlined_keys = [], []
    for number in (1.5, 2.5):
        v = pt.dvector("v")
        fgraph = FunctionGraph([v], [pt.exp(v) * number + pt.cumsum(v)], clone=False)
        keys.append(numba_funcify_and_cache_key(fgraph)[1])
        outlined = outline_constants_for_link(fgraph, fgraph.toposort(), {})
        fn, key = numba_funcify_and_cache_key(
            outlined.fgraph, order=outlined.order, storage_map=outlined.storage_map
        )
        outlined_keys.append(key)
        assert len(outlined.fgraph.inputs) == 2 and len(fgraph.inputs) == 1
        [pool] = outlined.values
        np.testing.assert_array_equal(pool, [number])
        run = numba.njit(lambda a, p: fn(a, p))
        v_val = np.array([0.0, 1.0, -0.5])
        (value,) = run(v_val, pool)
        np.testing.assert_allclose(value, np.exp(v_val) * number + np.cumsum(v_val))
    assert keys[0] != keys[1]  # PyTensor's code holds the number
    assert outlined_keys[0] == outlined_keys[1]
