"""The final function's nodes compiled once as their own units and called by reference under Numba.

A function with a loop converts under innergraph with each node of its graph that computes an
array called through a pointer (`innergraph.backends.numba_reference.outer_node_by_reference`):
the final function's LLVM module holds none of their code. Each test reads fresh processes
(`_child`) on a compile directory of its own: one process compiles a function whose graph has a
loop, a check that can fail outside it and a product after it, and reports its values, what it
compiled and what the final function links.
"""

import textwrap

import numpy as np
import pytest

import pytensor.tensor as pt

from children import WATCH, spawn

from innergraph.backends import numba_reference
from innergraph.backends.numba_reference import _BODIES, outer_node_by_reference, outer_nodes, stable_types

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

_CHILD = textwrap.dedent(
    """
    import json, sys
    variant = sys.argv[1]
    import innergraph
    from innergraph.backends import numba_reference
    if variant == "linked":
        numba_reference.OUTER_NODES = False
    import numpy as np, pytensor, pytensor.tensor as pt
    from numba.core import event
    from pytensor.raise_op import Assert
    from innergraph.backends.numba_link import final_function

    # children.WATCH: compiled (what Numba compiles), dispatchers(root), linked(dispatcher)

    x, A = pt.dvector("x"), pt.dmatrix("A")
    checked = Assert("x left the box")(x, pt.all(pt.abs(x) < 50.0))
    A = pt.specify_shape(A, (None, 4))  # a None input (NoneTypeT: object's repr, an address), as PyMC's graphs have
    ys = pytensor.scan(lambda v, B: pt.tanh(B @ v) * 1.5 + v, outputs_info=[checked], non_sequences=[A], n_steps=5,
                       return_updates=False)
    out = pt.exp(ys[-1]).sum() + (A @ ys[-1]).max()
    fn = pytensor.function([x, A.owner.inputs[0]], [out, pytensor.grad(out, x)], mode="NUMBA")
    rng = np.random.default_rng(0)
    xv, Av = rng.normal(size=4), rng.normal(size=(4, 4))
    value = [np.asarray(v).tolist() for v in fn(xv, Av)]
    try:
        fn(xv + 100.0, Av)
        error = None
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
    final = final_function(fn.vm.jit_fn)
    referenced = [v for v in final.py_func.__globals__.values() if hasattr(getattr(v, "body", None), "py_func")]
    node_libraries = {id(o.library) for v in referenced for o in v.body.overloads.values()}
    loops = [d for d in dispatchers(final) if d.py_func.__name__ == "scan"]
    loop_libraries = {id(o.library) for d in loops for o in d.overloads.values()}
    in_final, todo = set(), [o.library for o in final.overloads.values()]
    while todo:  # the libraries linked into the final function's module (by identity: names repeat)
        for inner in getattr(todo.pop(), "_linking_libraries", ()):
            if id(inner) not in in_final:
                in_final.add(id(inner))
                todo.append(inner)
    print(json.dumps({"value": value, "error": error, "compiled": compiled, "referenced": len(referenced),
                      "node_libraries": len(node_libraries), "loop_libraries": len(loop_libraries),
                      "in_final": len((node_libraries | loop_libraries) & in_final)}))
    """
).replace("# children.WATCH: compiled (what Numba compiles), dispatchers(root), linked(dispatcher)\n", WATCH)


def _numpy(x, A):
    """The function's value and gradient with respect to ``x``, by NumPy (forward and reverse by hand)."""
    if not np.all(np.abs(x) < 50.0):
        raise AssertionError("x left the box")
    vs = [x]
    for _ in range(5):
        vs.append(np.tanh(A @ vs[-1]) * 1.5 + vs[-1])
    y = vs[-1]
    k = int(np.argmax(A @ y))
    value = np.exp(y).sum() + (A @ y)[k]
    g = np.exp(y) + A[k]
    for v in reversed(vs[:-1]):
        t = np.tanh(A @ v)
        g = A.T @ (g * 1.5 * (1.0 - t**2)) + g
    return value, g


@pytest.fixture(scope="module")
def cold(tmp_path_factory):
    """One cold process with the final function's nodes by reference and one with them linked, on compile directories of their own."""
    folders = {v: tmp_path_factory.mktemp(v) for v in ("reference", "linked")}
    return folders, {v: spawn(_CHILD, folder, v) for v, folder in folders.items()}


def test_values_and_errors_equal_numpys_either_way(cold):
    rng = np.random.default_rng(0)
    x, A = rng.normal(size=4), rng.normal(size=(4, 4))
    value, grad = _numpy(x, A)
    for variant, got in cold[1].items():
        np.testing.assert_allclose(got["value"][0], value, rtol=1e-12, err_msg=variant)
        np.testing.assert_allclose(got["value"][1], grad, rtol=1e-10, atol=1e-12, err_msg=variant)
        # an Assert of the final function's graph raises through the pointer, with its message
        assert got["error"] is not None and "x left the box" in got["error"], (variant, got["error"])


def test_the_final_function_links_no_code_of_a_node_called_by_reference(cold):
    reference, linked = cold[1]["reference"], cold[1]["linked"]
    assert reference["referenced"] >= 3 and reference["node_libraries"] >= 3, reference  # the check, the loop, the product at least
    assert reference["loop_libraries"] >= 1 and reference["in_final"] == 0, reference
    # linked, the final function's module holds the loop's code, as PyTensor's does
    assert linked["referenced"] == 0 and linked["loop_libraries"] >= 1 and linked["in_final"] >= 1, linked


def test_the_next_process_compiles_nothing(cold):
    folders, got = cold
    again = spawn(_CHILD, folders["reference"], "reference")
    assert again["value"] == got["reference"]["value"]
    assert [n for n in again["compiled"] if not (n.startswith("get_") and n.endswith("_pointer"))] == [], again["compiled"]


def test_a_nodes_input_types_are_described_alike_in_every_process():
    """The token of a node called by reference names its input types: never by an address, which each process changes.

    ``NoneTypeT`` (a ``SpecifyShape``'s unknown length) keeps ``object``'s ``repr``; named by
    it, the final function of a PyMC model's NUTS function got a new key in every process and
    was compiled again on every unchanged rerun (`test_the_next_process_compiles_nothing`
    reads this across processes).
    """
    from pytensor.tensor.type_other import none_type_t, slicetype
    from pytensor.typed_list import TypedListType

    assert stable_types([pt.dmatrix().type, none_type_t, slicetype]) == (
        "(TensorType(float64, shape=(None, None)), pytensor.tensor.type_other.NoneTypeT, pytensor.tensor.type_other.SliceType)"
    )
    # a type with object's repr and attributes of its own has no description: its node stays linked
    assert stable_types([TypedListType(pt.dvector().type)]) is None
    assert stable_types([pt.dvector().type, TypedListType(pt.dvector().type)]) is None


def test_a_function_closing_over_a_dispatcher_is_not_a_unit_of_its_own():
    """Numba keys a function's cache index by the pickle of its closure, and a dispatcher pickles
    with a per-process id: such a function would be compiled again in every process (PyTensor
    3.3.6's ``Dot`` conversion closes over its cast functions; the next-process test above failed
    there with 75 functions compiled again). It is cached through PyTensor's wrapper, and a node of
    it stays linked into the final function."""
    import numba

    from innergraph.backends.numba_once import cached_itself, stable_closure

    inner = numba.njit(lambda v: v + 1.0)

    def make(cell):
        def closed(v):
            return cell(v) * 2.0

        return numba.njit(closed)

    over_dispatcher, over_number = make(inner), make(abs)
    assert not stable_closure(over_dispatcher.py_func) and stable_closure(over_number.py_func)
    assert stable_closure(_dispatcher().py_func)  # no closure at all
    assert cached_itself(over_dispatcher, "key") is None and cached_itself(over_number, "key") is not None
    x = pt.dvector("x")
    node = pt.exp(x).owner
    with outer_nodes([node]):
        assert outer_node_by_reference(node, (over_dispatcher, "key")) == (over_dispatcher, "key")
        assert outer_node_by_reference(node, (over_number, "key"))[0] is not over_number  # a unit, by reference


def _dispatcher():
    import numba

    return numba.njit(lambda v: v * 2.0)


def test_nodes_of_one_key_and_other_types_are_other_bodies():
    """PyTensor's key of a node's conversion need not name its input types, which its code may read: the token does.

    A Scan's conversion keyed alike for a float and a complex storage once served the float
    code to the complex node; the caller's key holds the token, so no cached caller names a
    token this process did not make.
    """
    x64, x32 = pt.dvector("x"), pt.fvector("x")
    nodes = [pt.exp(x64).owner, pt.exp(x32).owner]
    fns = [_dispatcher(), _dispatcher()]
    with outer_nodes(nodes):
        made = [outer_node_by_reference(node, (fn, "one key")) for node, fn in zip(nodes, fns, strict=True)]
        again = outer_node_by_reference(nodes[0], (fns[0], "one key"))
    (first, first_key), (second, second_key) = made
    assert first is not second and first.body is not second.body and first_key != second_key
    assert again[0] is first and again[1] == first_key  # the same node again: the same intrinsic and key
    assert any(b is first.body for b in _BODIES.values()) and any(b is second.body for b in _BODIES.values())


def test_outside_the_final_functions_graph_a_node_is_linked():
    x = pt.dvector("x")
    node = pt.exp(x).owner
    fn = _dispatcher()
    assert outer_node_by_reference(node, (fn, "key")) == (fn, "key")  # no block: a body's node, or PyTensor's conversion
    with outer_nodes([node]):
        assert outer_node_by_reference(node, (fn, None)) == (fn, None)  # no key: nothing to cache it under
        assert outer_node_by_reference(pt.sum(x).owner, (fn, "key")) == (fn, "key")  # not the graph's node
    with outer_nodes([node]):
        numba_reference.OUTER_NODES = False
        try:
            assert outer_node_by_reference(node, (fn, "key")) == (fn, "key")
        finally:
            numba_reference.OUTER_NODES = True
