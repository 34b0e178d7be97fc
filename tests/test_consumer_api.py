"""The public contributor API: registration, running bodies, the worked example of design/contributing.md."""

import ast
import importlib.util
import pathlib
import sys
import warnings

from typing import Any

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.compile.mode import Mode, get_mode

import innergraph
from innergraph.consumer import Capabilities, Form, Meaning, Slot, SlotKind, compiled_function, register_consumer
from innergraph.core.graph import body_of, scope_toposort
from innergraph.protocol.slots import FORMS
from innergraph.testing import check_inner_graph_op
from innergraph.testing.kit import OpCase

ROOT = pathlib.Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "design" / "examples" / "repeat.py"


def _load_example():
    if "repeat_example" in sys.modules:
        return sys.modules["repeat_example"]
    spec = importlib.util.spec_from_file_location("repeat_example", EXAMPLE)
    assert spec is not None and spec.loader is not None, EXAMPLE
    module = importlib.util.module_from_spec(spec)
    sys.modules["repeat_example"] = module  # pickles of the example's Op find its class here
    spec.loader.exec_module(module)
    return module


example = _load_example()


def _dummy_form(**changes):
    base: dict[str, Any] = dict(
        n_bodies=1, param_order=("a",), output_order=("o",), arg_order=("a",), result_order=("o",),
        split=lambda node: None, make=lambda *args: None, functions=lambda node: [],
        kinds=(SlotKind("a", Meaning.INVARIANT), SlotKind("o", Meaning.OUTPUT)),
    )
    base.update(changes)
    return Form(**base)


class _Dummy:
    pass


def test_unknown_meaning_is_an_error_at_registration():
    with pytest.raises(ValueError, match=r"slot kind 'a' has unknown meaning 'argument'.*known meanings"):
        register_consumer(_Dummy, _dummy_form(kinds=(SlotKind("a", "argument"), SlotKind("o", Meaning.OUTPUT))))  # type: ignore[arg-type]  # the wrong meaning is the test
    with pytest.raises(ValueError, match=r"param_order names undeclared slot kinds \['b'\]"):
        register_consumer(_Dummy, _dummy_form(param_order=("b",)))
    with pytest.raises(ValueError, match="binds bodies"):
        register_consumer(_Dummy, _dummy_form(kinds=(SlotKind("a", Meaning.INVARIANT, (1,)), SlotKind("o", Meaning.OUTPUT))))
    with pytest.raises(ValueError, match="loop_key"):
        register_consumer(_Dummy, _dummy_form(loop_key=lambda sig: 0))
    assert _Dummy not in FORMS
    # meanings given as their values, as registration accepts (SlotKind's annotation says Meaning)
    form = register_consumer(_Dummy, _dummy_form(kinds=(SlotKind("a", "invariant"), SlotKind("o", "output"))))  # type: ignore[arg-type]
    try:
        assert form.kind("a").meaning is Meaning.INVARIANT  # given as its value
    finally:
        FORMS.pop(_Dummy)


def test_registration_survives_uninstall_install():
    x = pt.dscalar("x")
    try:
        innergraph.uninstall()
        innergraph.install()
    finally:
        if not innergraph.installed():
            innergraph.install()
    assert example.Repeat in FORMS
    (y, _dead) = example.repeat(3, lambda s, t: (s * 2.0, t + 1.0), [x, x])
    fn = pytensor.function([x], y, mode=Mode(linker="cvm", optimizer="fast_run"))
    (node,) = [n for n in fn.maker.fgraph.apply_nodes if isinstance(n.op, example.Repeat)]
    assert node.op.n_carry == 1  # dead-slot removal still applies
    assert fn(1.0) == 8.0


def test_a_slot_needs_one_output_type_per_output():
    x = pt.dvector("x")
    with pytest.raises(ValueError, match=r"slot of kind 'out': 2 outputs but 1 output_types"):
        Slot("out", outputs=((0, x), (1, x)), output_types=(x.type,))
    assert Slot("out", outputs=((0, x), (1, x)), output_types=(x.type, x.type)).output_types == (x.type, x.type)


def test_every_public_name_is_exported_and_jax_body_is_the_backends():
    import innergraph.consumer as api

    assert sorted(api.__all__) == sorted(n for n in dir(api) if not n.startswith("_") and n not in {"annotations", "Any", "Callable", "Sequence"})
    body = innergraph.body_of(innergraph.fold_function(innergraph.inner_graph(lambda v: pt.exp(v) * 2.0, [pt.dvector]).function))
    from innergraph.backends.jax import jax_body

    api.jax_body(body)  # the first conversion in a process registers rewrites (optdb's state changes): its key misses once
    assert api.jax_body(body) is jax_body(body)  # one function per body, whichever name made it
    np.testing.assert_allclose(np.asarray(api.jax_body(body)(np.array([0.0, 1.0]))[0]), [2.0, 2 * np.e])


def test_compiled_function_validates_its_inputs_unless_trusted():
    v = pt.dvector("v")
    body = body_of(innergraph.inner_graph(lambda u, k: (u * k).sum(), [v, pt.dscalar()]).function)
    checked = compiled_function(body, "cvm")
    assert checked(np.array([1.0, 2.0]), np.int64(3)) == [9.0]  # a NumPy integer for a float64 scalar param
    assert checked([1, 2], 3) == [9.0]
    with pytest.raises(TypeError, match=r"argument 0 .* param 0 of type Vector\(float64"):
        checked(np.ones((2, 2)), 3.0)
    with pytest.raises(TypeError, match="takes 2 arguments"):
        checked(np.ones(2))
    trusted = compiled_function(body, "cvm", trust_input=True)
    assert trusted is checked.function and trusted.trust_input


def test_no_generic_rewrite_reads_a_consumer_class_or_kind_name():
    generic = ["signature", "dce", "args", "licm", "merge_loops", "batch_loops", "forward", "untrace", "push_out", "simplify", "carry", "duplicates", "inline_args"]
    for name in generic:
        path = ROOT / "innergraph" / ("protocol" if name == "signature" else "rewriting") / f"{name}.py"
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                assert not node.module.startswith(("innergraph.ops", "innergraph.lifting.rules", "innergraph.builders")), (name, node.module)
        names = {"scan", "call", "ifelse", "loop", "seq", "non_seq", "sit_sot", "mit_sot", "nit_sot", "untraced", "mit_mot", "arg", "then_arg", "else_arg", "out", "until"}
        for node in ast.walk(tree):  # no comparison with a consumer's or a kind's name
            if isinstance(node, ast.Compare):
                literals = {c.value for c in ast.walk(node) if isinstance(c, ast.Constant) and isinstance(c.value, str)}
                assert not literals & names, (name, ast.unparse(node))


def _imported_modules(path):
    """Every module ``path`` imports, at top level or inside a function."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def test_no_consumer_imports_convert_and_the_conversion_engine_knows_no_consumer():
    """The convert.py <-> ops/scan.py cycle (issue 23 item 1) stays split: consumers lift graphs through
    innergraph.protocol.conversion, which imports no consumer, builder or convert."""
    for path in sorted((ROOT / "innergraph" / "ops").glob("*.py")):
        assert "innergraph.lifting.rules" not in _imported_modules(path), path.name
    engine = _imported_modules(ROOT / "innergraph" / "protocol" / "conversion.py")
    assert not {m for m in engine if m.startswith(("innergraph.ops", "innergraph.lifting.rules", "innergraph.builders"))}
    signature = _imported_modules(ROOT / "innergraph" / "protocol" / "signature.py")
    assert not {m for m in signature if m.startswith(("innergraph.ops", "innergraph.lifting.rules", "innergraph.builders", "innergraph.loops"))}


# --- the worked example of design/contributing.md -----------------------------------------------


def test_worked_example_is_the_file_and_short():
    doc = (ROOT / "design" / "contributing.md").read_text()
    block = doc.split("```python\n# design/examples/repeat.py\n", 1)[1].split("```", 1)[0]
    assert block == EXAMPLE.read_text()
    assert len(EXAMPLE.read_text().splitlines()) <= 65  # README: a 64-line worked example


@pytest.mark.parametrize("linker", ["py", "cvm", "numba"])
def test_worked_example_passes_check_inner_graph_op(linker):
    case = OpCase(
        build=lambda bodies, args: example.repeat(3, bodies[0], [args[0]])[0],
        arg_types=[pt.dvector, pt.dscalar],
        bodies=[lambda s: s * 2.0 + 1.0],
        rewritten=[lambda s: (s * 2.0 + 1.0) * 1.0],
        changed=[lambda s: s * 3.0 + 1.0],
        reference=lambda args: pytensor.scan(lambda s: s * 2.0 + 1.0, outputs_info=[args[0]], n_steps=3, return_updates=False)[-1],
        sample=lambda rng: [rng.normal(size=3), 0.5],
        )
    mode = get_mode("NUMBA") if linker == "numba" else Mode(linker=linker, optimizer="fast_run")
    with warnings.catch_warnings():
        warnings.filterwarnings("error", "Numba will use object mode")  # its Numba code is generated (Iterate)
        check_inner_graph_op(case, mode=mode)


def test_the_worked_examples_shape_is_inferred_without_running_it():
    from pytensor.graph.fg import FunctionGraph
    from pytensor.graph.traversal import ancestors
    from pytensor.tensor.rewriting.shape import ShapeFeature

    x = pt.dvector("x")
    (out,) = example.repeat(3, lambda s: s * 2.0 + 1.0, [x])
    fgraph = FunctionGraph([x], [out], clone=False, features=[ShapeFeature()])
    (length,) = fgraph.shape_feature.shape_tuple(out)
    assert out not in set(ancestors([length]))  # the shape does not read the loop's result


def test_graph_stats_counts_a_consumer_without_a_kind():
    """A registered consumer whose class sets no ``kind`` is ``"other"``, its bodies counted (law 4 reads them)."""
    x = pt.dvector("x")
    fn = pytensor.function([x], example.repeat(3, lambda s: s * 2.0 + 1.0, [x])[0], mode=Mode(linker="py", optimizer="fast_run"))
    stats = innergraph.graph_stats(fn)
    assert not hasattr(example.Repeat, "kind") and stats["consumers"].get("other") == 1 and stats["bodies"] == 1, stats


@pytest.fixture(scope="module", params=["py", "cvm", "numba"])
def example_function(request):
    x, u, a, n = pt.dvector("x"), pt.dvector("u"), pt.dscalar("a"), pt.lscalar("n")
    b1, b2 = pt.exp(a) + 1.0, pt.exp(a) + 1.0  # two captured arguments, one variable once merged
    # a dead carry (t); a pass-through carry (k: an argument once forwarded, so cosh(k) is
    # invariant work to hoist); and a twin (alpha-equivalent, another initial value) to merge with
    y, _k, _t = example.repeat(n, lambda s, k, t: (s * pt.cosh(k) + b1 + b2, k, t + 1.0), [x, a, x])
    twin, _ = example.repeat(n, lambda s, k: (s * pt.cosh(k) + b1 + b2, k), [u, a])
    mode = get_mode("NUMBA") if request.param == "numba" else Mode(linker=request.param, optimizer="fast_run")
    with warnings.catch_warnings():
        warnings.filterwarnings("error", "Numba will use object mode")  # its Numba code is generated (Iterate)
        fn = pytensor.function([x, u, a, n], [y, twin], mode=mode)
    return request.param, fn


def test_worked_example_gets_every_generic_rewrite(example_function):
    linker, fn = example_function
    (node,) = [n for n in fn.maker.fgraph.apply_nodes if isinstance(n.op, example.Repeat)]  # twins merged
    assert node.op.n_carry == 2, linker  # x's and u's carries; the dead t carry is gone
    args = node.inputs[2 + node.op.n_carry :]
    ops = [type(getattr(n.op, "scalar_op", n.op)).__name__ for n in scope_toposort(body_of(node.inputs[0]).outputs)]
    assert "Cosh" not in ops, (linker, ops)  # hoisted
    assert len(args) == len({id(v) for v in args}) and len(args) <= 2, (linker, args)  # duplicates merged
    xv, uv = np.array([1.0, 2.0]), np.array([-1.0])
    b = 2 * (np.exp(0.3) + 1.0)
    want_x, want_u = xv.copy(), uv.copy()
    for _ in range(4):
        want_x, want_u = want_x * np.cosh(0.3) + b, want_u * np.cosh(0.3) + b
    got = fn(xv, uv, 0.3, 4)
    np.testing.assert_allclose(got[0], want_x, rtol=1e-12)
    np.testing.assert_allclose(got[1], want_u, rtol=1e-12)
