"""What the `ifelse` benchmark case compiles: the in-graph conditionals receive their large constants
as arguments, large constants are compared by identity in one conversion; values against vanilla
PyTensor (uninstalled; its own ``LazyIfElse`` under Numba and JAX) under py, cvm, Numba and JAX."""

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.compile.mode import Mode
from pytensor.graph.basic import Constant
from pytensor.tensor.variable import TensorConstant

import innergraph
from innergraph_bench.cases import ifelse_heavy
from innergraph.core.fold import folded_bodies
from innergraph.core.graph import scope_toposort
from innergraph.core.instantiate import is_large_constant
from innergraph.ops.ifelse import IfElse
from typed import recording


def mode(linker):
    return Mode(linker=linker, optimizer="fast_run")


@pytest.fixture(scope="module")
def heavy():
    """The ``ifelse`` case at 100 x 100: four in-graph conditionals on one condition, large constants in the else branches."""
    return ifelse_heavy(size=100)


@pytest.fixture(scope="module")
def compiled_numba(heavy):
    inputs, outputs = heavy.build("innergraph")
    return pytensor.function(inputs, outputs, mode=mode("numba"))


def test_the_conditional_receives_its_large_constants_as_arguments(compiled_numba):
    fn = compiled_numba
    nodes = [n for n in fn.maker.fgraph.apply_nodes if isinstance(n.op, IfElse)]
    assert len(nodes) == 4 and all(len([v for v in n.inputs if is_large_constant(v)]) == 1 for n in nodes)
    for _, body in folded_bodies(fn.maker.fgraph.outputs):
        assert not any(is_large_constant(v) for n in scope_toposort(body.outputs) for v in n.inputs)


@pytest.mark.parametrize("linker", ["py", "cvm", "numba", "jax"])
def test_values_equal_vanilla(heavy, compiled_numba, linker):
    inputs, outputs = heavy.build("innergraph")
    fn = compiled_numba if linker == "numba" else pytensor.function(inputs, outputs, mode=mode(linker))
    with innergraph.uninstalled():
        inputs, outputs = heavy.build("vanilla")
        ref = pytensor.function(inputs, outputs, mode=mode(linker))
    for x in (1.5, -0.5):  # the cheap branch, then the solves: the same numbers whichever runs
        values = [*heavy.values[:2], np.float64(x)]
        np.testing.assert_array_equal(fn(*values)[0], ref(*values)[0])


def test_a_large_constant_is_compared_by_identity(monkeypatch):
    from innergraph.backends.numba_code import _constant_key

    big = pt.constant(np.arange(100.0))
    hashed: list = []
    signature = TensorConstant.signature
    monkeypatch.setattr(TensorConstant, "signature", recording(hashed, signature))
    assert _constant_key(big) == ("same", big) and _constant_key(big) != _constant_key(pt.constant(np.arange(100.0)))
    assert hashed == []  # its data was never summed or hashed
    assert _constant_key(pt.constant(2.0)) == _constant_key(pt.constant(2.0))  # small ones by value
    assert _constant_key(pt.dscalar()) is None


def test_equal_outer_nodes_over_one_large_constant_convert_once(monkeypatch):
    import innergraph.backends.numba_code as code

    converted: list = []
    convert = code.numba_funcify_ensure_cache
    monkeypatch.setattr(code, "numba_funcify_ensure_cache", recording(converted, convert))
    big = np.arange(100.0)
    xs = [pt.dvector(f"x{i}") for i in range(3)]
    outs = [pt.cumsum(pt.join(0, x, pt.constant(big))) for x in xs]  # three Joins reading one large constant
    fn = pytensor.function(xs, outs, mode=mode("numba"))
    joins = [n for n in fn.maker.fgraph.apply_nodes if type(n.op).__name__ == "Join"]
    assert len(joins) == 3 and len({n.inputs[-1] for n in joins if isinstance(n.inputs[-1], Constant)}) == 1
    assert len([op for op in converted if type(op).__name__ == "Join"]) == 1
    values = [np.arange(float(i + 1)) for i in range(3)]
    for got, v in zip(fn(*values), values, strict=True):
        np.testing.assert_array_equal(got, np.cumsum(np.concatenate([v, big])))
