"""Numba units: converted functions cached themselves, bodies as inline code, row stores and messages.

Nothing registers these yet (the Numba conversions of the next step use them), so the
tests call them as those conversions do. A converted function is called from a small
jitted caller, as a compiled PyTensor function calls it: it is not meant to be called
from Python.
"""

import warnings

import numba
import numpy as np
import pytest
from numba.core import event

import pytensor.tensor as pt
from pytensor.innergraph.backends.numba_code import (
    body_code,
    one_conversion,
    prepared_body,
)
from pytensor.innergraph.backends.numba_messages import (
    ShapeMismatch,
    funcify_specify_shape,
)
from pytensor.innergraph.backends.numba_once import DIRECT, compiled_once
from pytensor.innergraph.backends.numba_rows import store_row
from pytensor.innergraph.core.build import inner_graph
from pytensor.innergraph.core.graph import body_of
from pytensor.innergraph.core.hooks import installed
from pytensor.link.numba.cache import CACHED_SRC_FUNCTIONS, NUMBA_CACHE_PATH
from pytensor.link.numba.dispatch.basic import numba_funcify_and_cache_key
from pytensor.tensor.extra_ops import CumOp


class Compiled(event.Listener):
    """The names of the functions Numba compiles (not those it loads from its disk cache)."""

    def __init__(self):
        self.names = []

    def on_start(self, ev):
        pass

    def on_end(self, ev):
        self.names.append(ev.data["dispatcher"].py_func.__name__)


def sum_node():
    return pt.dvector("x").sum().owner


def call_once(dispatcher, value):
    """``dispatcher(value)`` from a jitted caller; the names of what Numba compiled."""
    caller = numba.njit(lambda v: dispatcher(v))
    listener = Compiled()
    with event.install_listener("numba:compile", listener):
        result = caller(value)
    return result, listener.names


def test_a_converted_function_is_cached_itself_and_the_next_dispatcher_loads_it():
    node = sum_node()
    fn, key = compiled_once(node.op, node)
    full_key = CACHED_SRC_FUNCTIONS[fn.py_func]
    assert full_key.startswith(key) and DIRECT in full_key
    # the converted function itself, not PyTensor's ``def f(*args)`` wrapper around it
    assert fn.py_func.__code__.co_varnames[:1] != ("args",)
    value, _ = call_once(fn, np.arange(4.0))
    assert value == 6.0
    assert list(NUMBA_CACHE_PATH.glob(f"*{full_key}*.nbi"))

    again, _ = compiled_once(node.op, node)
    assert again is not fn
    value, names = call_once(again, np.arange(5.0))
    assert value == 10.0
    assert fn.py_func.__name__ not in names  # loaded from the disk cache
    assert names == ["<lambda>"]


def test_an_unreadable_entry_is_removed_and_compiled_again_with_one_warning():
    node = sum_node()
    fn, _ = compiled_once(node.op, node)
    call_once(fn, np.ones(2))
    full_key = CACHED_SRC_FUNCTIONS[fn.py_func]
    entries = list(NUMBA_CACHE_PATH.glob(f"*{full_key}*.nbc"))
    assert entries
    for entry in entries:
        entry.write_bytes(entry.read_bytes()[:100])

    again, _ = compiled_once(node.op, node)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        value, names = call_once(again, np.arange(3.0))
    assert value == 3.0
    assert fn.py_func.__name__ in names
    messages = [str(w.message) for w in caught if "could not be read" in str(w.message)]
    assert len(messages) == 1 and fn.py_func.__name__ in messages[0]

    last, _ = compiled_once(node.op, node)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        value, names = call_once(last, np.arange(3.0))
    assert value == 3.0 and names == ["<lambda>"]
    assert not [w for w in caught if "could not be read" in str(w.message)]


def test_a_body_is_rendered_as_assignments_under_its_callers_names():
    x, y = pt.dvectors("x", "y")
    closure = inner_graph(lambda a, b: a * b + pt.exp(a), [x, y])
    code = body_code(prepared_body(body_of(closure.function)))
    rendering = code.render("b0_", ["left", "right"])
    assert all(
        "left" in line or "right" in line or "b0_" in line for line in rendering.lines
    )
    source = (
        "def rendered(left, right):\n"
        + "".join(f"    {line}\n" for line in rendering.lines)
        + f"    return {rendering.returned()}\n"
    )
    scope = dict(rendering.env)
    exec(source, scope)
    x_val, y_val = np.array([0.5, -1.0, 2.0]), np.array([3.0, 0.25, -1.5])
    np.testing.assert_allclose(
        numba.njit(scope["rendered"])(x_val, y_val), x_val * y_val + np.exp(x_val)
    )
    with pytest.raises(ValueError, match="takes 2 arguments, got 1"):
        code.render("b1_", ["left"])


def test_equal_nodes_of_two_bodies_convert_once_within_one_conversion():
    x = pt.dvector("x")
    first = body_of(inner_graph(lambda a: pt.cumsum(a) * 2.0, [x]).function)
    second = body_of(inner_graph(lambda a: pt.cumsum(a) + 1.0, [x]).function)

    def cumsum_function(body, code):
        [index] = [
            i
            for i, node in enumerate(prepared_body(body).toposort())
            if isinstance(node.op, CumOp)
        ]
        return code.functions[index]

    with one_conversion():
        shared = [
            cumsum_function(b, body_code(prepared_body(b))) for b in (first, second)
        ]
    assert shared[0] is shared[1]
    apart = [cumsum_function(b, body_code(prepared_body(b))) for b in (first, second)]
    assert apart[0] is not apart[1]


@numba.njit
def store(storage, index, value):
    store_row(storage, index, value)


def test_a_row_store_copies_broadcasts_and_reads_an_overlapping_value_first():
    storage = np.zeros((3, 4))
    store(storage, 1, np.arange(4.0))
    store(storage, 2, storage[1][::-1])
    store(storage, 0, np.array([7.0]))  # an axis of length 1, broadcast as NumPy does
    np.testing.assert_array_equal(storage, [[7, 7, 7, 7], [0, 1, 2, 3], [3, 2, 1, 0]])
    store(
        storage, 1, storage[1][::-1]
    )  # the row itself, reversed: read whole before it is written
    np.testing.assert_array_equal(storage[1], [3, 2, 1, 0])
    with pytest.raises(
        ValueError, match="does not have the shape of its output's storage row"
    ):
        store(storage, 0, np.ones(3))


def test_a_shape_mismatch_raises_pytensors_error_formatted_in_python():
    x = pt.dmatrix("x")
    node = pt.specify_shape(x, (None, 3)).owner
    ours, key = funcify_specify_shape(node.op, node)
    pytensors, pytensors_key = numba_funcify_and_cache_key(node.op, node)
    # enabled (the last step), PyTensor's dispatcher gives this conversion; before, its own
    assert (key == pytensors_key) is installed()
    errors = []
    for fn in (ours, pytensors):
        check = numba.njit(lambda a, b: fn(a, None, b))
        assert check(np.zeros((2, 3)), np.array(3)).shape == (2, 3)
        with pytest.raises(AssertionError) as raised:
            check(np.zeros((2, 4)), np.array(3))
        errors.append(str(raised.value))
    assert isinstance(raised.value, AssertionError)
    assert (
        errors[0]
        == errors[1]
        == "SpecifyShape: dim 1 of input has shape 4, expected 3."
    )
    assert ShapeMismatch(1, 4, 3).args == (errors[0],)
