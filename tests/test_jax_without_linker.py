"""A graph converted with ``jax_funcify`` directly, without a JAX linker (`innergraph.patching.on_import`).

PyMC's ``get_jaxified_graph`` (pymc-extras' statespace models, PyMC's JAX samplers)
rewrites a `FunctionGraph` with the JAX mode's rewriter and calls ``jax_funcify`` on it:
no linker, so the patched schedule never loaded innergraph's JAX implementations, and a
lifted conditional left in a lowered Scan's body raised ``NotImplementedError: No JAX
conversion for the given Op: IfElse{in-graph, lazy}`` (pymc-extras'
``test_kalman_filter_jax[cholesky]``). Each case runs in a fresh interpreter: what is
tested is the order of imports (the dispatch module imported after innergraph, before it,
and after ``uninstall``), in either form: the library's `ImportHook` on a released PyTensor,
the dispatch module's call of ``dispatch_loaded`` on a patched one. Values are compared with NumPy and with the same graph rewritten
without innergraph (``get_mode("JAX").excluding("innergraph")``).
"""

import subprocess
import sys
import textwrap

import pytest

PROGRAM = textwrap.dedent(
    """
    import sys
    if sys.argv[1] == "before":
        import pytensor.link.jax.dispatch  # noqa: F401  (the dispatch module first)
    import innergraph
    from innergraph.patching.on_import import ImportHook

    def backend():  # innergraph's generated JAX conversions (the conditional's) loaded, in either form
        names = ("innergraph.backends.jax_generated", "pytensor.innergraph.backends.jax_generated")
        return "backend" if any(name in sys.modules for name in names) else "no backend"
    if sys.argv[1] == "uninstalled":
        innergraph.uninstall()
    if sys.argv[1] == "linker":  # a JAX link first: the schedule imports the backend, which imports the dispatch
        pytensor_ = __import__("pytensor")
        y = __import__("pytensor.tensor", fromlist=["dvector"]).dvector("y")
        assert pytensor_.function([y], y * 2, mode="JAX")([1.0])[0] == 2.0
    if sys.argv[1] == "unhooked":  # innergraph without this module's hook: the bug
        sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, ImportHook)]
    import numpy as np
    import pytensor
    import pytensor.tensor as pt
    from pytensor.compile.mode import get_mode
    from pytensor.graph.fg import FunctionGraph
    from pytensor.ifelse import ifelse

    x, m = pt.vector("x"), pt.matrix("m")

    def step(xt, acc, m):  # branches with work: innergraph lifts the conditional
        return ifelse(pt.gt(xt, 0), pt.tanh(pt.dot(m, acc)) + xt, pt.exp(acc) * 2.0)

    out = pytensor.scan(step, sequences=[x], outputs_info=[pt.ones(2)], non_sequences=[m], return_updates=False)

    def converted(mode):
        fg = FunctionGraph([x, m], [out], clone=True)
        mode.optimizer.rewrite(fg)
        from pytensor.link.jax.dispatch import jax_funcify
        return jax_funcify(fg)

    xv, mv = np.array([1.0, -2.0, 3.0, 0.5]), np.array([[0.5, 0.1], [0.2, 0.3]])
    expected, acc = [], np.ones(2)
    for xt in xv:
        acc = np.tanh(mv @ acc) + xt if xt > 0 else np.exp(acc) * 2.0
        expected.append(acc)
    try:
        fn = converted(get_mode("JAX"))
    except NotImplementedError as err:
        print(backend(), err)
        raise SystemExit(0)
    reference = converted(get_mode("JAX").excluding("innergraph"))
    got = np.asarray(fn(xv, mv)[0])
    np.testing.assert_allclose(got, np.asarray(expected), rtol=1e-12)
    np.testing.assert_array_equal(got, np.asarray(reference(xv, mv)[0]))
    print(backend(), "equal")
    """
)


@pytest.mark.parametrize(
    ("order", "outcome"),
    [
        ("after", "backend equal"),  # innergraph imported first, as `-p innergraph` or a user's first import does
        ("before", "backend equal"),  # the dispatch module imported first: `install` loads the backends
        ("linker", "backend equal"),  # a JAX link before: the backend imports the dispatch
        ("uninstalled", "no backend equal"),  # after `uninstall` nothing loads them (and nothing needs them)
        # without the hook (the code before the fix; a patched PyTensor's hook is in its own
        # file): PyTensor's Scan conversion rewrites the body, innergraph lifts its
        # conditional, and nothing converts it
        pytest.param(
            "unhooked",
            "no backend No JAX conversion for the given `Op`: IfElse{in-graph, lazy}",
            marks=pytest.mark.monkey_patch_only,
        ),
    ],
)
def test_jax_funcify_without_a_linker(order: str, outcome: str) -> None:
    run = subprocess.run([sys.executable, "-c", PROGRAM, order], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.strip().splitlines()[-1] == outcome
