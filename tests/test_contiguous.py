"""``innergraph_contiguous``: strided constants are copied, so Numba can cache the function.

A folded ``c[::-1]`` is a view; Numba cannot cache a function that embeds one
(issue 21: PyMC's CustomDist GARCH gradient was compiled again in every process).
"""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.compile.mode import Mode
from pytensor.graph.basic import Constant
from pytensor.graph.fg import FunctionGraph

from innergraph.rewriting.contiguous import NUMBA_EMBED_LIMIT, contiguous_constants, is_strided_constant

SCRIPT = Path(__file__).parent / "scripts" / "numba_compilations.py"


def _graph():
    x = pt.dvector("x")
    c = pt.constant(np.linspace(0.5, 2.0, 64))
    return x, x * c[::-1]


def _constants(fn):
    return [v for node in fn.maker.fgraph.apply_nodes for v in node.inputs if isinstance(v, Constant)]


@pytest.fixture(scope="module")
def compiled():
    x, y = _graph()
    mode = Mode(linker="numba", optimizer="fast_run")
    return {
        "vanilla": pytensor.function([x], y, mode=mode.excluding("innergraph")),
        "innergraph": pytensor.function([x], y, mode=mode),
    }


def test_vanilla_keeps_a_strided_constant(compiled):
    """The premise: PyTensor's constant folding of ``c[::-1]`` leaves a view in the graph."""
    assert any(is_strided_constant(v) for v in _constants(compiled["vanilla"]))


def test_innergraph_leaves_only_contiguous_constants_and_equal_values(compiled):
    constants = _constants(compiled["innergraph"])
    assert constants and not any(is_strided_constant(v) for v in constants)
    value = np.arange(64.0)
    np.testing.assert_array_equal(compiled["innergraph"](value), compiled["vanilla"](value))


@pytest.mark.parametrize("linker", ["py", "cvm"])
def test_other_linkers_keep_the_strided_constant_as_vanilla_does(linker):
    # only Numba's cache needs the copy: elsewhere it would cost memory for nothing
    x, y = _graph()
    mode = Mode(linker=linker, optimizer="fast_run")
    ours, ref = pytensor.function([x], y, mode=mode), pytensor.function([x], y, mode=mode.excluding("innergraph"))
    assert any(is_strided_constant(v) for v in _constants(ours))
    assert [str(n.op) for n in ours.maker.fgraph.toposort()] == [str(n.op) for n in ref.maker.fgraph.toposort()]
    np.testing.assert_array_equal(ours(np.arange(64.0)), ref(np.arange(64.0)))


def test_contiguous_constants_replaces_each_once_and_keeps_types():
    c = pt.constant(np.arange(12.0).reshape(3, 4)[:, ::2])
    x = pt.dmatrix("x")
    fgraph = FunctionGraph([x], [x + c, x * c, c], clone=False)
    assert contiguous_constants(fgraph) == 1
    (new,) = {v for node in fgraph.apply_nodes for v in node.inputs if isinstance(v, Constant)}
    assert fgraph.outputs[2] is new and new.type == c.type
    assert new.data.flags.c_contiguous
    np.testing.assert_array_equal(new.data, c.data)
    assert contiguous_constants(fgraph) == 0


def _compilations(size, *excluded):
    command = [sys.executable, str(SCRIPT), str(size), *excluded]
    count, total = subprocess.run(command, capture_output=True, text=True, timeout=900, check=True).stdout.split()
    return int(count), float(total)


@pytest.mark.parametrize(
    "size, excluded, cached",
    [
        (64, [], True),
        # Without the pass, the same kind of graph (its own constant, so its own cache
        # entry) is compiled again in every process: what the test detects.
        (61, ["innergraph_contiguous"], False),
    ],
)
def test_a_second_process_loads_the_function_from_numbas_cache(size, excluded, cached):
    first = _compilations(size, *excluded)  # fills the disk cache (or finds it filled)
    count, total = _compilations(size, *excluded)
    assert (count == 0) is cached, count
    assert total == first[1] == pytest.approx(np.arange(size) @ np.linspace(0.5, 2.0, size)[::-1])


def test_contiguous_constants_leaves_a_constant_numba_would_not_embed():
    """Over Numba's embedding limit a copy buys no caching; a broadcast view would be materialized."""
    base = np.arange(1000.0)
    large = pt.constant(np.broadcast_to(base, (NUMBA_EMBED_LIMIT // base.nbytes + 1, base.size)))
    small = pt.constant(np.arange(12.0).reshape(3, 4)[:, ::2])
    x, m = pt.dvector("x"), pt.dmatrix("m")
    fgraph = FunctionGraph([x, m], [large * x, m + small], clone=False)
    assert contiguous_constants(fgraph) == 1
    constants = {v for node in fgraph.apply_nodes for v in node.inputs if isinstance(v, Constant)}
    assert large in constants and small not in constants
    assert np.shares_memory(large.data, base) and large.data.strides[0] == 0


@pytest.mark.parametrize("linker", ["py", "cvm", "numba"])
def test_a_large_broadcast_constant_is_not_copied(linker):
    base = np.arange(1000.0)
    data = np.broadcast_to(base, (500, 1000))  # 4 MB if materialized
    x = pt.dvector("x")
    y = (pt.constant(data) * x[:, None]).sum()
    mode = Mode(linker=linker, optimizer="fast_run")
    vanilla = pytensor.function([x], y, mode=mode.excluding("innergraph"))
    fn = pytensor.function([x], y, mode=mode)
    (c,) = [v for v in _constants(fn) if v.ndim == 2]
    assert np.shares_memory(c.data, base), "the broadcast constant was copied"
    value = np.linspace(0.0, 1.0, 500)
    np.testing.assert_array_equal(fn(value), vanilla(value))
    np.testing.assert_allclose(fn(value), value.sum() * base.sum(), atol=1e-6)
