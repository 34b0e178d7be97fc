"""``ord`` of a one-character literal compiles to its code point: no string code, Numba's values.

`innergraph.backends.numba_literals`: PyTensor's LAPACK and BLAS wrappers pass their
character arguments as ``ord("N")``, which Numba compiles through its unicode type's helpers,
linked and optimised again in every function that calls a solve or a product. While
innergraph is installed, ``ord`` of a literal is typed as the constant it is. Checked here:
the value and type are Numba's own; the compiled function links none of the string code
(nothing at all for the call); anything else is left to Numba (uninstalled, a longer
literal, a string known at run time);
and in fresh processes, PyTensor's triangular solves and matrix products under Numba give
vanilla's values bit for bit without compiling that code, where vanilla compiles it.
"""

import textwrap

import numba
import numpy as np
import pytest
from numba.core.errors import TypingError

from children import WATCH, spawn

import innergraph
from innergraph.backends import numba_literals  # noqa: F401  (loaded with the Numba backend on a first link; here, before one)

#: Library names of Numba's ``ord`` on a unicode string and the helpers it links.
STRING_ORD = ("ol_ord", "unicode_len", "_get_code_point", "_kind_to_byte_width")


def _linked(dispatcher):
    """The names of the libraries ``dispatcher``'s compiled code links, transitively."""
    names, todo = set(), [o.library for o in dispatcher.overloads.values()]
    while todo:
        for inner in getattr(todo.pop(), "_linking_libraries", ()):
            names.add(inner.name)
            todo.append(inner)
    return names


def _string_ord(dispatcher):
    """What ``dispatcher`` links of Numba's ``ord`` (none at all where ``ord`` is lowered to a constant)."""
    return sorted(n for n in _linked(dispatcher) if any(s in n for s in STRING_ORD) or "ord" in n.split(".")[0])


def test_ord_of_a_one_character_literal_is_its_code_point_and_links_no_string_code():
    @numba.njit
    def chars(t):
        return ord("T") if t else ord("N")

    @numba.njit
    def numbas(s):  # a string known at run time: Numba's own ord
        return ord(s)

    assert (chars(True), chars(False)) == (84, 78)
    assert _string_ord(chars) == [] and _linked(chars) <= {"nrt"}  # a constant: nothing linked for it
    assert numbas("T") == 84 and _string_ord(numbas)  # the probe finds Numba's string code where it is
    (sig,) = chars.nopython_signatures
    (numbas_sig,) = numbas.nopython_signatures
    assert sig.return_type == numbas_sig.return_type == numba.int64


def test_a_literal_beyond_ascii_is_its_code_point_too():
    @numba.njit
    def euro():
        return ord("\u20ac")

    assert euro() == 0x20AC and _string_ord(euro) == []


def test_uninstalled_ord_is_numbas_own_and_installed_again_the_constant():
    def chars(t):
        return ord("L") if t else ord("U")

    installed = numba.njit(chars)
    assert installed(True) == 76 and _string_ord(installed) == []
    with innergraph.uninstalled():  # the same literals, typed again: Numba's own ord
        uninstalled = numba.njit(chars)
        assert uninstalled(True) == 76 and uninstalled(False) == 85
    assert _string_ord(uninstalled), "typed while uninstalled, the literals must take Numba's own ord"
    again = numba.njit(chars)
    assert again(False) == 85 and _string_ord(again) == []


def test_a_longer_literal_is_left_to_numba_and_its_error():
    @numba.njit
    def two():
        return ord("TN")

    @numba.njit
    def two_vanilla():
        return ord("NT")

    errors = []
    for fn, installed in ((two, True), (two_vanilla, False)):
        with pytest.raises((TypeError, TypingError)) as info:
            if installed:
                fn()
            else:
                with innergraph.uninstalled():  # compiled (at its first call) with Numba's own ord
                    fn()
        errors.append((type(info.value), str(info.value)))
    assert errors[0] == errors[1] and "expected a character" in errors[0][1]


_CHILD = textwrap.dedent(
    """
    import json, sys
    import numpy as np, pytensor, pytensor.tensor as pt
    from numba.core import event
    if sys.argv[1] == "innergraph":
        import innergraph
        from innergraph.backends.numba_link import final_function
    else:
        final_function = lambda fn: fn
    from pytensor.tensor.linalg import solve_triangular
    """
) + WATCH + textwrap.dedent(
    """
    A, B, b = pt.dmatrix("A"), pt.dmatrix("B"), pt.dvector("b")
    outputs = [
        solve_triangular(A, b, lower=True),
        solve_triangular(A.T, B, lower=False, trans=1),
        solve_triangular(A, B, lower=True, unit_diagonal=True),
        A @ B,
    ]
    fn = pytensor.function([A, B, b], outputs, mode="NUMBA")
    rng = np.random.default_rng(7)
    a = np.tril(rng.normal(size=(5, 5))) + 5 * np.eye(5)
    values = fn(a, rng.normal(size=(5, 3)), rng.normal(size=5))
    names = sorted({n.split(".<locals>")[0] for d in dispatchers(final_function(fn.vm.jit_fn)) for n in linked(d)})
    print(json.dumps({"values": [v.tolist() for v in values], "linked": names}))
    """
)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Vanilla and innergraph, each in a fresh process on a new compile directory."""
    return {variant: spawn(_CHILD, tmp_path_factory.mktemp(variant), variant) for variant in ("vanilla", "innergraph")}


def test_pytensors_solves_and_products_give_vanillas_values_bit_for_bit(runs):
    for ours, theirs in zip(runs["innergraph"]["values"], runs["vanilla"]["values"], strict=True):
        np.testing.assert_array_equal(ours, theirs)


def test_pytensors_solves_and_products_link_no_ord_of_a_string(runs):
    """Numba's ``ord`` of a string (``ol_ord``) is gone; its helpers may stay where a message formats numbers (3.3.6's)."""
    linked = runs["innergraph"]["linked"]
    assert any("solve_triangular" in n or "trtrs" in n for n in linked), linked  # the probe reaches the solves
    assert [n for n in linked if "ol_ord" in n] == []


@pytest.mark.monkey_patch_only  # in a patched PyTensor a process that never imports innergraph types ord as innergraph does
def test_the_sentinel_vanillas_solves_link_string_code(runs):
    """Vanilla's solves link Numba's ``ord`` of a string: without it, the test above could pass on a blind probe."""
    assert [n for n in runs["vanilla"]["linked"] if "ol_ord" in n]
