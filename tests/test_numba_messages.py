"""`SpecifyShape` and `Split` under Numba raise PyTensor's messages, formatted in Python, not in compiled code.

`innergraph.backends.numba_messages`: PyTensor's conversions format their error messages
with f-strings of run-time numbers, which Numba compiles as code (integer formatting,
string concatenation: seconds in every fresh process). innergraph's raise exceptions whose
``__init__`` writes the same message from the numbers. Checked here, in fresh processes on
one compile directory: values and messages equal to vanilla's (word for word, the same
exception classes by ``isinstance``), in a loop-free function, in a loop's body and in a node
the final function calls by reference; nothing of Numba's string code compiled; the second
process loads everything from the cache and raises the same errors. And the sentinel: Numba
compiling PyTensor's f-string does compile that code.
"""

import textwrap

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.link.numba.dispatch.basic import numba_funcify_and_cache_key
from pytensor.tensor.basic import Split
from pytensor.tensor.shape import SpecifyShape

from children import WATCH, header, vanilla_then_twice

import innergraph
from innergraph.backends.numba_messages import ShapeMismatch, SplitSizesMismatch, funcify_specify_shape, funcify_split

#: Functions of Numba's string code that an f-string of integers compiles (vanilla's checks link them:
#: `test_the_sentinel_vanillas_checks_link_string_code`).
STRING_CODE = ("integer_str", "concat_impl", "_set_code_point", "_kind_to_byte_width")

_GRAPHS = textwrap.dedent(
    """
    import numpy as np, pytensor, pytensor.tensor as pt

    def graphs():
        x, v, sizes = pt.dmatrix("x"), pt.dvector("v", shape=(5,)), pt.lvector("sizes")
        checked = pt.specify_shape(x, (3, None)) * 2.0  # a loop-free function: one dimension checked
        parts = pt.split(v, sizes, n_splits=3)
        seqs = pt.dmatrix("seqs")
        steps = pytensor.scan(lambda row, h: h + pt.specify_shape(row, (2,)).sum(), sequences=seqs,
                              outputs_info=pt.as_tensor(np.float64(0.0)), return_updates=False)
        looped = steps + pt.specify_shape(seqs, (None, 2)).sum()  # in the body, and in the final function of a loop
        return [([x], [checked]), ([v, sizes], parts), ([seqs], [looped])]

    CALLS = [
        ([np.ones((3, 4))], [np.ones((2, 4))]),
        ([np.arange(5.0), np.array([1, 2, 2])], [np.arange(5.0), np.array([1, 2, 1])]),
        ([np.ones((4, 2))], [np.ones((4, 3))]),
    ]
    """
)


def _child(variant: str) -> str:
    """A script computing each graph's values and the error of a bad call (class names, message) under Numba.

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
                value = [np.asarray(a).tolist() for a in fn(*good)]
                try:
                    fn(*bad)
                    error = None
                except Exception as exc:
                    error = [[c.__name__ for c in type(exc).__mro__], str(exc)]
                checks = [d for d in dispatchers(final_function(fn.vm.jit_fn)) if d.py_func.__name__ in ("specify_shape", "split")]
                string_code = sorted({n.split(".")[0] for d in checks for n in linked(d) if any(s in n for s in STRING_CODE)})
                out.append({"value": value, "error": error, "compiled": compiled[before:], "checks": len(checks), "string_code": string_code})
            print(json.dumps({"graphs": out}))
            """
        )
    )


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Vanilla in a fresh process; innergraph twice on one new compile directory (the second loads the first's cache)."""
    return vanilla_then_twice(_child, tmp_path_factory)


def test_values_and_errors_are_vanillas_word_for_word(runs):
    vanilla, first, second = runs
    for ours in (first, second):
        for mine, theirs in zip(ours["graphs"], vanilla["graphs"], strict=True):
            for a, b in zip(mine["value"], theirs["value"], strict=True):
                np.testing.assert_array_equal(a, b)
            assert theirs["error"] is not None and mine["error"] is not None
            (my_classes, my_message), (their_classes, their_message) = mine["error"], theirs["error"]
            assert my_message == their_message
            assert their_classes[0] in my_classes  # an AssertionError (a ValueError for Split), as vanilla's


def test_the_errors_pass_through_a_loops_body_and_a_node_called_by_reference(runs):
    _, first, _ = runs
    classes, message = first["graphs"][2]["error"]
    # the bad call's rows have 3 columns: the body's check (2,) or the outer one (None, 2), whichever runs first, fails
    assert "ShapeMismatch" in classes and message.startswith("SpecifyShape: dim ") and message.endswith("has shape 3, expected 2.")


def test_no_check_links_string_code_and_the_second_process_compiles_none(runs):
    """The functions of ``SpecifyShape`` and ``Split`` link none of Numba's string code, and load from the cache."""
    _, first, second = runs
    for graph in range(3):
        assert first["graphs"][graph]["checks"] >= 1
        assert first["graphs"][graph]["string_code"] == [], first["graphs"][graph]["string_code"]
    for graph, name in zip(range(2), ("specify_shape", "split"), strict=True):
        ours = first["graphs"][graph]["compiled"]
        assert name in ours and not [c for c in ours if c in STRING_CODE], ours  # loop-free: nothing else compiles it
        assert name not in second["graphs"][graph]["compiled"]  # loaded from the cache
    assert "specify_shape" not in second["graphs"][2]["compiled"]


@pytest.mark.monkey_patch_only  # in a patched PyTensor a process that never imports innergraph converts as innergraph does
def test_the_sentinel_vanillas_checks_link_string_code(runs):
    """PyTensor's own conversions format their messages with f-strings, which link Numba's string code.

    Without this, `test_no_check_links_string_code_and_the_second_process_compiles_none` could pass
    because the probe (``linked``) finds nothing at all.
    """
    vanilla, _, _ = runs
    for graph in range(3):
        assert vanilla["graphs"][graph]["checks"] >= 1
        assert vanilla["graphs"][graph]["string_code"], vanilla["graphs"][graph]


def test_the_conversions_are_innergraphs_only_while_installed():
    assert numba_funcify_and_cache_key.dispatch(SpecifyShape) is funcify_specify_shape
    assert numba_funcify_and_cache_key.dispatch(Split) is funcify_split
    with innergraph.uninstalled():
        assert numba_funcify_and_cache_key.dispatch(SpecifyShape) is not funcify_specify_shape
        assert numba_funcify_and_cache_key.dispatch(Split) is not funcify_split


def test_the_exceptions_write_pytensors_messages():
    assert str(ShapeMismatch(1, 4, 5)) == "SpecifyShape: dim 1 of input has shape 4, expected 5."
    assert isinstance(ShapeMismatch(0, 1, 2), AssertionError)
    assert str(SplitSizesMismatch(4, 5)) == "Split sizes sum to 4; expected 5"
    assert isinstance(SplitSizesMismatch(4, 5), ValueError)


def test_keys_differ_from_pytensors_and_by_the_checked_dimensions():
    x = pt.dmatrix("x")
    node_one, node_both = pt.specify_shape(x, (3, None)).owner, pt.specify_shape(x, (3, 4)).owner
    _, key_one = funcify_specify_shape(node_one.op, node_one)
    _, key_both = funcify_specify_shape(node_both.op, node_both)
    with innergraph.uninstalled():
        _, vanilla_key = numba_funcify_and_cache_key(node_one.op, node=node_one)
    assert len({key_one, key_both, vanilla_key}) == 3
    split_two, split_three = pt.split(pt.dvector("v"), pt.lvector("s"), n_splits=2), pt.split(pt.dvector("v"), pt.lvector("s"), n_splits=3)
    assert funcify_split(split_two[0].owner.op)[1] != funcify_split(split_three[0].owner.op)[1]


def test_a_one_way_split_returns_a_tuple():
    v, sizes = pt.dvector("v"), pt.lvector("sizes")
    part = pt.split(v, sizes, n_splits=1)  # one output: the variable itself
    fn = pytensor.function([v, sizes], part, mode="NUMBA")
    np.testing.assert_array_equal(fn(np.arange(3.0), np.array([3])), [0.0, 1.0, 2.0])
