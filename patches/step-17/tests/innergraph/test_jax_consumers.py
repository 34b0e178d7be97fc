"""The consumers under JAX, and PyTensor's while Scan, which PyTensor's JAX conversion refuses.

The conversions are registered with ``jax_funcify`` once the last step enables innergraph;
here each node is converted by them directly and run as the JAX linker runs it, against
the py linker's numbers for the same node.
"""

import numpy as np
import pytest

import pytensor
import pytensor.tensor as pt
from pytensor.compile.mode import Mode
from pytensor.graph.traversal import ancestors
from pytensor.innergraph.core.graph import is_function
from pytensor.innergraph.core.hooks import installed
from pytensor.innergraph.loops import fori_loop, while_loop
from pytensor.innergraph.ops.call import call
from pytensor.innergraph.ops.ifelse import ifelse
from pytensor.scan.op import Scan
from pytensor.scan.utils import until


jax = pytest.importorskip("jax")

from pytensor.innergraph.backends.jax import jax_funcify_native_scan  # noqa: E402
from pytensor.innergraph.backends.jax_generated import jax_funcify_generated  # noqa: E402
from pytensor.link.jax.dispatch import jax_funcify  # noqa: E402


PY = Mode(linker="py", optimizer="fast_run")


def node_values(inputs, values, node):
    """The py linker's values of ``node``'s inputs (None for a body: a consumer reads it from the node) and outputs."""
    evaluate = pytensor.function(
        inputs,
        [i for i in node.inputs if not is_function(i)] + node.outputs,
        mode=PY,
        on_unused_input="ignore",
    )
    computed = iter(evaluate(*values))
    args = [None if is_function(i) else next(computed) for i in node.inputs]
    return args, list(computed)


@pytest.mark.parametrize("c_val, n_val", [(0.5, 3), (2.0, 0), (1.0, 10)])
def test_calls_conditionals_and_loops_give_the_py_linkers_numbers_under_jit(
    c_val, n_val
):
    x, c, n = pt.dvector("x"), pt.dscalar("c"), pt.lscalar("n")
    outputs = {
        "call": call(lambda a, b: a * b + pt.exp(a), x, c),
        "conditional": ifelse(c < 1.0, x * 2.0, x - c),
        "fori loop": fori_loop(0, n, lambda i, s: s * c + pt.cast(i, "float64"), x),
        "while loop": while_loop(
            lambda s: s.sum() < 40.0, lambda s: s * 2.0 + c, x, max_steps=n
        ),
    }
    values = [np.array([0.5, 1.0, 2.0]), c_val, n_val]
    for what, out in outputs.items():
        node = out.owner
        args, expected = node_values([x, c, n], values, node)
        got = jax.jit(jax_funcify_generated(node.op, node))(*args)
        got = list(got) if isinstance(got, tuple) else [got]
        assert len(got) == len(expected), what
        for ours, theirs in zip(got, expected, strict=True):
            np.testing.assert_allclose(ours, theirs, rtol=1e-14, err_msg=what)


def test_a_while_scan_pytensor_refuses_runs_as_its_runtime_runs_it():
    x = pt.dvector("x")
    trace = pytensor.scan(
        lambda s: (s * 2.0, until(s.sum() > 20.0)),
        outputs_info=[x],
        n_steps=10,
        return_updates=False,
    )
    [node] = {
        v.owner for v in ancestors([trace]) if v.owner and isinstance(v.owner.op, Scan)
    }
    # the last step enables innergraph: PyTensor's conversion hands a while Scan to this one
    if installed():
        assert jax_funcify(node.op, node=node) is not None
    else:
        with pytest.raises(NotImplementedError, match="While Scan"):
            jax_funcify(node.op, node=node)
    for start in ([0.5, 1.0, 2.0], [30.0, 0.0, 0.0]):
        args, expected = node_values([x], [np.array(start)], node)
        got = jax_funcify_native_scan(node.op, node)(*args)
        got = list(got) if isinstance(got, tuple | list) else [got]
        assert [np.shape(g) for g in got] == [np.shape(e) for e in expected]
        for ours, theirs in zip(got, expected, strict=True):
            np.testing.assert_allclose(ours, theirs, rtol=1e-14)
