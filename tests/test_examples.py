"""The worked examples of ``design/examples/``: the map (per-step outputs, generated code only) and the fixed point.

Both are consumers written on ``innergraph.consumer`` only, with no backend code: their
Numba and JAX functions are generated from ``Iterate`` and their shapes come from the
declaration (neither defines ``infer_shape``).
"""

import pathlib
import sys
import warnings
from typing import Any

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.compile.mode import Mode, get_mode

from innergraph.consumer import body_ops
from innergraph.testing import OpCase, check_inner_graph_op

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # design.examples.*: pickles find the Ops by module name
from design.examples.fixed_point import FixedPoint, fixed_point
from design.examples.map_rows import MapRows, map_rows

LINKERS = ["py", "cvm", "numba", "jax"]


def _mode(linker):
    return get_mode(linker.upper()) if linker in ("numba", "jax") else Mode(linker=linker, optimizer="fast_run")


def _compiled(inputs, outputs, linker):
    with warnings.catch_warnings():
        warnings.filterwarnings("error", "Numba will use object mode")  # generated from Iterate, never object mode
        return pytensor.function(inputs, outputs, mode=_mode(linker))


def test_the_map_has_no_backend_code():
    text = (ROOT / "design" / "examples" / "map_rows.py").read_text()
    backend = ["register_numba", "numba_function", "numba_body_code", "jax_funcify", "jax_body", "load_on_link", "import numba", "import jax", "def infer_shape"]
    assert not [name for name in backend if name in text]
    assert len(text.splitlines()) <= 75


xs, c = pt.dmatrix("xs"), pt.dvector("c")
XV, CV = np.random.default_rng(0).normal(size=(5, 3)), np.array([0.5, -1.0, 2.0])


@pytest.fixture(scope="module", params=LINKERS)
def map_function(request):
    ys = map_rows(lambda r, c: [pt.sin(r) * c + pt.cosh(c), (r * c).sum()], xs, c)
    return request.param, _compiled([xs, c], ys, request.param)


def test_map_values_under_every_linker(map_function):
    linker, fn = map_function
    got = fn(XV, CV)
    np.testing.assert_allclose(got[0], np.sin(XV) * CV + np.cosh(CV), rtol=1e-12, err_msg=linker)
    np.testing.assert_allclose(got[1], (XV * CV).sum(axis=1), rtol=1e-12, err_msg=linker)
    empty = fn(np.zeros((0, 3)), CV)
    assert empty[0].shape[0] == 0 and empty[1].shape == (0,), (linker, [e.shape for e in empty])


def test_map_gets_the_generic_rewrites(map_function):
    """Loop-invariant ``cosh(c)`` leaves the body (or the whole row-wise map is pushed out of the loop)."""
    linker, fn = map_function
    nodes = [n for n in fn.maker.fgraph.apply_nodes if isinstance(n.op, MapRows)]
    for node in nodes:
        assert not any(isinstance(op, pytensor.scalar.Cosh) for op in body_ops(node.inputs[0])), linker


def test_maps_over_alpha_equivalent_bodies_merge():
    a = map_rows(lambda r: pt.exp(r) * 2.0, xs)
    b = map_rows(lambda q: pt.exp(q) * 2.0, xs)
    fn = _compiled([xs], [a, b], "numba")
    assert len([n for n in fn.maker.fgraph.apply_nodes if isinstance(n.op, MapRows)]) <= 1
    got = fn(XV)
    np.testing.assert_allclose(got[0], np.exp(XV) * 2.0)
    np.testing.assert_allclose(got[1], np.exp(XV) * 2.0)


@pytest.mark.parametrize("linker", ["cvm", "numba"])
def test_map_passes_the_kit(linker):
    case = OpCase(
        build=lambda bodies, args: map_rows(bodies[0], args[0], args[1]),
        arg_types=[pt.dmatrix, pt.dvector],
        bodies=[lambda r, c: pt.tanh(r) * c],
        rewritten=[lambda r, c: (pt.tanh(r) * c) * 1.0 + 0.0],
        changed=[lambda r, c: pt.tanh(r) + c],
        reference=lambda args: pytensor.scan(lambda r, c: pt.tanh(r) * c, sequences=[args[0]], non_sequences=[args[1]], return_updates=False),
        sample=lambda rng: [rng.normal(size=(4, 3)), rng.normal(size=3)],
    )
    check_inner_graph_op(case, mode=_mode(linker))


@pytest.fixture(scope="module", params=LINKERS)
def fixed_point_function(request):
    x0, a, b = pt.dvector("x0"), pt.dscalar("a"), pt.dvector("b")
    x = fixed_point(lambda x, a, b: a * x + b, x0, a, b)
    cost = (x * np.arange(3.0)).sum()
    grads: Any = pytensor.grad(cost, [a, b])
    return request.param, _compiled([x0, a, b], [x, *grads], request.param)


def _fixed_point_reference(args: Any) -> Any:
    """``x* = b / (1 - a)`` (``x0`` enters with weight 0)."""
    return args[2] / (1 - args[1]) + 0 * args[0]


def test_fixed_point_and_its_implicit_gradient(fixed_point_function):
    """``x* = a x* + b`` is ``b / (1 - a)``; the gradients are the closed form's, from the implicit function theorem."""
    linker, fn = fixed_point_function
    av, bv, w = 0.3, np.array([1.0, 2.0, 3.0]), np.arange(3.0)
    x, ga, gb = fn(np.zeros(3), av, bv)
    np.testing.assert_allclose(x, bv / (1 - av), rtol=1e-10, err_msg=linker)
    np.testing.assert_allclose(ga, (w * bv).sum() / (1 - av) ** 2, rtol=1e-10, err_msg=linker)
    np.testing.assert_allclose(gb, w / (1 - av), rtol=1e-10, err_msg=linker)
    nodes = [n for n in fn.maker.fgraph.apply_nodes if isinstance(n.op, FixedPoint)]
    assert len(nodes) == 2, linker  # the forward loop and the adjoint's: no history stored, no unrolled scan


def test_fixed_point_passes_the_kit():
    case = OpCase(
        build=lambda bodies, args: fixed_point(bodies[0], args[0], args[1], args[2]),
        arg_types=[pt.dvector, pt.dscalar, pt.dvector],
        bodies=[lambda x, a, b: a * x + b],
        rewritten=[lambda x, a, b: (a * x + b) * 1.0],
        changed=[lambda x, a, b: a * x - b],
        reference=_fixed_point_reference,
        sample=lambda rng: [rng.normal(size=3), 0.4, rng.normal(size=3)],
        differentiable=[1, 2],
        shapes_inferred=False,  # ``a * x + b`` keeps x's shape only if b's matches: not provable, PyTensor reads it from x*
    )
    check_inner_graph_op(case, mode=Mode(linker="cvm", optimizer="fast_run"))


def test_declared_shapes_of_the_map_need_no_run():
    """The map's shape comes from its declaration (per-step output: its argument rows of the body's row shape)."""
    from pytensor.graph.fg import FunctionGraph
    from pytensor.graph.traversal import ancestors
    from pytensor.tensor.rewriting.shape import ShapeFeature

    ys = map_rows(lambda r, c: [pt.outer(r, c), r.sum()], xs, c)
    fgraph = FunctionGraph([xs, c], ys, clone=False, features=[ShapeFeature()])
    for y in ys:
        assert not set(ys) & set(ancestors(list(fgraph.shape_feature.shape_tuple(y))))
    shapes = pytensor.function([xs, c], [y.shape for y in ys], mode=_mode("py"))(XV, CV[:2])
    assert [tuple(s) for s in shapes] == [(5, 3, 2), (5,)]
