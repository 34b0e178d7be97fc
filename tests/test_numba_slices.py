"""`Alloc` of a 0-d value and a 1-d `SortOp` and `ArgSortOp` under Numba: vanilla's numbers, and no string code compiled.

`innergraph.backends.numba_slices`: PyTensor's conversions of both assign an array to a slice,
which Numba checks at run time with a message formatted from the shapes, so a fresh process
compiles Numba's string code for them (seconds). innergraph's fill the `Alloc` by its element
and sort a 1-d array by one ``np.sort`` or ``np.argsort``. Checked here, in fresh processes on one compile
directory: values equal to vanilla's bit for bit (float64, float32 and int32 fills of 0 to 3
dimensions; both sort kinds, ties and a NaN; an `Alloc` and a sort in a loop's body), the same
error for a negative shape; no function of the graph linking Numba's string code; the second
process loading everything from the cache. And the sentinels: vanilla's conversions, and
innergraph's for what it leaves to PyTensor (a 2-d sort), do link that code.
"""

import textwrap
from collections.abc import Callable
from typing import Any

import numba
import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.link.numba.dispatch.basic import numba_funcify_and_cache_key

from children import WATCH, header, vanilla_then_twice

import innergraph
from innergraph.backends.numba_slices import alloc_source, funcify_alloc, funcify_argsort, funcify_sort

#: Functions of Numba's string code that the message of a slice assignment's shape check compiles.
STRING_CODE = ("integer_str", "concat_impl", "_set_code_point", "_kind_to_byte_width")

_GRAPHS = textwrap.dedent(
    """
    import numpy as np, pytensor, pytensor.tensor as pt

    def graphs():
        w, f, i, n = pt.dvector("w"), pt.fvector("f"), pt.ivector("i"), pt.lscalar("n")
        fills = [pt.alloc(w[1], n, 3, 2), pt.alloc(f[2], 2, n), pt.alloc(i[0], n)]  # 0-d views (layout A) filling 3, 2, 1 dims
        sorts = [pt.argsort(w), pt.argsort(i, kind="mergesort"), pt.sort(w), pt.sort(i)]
        m = pt.dmatrix("m")
        rows = pytensor.scan(lambda row, k: pt.argsort(row) + pt.alloc(row[0], k).sum().astype("int64"),
                             sequences=m, non_sequences=n, return_updates=False)
        return [([w, f, i, n], fills), ([w, i], sorts), ([m, n], [rows]), ([m], [pt.argsort(m, axis=0)])]

    W = np.array([3.0, np.nan, -1.0, 3.0, 0.5, -1.0, 2.0])
    I = np.array([4, 1, 4, -2, 0, 1], dtype=np.int32)
    M = np.array([[2.0, -1.0, 2.0], [0.0, 5.0, -3.0], [1.0, 1.0, 0.0], [7.0, -2.0, 7.0]])
    CALLS = [
        ([W, np.arange(4, dtype=np.float32) / 3, I, 4], [W, np.arange(4, dtype=np.float32), I, -1]),
        ([W, I], None),
        ([M, 3], None),
        ([M], None),
    ]
    """
)


def _child(variant: str) -> str:
    """A script computing each graph's values, the error of a bad call and the string code its functions link, under Numba.

    Vanilla's never imports innergraph.
    """
    return (
        header(variant)
        + _GRAPHS
        + f"STRING_CODE = {STRING_CODE!r}\n"
        + WATCH
        + textwrap.dedent(
            """
            out = []
            for (inputs, outputs), (good, bad) in zip(graphs(), CALLS):
                before = len(compiled)
                fn = pytensor.function(inputs, outputs, mode="NUMBA")
                value = [[np.asarray(a).dtype.str, np.asarray(a).tolist()] for a in fn(*good)]
                error = None
                if bad is not None:
                    try:
                        fn(*bad)
                    except Exception as exc:
                        error = [type(exc).__name__, str(exc)]
                every = dispatchers(final_function(fn.vm.jit_fn))
                string_code = sorted({n.split(".")[0] for d in every for n in linked(d) if any(s in n for s in STRING_CODE)})
                names = sorted({d.py_func.__name__ for d in every})
                out.append({"value": value, "error": error, "compiled": compiled[before:], "names": names, "string_code": string_code})
            print(json.dumps({"graphs": out}))
            """
        )
    )


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Vanilla in a fresh process; innergraph twice on one new compile directory (the second loads the first's cache)."""
    return vanilla_then_twice(_child, tmp_path_factory)


def test_values_dtypes_and_errors_are_vanillas(runs):
    vanilla, first, second = runs
    for ours in (first, second):
        for mine, theirs in zip(ours["graphs"], vanilla["graphs"], strict=True):
            assert mine["value"] == theirs["value"]  # dtypes, and the numbers bit for bit (NaN's position as NaN)
            assert mine["error"] == theirs["error"]
    assert vanilla["graphs"][0]["error"] is not None  # the negative shape fails in both, with one message


def test_the_sorts_see_ties_and_a_nan():
    """The vectors the children sort (read from their script) have ties, and the float one a NaN."""
    scope: dict[str, Any] = {}
    exec(_GRAPHS, scope)
    w, i = scope["W"], scope["I"]
    assert np.isnan(w).any()
    for values in (w[~np.isnan(w)], i):
        assert len(np.unique(values)) < len(values)


def test_no_function_links_string_code_and_the_second_process_compiles_none(runs):
    _, first, second = runs
    for graph in range(3):
        assert first["graphs"][graph]["string_code"] == [], first["graphs"][graph]["string_code"]
        assert not [c for c in first["graphs"][graph]["compiled"] if c in STRING_CODE]
        assert second["graphs"][graph]["compiled"] == [], second["graphs"][graph]["compiled"]  # all loaded from the cache
    assert {"alloc"} <= set(first["graphs"][0]["names"]) and {"argsort", "sort"} <= set(first["graphs"][1]["names"])


@pytest.mark.monkey_patch_only  # in a patched PyTensor a process that never imports innergraph converts as innergraph does
def test_the_sentinels_vanillas_conversions_and_a_2d_sort_link_string_code(runs):
    """Without these, the test above could pass because the probe (``linked``) finds nothing at all."""
    vanilla, first, _ = runs
    for graph in range(4):
        assert vanilla["graphs"][graph]["string_code"], vanilla["graphs"][graph]
    assert first["graphs"][3]["string_code"]  # a 2-d sort is PyTensor's conversion
    assert "argsort_f" in first["graphs"][3]["names"]


def _node(variable):
    return variable.owner


def _key(node):
    """The cache key PyTensor's dispatcher gives ``node``'s conversion (a patched PyTensor's `Alloc` delegates to innergraph's)."""
    return numba_funcify_and_cache_key(node.op, node=node)[1]


def test_the_conversions_are_innergraphs_only_while_installed():
    v, n = pt.dvector("v"), pt.lscalar("n")
    nodes = [_node(pt.alloc(v[0], n, 3)), _node(pt.argsort(v)), _node(pt.sort(v))]
    conversions: list[Callable[..., tuple[Any, str | None]]] = [funcify_alloc, funcify_argsort, funcify_sort]
    for node, ours in zip(nodes, conversions, strict=True):
        assert _key(node) == ours(node.op, node)[1]
        with innergraph.uninstalled():
            assert _key(node) != ours(node.op, node)[1]


def test_what_is_left_to_pytensor_gets_pytensors_key():
    """A value of one dimension or more, a sort of 2 dimensions or of a kind Numba lacks: PyTensor's conversion and key."""
    x, v, n = pt.dmatrix("x"), pt.dvector("v"), pt.lscalar("n")
    left = (pt.alloc(v, n, 3), pt.argsort(x), pt.argsort(v, kind="heapsort"), pt.sort(x), pt.sort(v, kind="mergesort"))
    for node in map(_node, left):
        ours = _key(node)
        with innergraph.uninstalled():
            assert ours == _key(node)


def test_keys_are_innergraphs_and_differ_by_what_the_code_is():
    v, n = pt.dvector("v"), pt.lscalar("n")
    nodes = [_node(pt.alloc(v[0], n, 3)), _node(pt.alloc(v[0], n)), _node(pt.alloc(v.astype("float32")[0], n, 3)), _node(pt.argsort(v)), _node(pt.argsort(v, kind="mergesort")), _node(pt.sort(v))]
    keys = [_key(node) for node in nodes]
    with innergraph.uninstalled():
        keys += [_key(node) for node in (nodes[0], nodes[3], nodes[5])]
    assert len(set(keys)) == len(keys)


def test_the_fill_takes_a_scalar_as_well_as_a_0d_array():
    """Numba may hand an `Alloc` of a 0-d value a scalar (PyTensor's comment on its own fill): both fill."""
    node = _node(pt.alloc(pt.dscalar("s"), pt.lscalar("n"), 2))
    converted, _ = funcify_alloc(node.op, node)
    fn = numba.njit(converted.py_func)  # the conversion's own function has no wrapper to be called from Python
    for value in (np.array(2.5), 2.5):
        out = fn(value, np.array(3), np.array(2))
        assert out.dtype == np.float64 and out.shape == (3, 2) and (out == 2.5).all()


def test_the_source_fills_any_number_of_dimensions():
    """`alloc_source` read as Python (it is the NumPy code Numba compiles): 0 to 3 dimensions, the dtype asked."""
    for ndim, dtype in ((0, "float64"), (1, "int32"), (3, "float32"), (2, "bool")):
        scope: dict[str, Any] = {"np": np}
        exec(alloc_source(ndim, dtype), scope)
        shape = (2, 3, 1)[:ndim]
        out = scope["alloc"](np.array(1, dtype=dtype), *(np.array(s) for s in shape))
        assert out.shape == shape and out.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(out, np.ones(shape, dtype=dtype))
