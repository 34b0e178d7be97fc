"""Mit-mot taps start at 0: the form innergraph builds, and the PyTensor JAX defect it avoids.

PyTensor 3.0.7's JAX Scan conversion offsets a mit-mot's out taps by their own
minimum instead of the in taps' (``ScanInfo.normalized_mit_mot_out_slices``). A
native Scan whose mit-mot reads taps ``(-1, 0)`` and writes tap ``0`` therefore
writes one row too early under JAX. innergraph's forwarding rewrite made that
form (it drops the write-back tap of PyTensor's ``(-1, 0) -> (-1, 0)``), and the
second derivative of a 4-step scan came out -0.963 under JAX instead of -11.695.
"""

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.compile.mode import get_mode
from pytensor.scan.op import Scan as NativeScan
from pytensor.scan.op import ScanInfo

import innergraph
from innergraph.protocol.signature import mit_mot_taps_from_zero
from typed import grad


def _mit_mot_scan(in_taps, out_taps):
    """A native Scan of one mit-mot: each step writes ``a + 2 b`` from the two taps it reads."""
    a, b = pt.dscalar("a"), pt.dscalar("b")
    info = ScanInfo(
        n_seqs=0, mit_mot_in_slices=(in_taps,), mit_mot_out_slices=(out_taps,), mit_sot_in_slices=(),
        sit_sot_in_slices=(), n_nit_sot=0, n_untraced_sit_sot=0, n_non_seqs=0, as_while=False,
    )
    buffer = pt.dvector("buffer")
    return buffer, NativeScan([a, b], [a + 2 * b], info, mode=None)(pt.constant(3, dtype="int64"), buffer)


def _run(in_taps, out_taps, mode):
    """Run with PyTensor alone (innergraph's JAX backend shifts native Scans' taps too)."""
    buffer, out = _mit_mot_scan(in_taps, out_taps)
    with innergraph.uninstalled():
        return pytensor.function([buffer], out, mode=mode)(np.arange(1.0, 5.0))


def test_shifting_every_tap_keeps_the_loop():
    assert mit_mot_taps_from_zero((-1, 0), (0,)) == ((0, 1), (1,))
    assert mit_mot_taps_from_zero((0, 1), (1,)) == ((0, 1), (1,))
    np.testing.assert_array_equal(_run((-1, 0), (0,), "FAST_COMPILE"), [1.0, 5.0, 11.0, 19.0])
    np.testing.assert_array_equal(_run((0, 1), (1,), "FAST_COMPILE"), [1.0, 5.0, 11.0, 19.0])


def test_pytensor_jax_defect_is_what_the_shift_avoids():
    """Vanilla only: JAX is wrong on the unshifted form and right on the shifted one.

    If this test fails because the first assertion no longer holds, PyTensor fixed
    its conversion; the shift stays harmless.
    """
    assert not np.allclose(_run((-1, 0), (0,), "JAX"), [1.0, 5.0, 11.0, 19.0])
    np.testing.assert_array_equal(_run((0, 1), (1,), "JAX"), [1.0, 5.0, 11.0, 19.0])


def _second_derivative(mode):
    x0 = pt.dscalar("x0")
    ys = pytensor.scan(lambda acc: pt.sin(acc) * 1.5, outputs_info=[x0], n_steps=4, return_updates=False)
    g2 = grad(grad(ys[-1], x0), x0)
    fn = pytensor.function([x0], g2, mode=mode)
    return fn, float(fn(0.3))


@pytest.mark.parametrize("linker", ["JAX", "FAST_COMPILE", "FAST_RUN"])
def test_second_derivative_of_a_scan_equals_vanilla(linker):
    fn, value = _second_derivative(get_mode(linker))
    with innergraph.uninstalled():  # vanilla: built, compiled and called without innergraph
        _, vanilla = _second_derivative(get_mode(linker))
    np.testing.assert_allclose(value, vanilla, rtol=1e-12)
    np.testing.assert_allclose(value, -11.695098684398006, rtol=1e-12)
    for node in fn.maker.fgraph.apply_nodes:  # every mit-mot is one whose two offsets agree
        if isinstance(node.op, NativeScan):
            info = node.op.info
            for taps_in, taps_out in zip(info.mit_mot_in_slices, info.mit_mot_out_slices, strict=True):
                assert min(0, *taps_in) == min(0, *taps_out), info
