"""The hooks in PyTensor's files: each returns what PyTensor computed until innergraph is enabled.

With this step PyTensor's linker, printing, pickling, DebugMode, Scan's gradient,
import machinery and ``FunctionMaker.prepare_fgraph`` call into
``pytensor.innergraph``; nothing enables it yet, so each call returns PyTensor's own
result without importing the module it names.
"""

import pickle
import sys
from io import StringIO

import numpy as np
import pytest

import pytensor
import pytensor.tensor as pt
from pytensor.compile.io import In, Out
from pytensor.compile.mode import get_default_mode
from pytensor.graph.basic import equal_computations
from pytensor.graph.fg import FunctionGraph
from pytensor.innergraph.core.hooks import call_hook, hook, installed
from pytensor.innergraph.patching.rewritten_key import graph_part


#: From the last step on, PyTensor enables innergraph on import and the hooks run.
before_enabling = pytest.mark.skipif(
    installed(), reason="innergraph is enabled: its hooks run (the last step)"
)


def loaded_hook_modules():
    return sorted(
        m for m in sys.modules if m.startswith("pytensor.innergraph.patching")
    )


@before_enabling
def test_a_hook_returns_pytensors_result_and_imports_nothing_until_enabled():
    sentinel = object()
    name = "pytensor.innergraph.patching.not_a_module"
    assert call_hook(name, "anything", sentinel, 1, 2) is sentinel
    assert hook(name, "anything", sentinel) is sentinel
    assert name not in sys.modules


def scan_product_and_gradient():
    x = pt.dvector("x")
    trace = pytensor.scan(
        lambda v, acc: acc * v,
        sequences=[x],
        outputs_info=[pt.ones(())],
        return_updates=False,
    )
    total = trace[-1]
    return pytensor.function([x], [total, pytensor.grad(total, x)])


def test_a_scan_compiles_and_differentiates():
    x_val = np.array([1.5, 2.0, 3.0])
    value, gradient = scan_product_and_gradient()(x_val)
    np.testing.assert_allclose(value, np.prod(x_val))
    np.testing.assert_allclose(gradient, np.prod(x_val) / x_val)


@before_enabling
def test_compiling_and_printing_go_as_released_and_import_no_hook_module():
    before = loaded_hook_modules()
    fn = scan_product_and_gradient()
    printed = StringIO()
    pytensor.dprint(fn, file=printed)
    assert "Scan" in printed.getvalue()
    assert "innergraph" not in printed.getvalue().lower()
    assert loaded_hook_modules() == before


def test_a_function_graph_pickles_as_released():
    x = pt.dvector("x")
    fgraph = FunctionGraph([x], [pt.exp(x).sum()], clone=True)
    loaded = pickle.loads(pickle.dumps(fgraph))
    assert equal_computations(
        loaded.outputs, fgraph.outputs, loaded.inputs, fgraph.inputs
    )


def part(scale):
    x = pt.dvector("x")
    fgraph = FunctionGraph([x], [pt.exp(x * scale).sum()], clone=True)
    specs = ([In(v) for v in fgraph.inputs], [Out(v) for v in fgraph.outputs])
    return graph_part(fgraph, *specs, [], get_default_mode())


def test_the_rewritten_graphs_store_keys_a_graph_by_its_structure_and_constants():
    first, again, other = part(2.0), part(2.0), part(3.0)
    assert first is not None
    assert first.digest == again.digest  # the same graph built twice
    assert first.digest != other.digest  # another constant
