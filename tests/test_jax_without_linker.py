"""A graph converted with ``jax_funcify`` directly, without a JAX linker (`innergraph.patching.on_import`).

PyMC's ``get_jaxified_graph`` (pymc-extras' statespace models, PyMC's JAX samplers)
rewrites a `FunctionGraph` with the JAX mode's rewriter and calls ``jax_funcify`` on it:
no linker, so the patched schedule never loaded innergraph's JAX implementations, and an
in-graph conditional left in a lowered Scan's body raised ``NotImplementedError: No JAX
conversion for the given Op: IfElse{in-graph, lazy}`` (pymc-extras'
``test_kalman_filter_jax[cholesky]``). Each case runs in a fresh interpreter: what is
tested is the order of imports (the dispatch module imported after innergraph, before it,
and after ``uninstall``), in either form: the library's `ImportHook` on a released PyTensor,
the dispatch module's call of ``dispatch_loaded`` on a patched one. Values are compared with NumPy.
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
    from pytensor.conditional.op import ifelse

    x, m = pt.vector("x"), pt.matrix("m")

    # a lazy in-graph conditional in the loop's body (PyTensor's own after `uninstall`)
    cond = ifelse if sys.argv[1] == "uninstalled" else innergraph.ifelse

    def step(xt, acc, m):
        return cond(pt.gt(xt, 0), pt.tanh(pt.dot(m, acc)) + xt, pt.exp(acc) * 2.0)

    loop = pytensor.scan(step, sequences=[x], outputs_info=[pt.ones(2)], non_sequences=[m], return_updates=False)
    # the conditional alone, outside any loop: no pass of the JAX mode's rewriter asks innergraph
    # for the JAX linker's implementations (a loop's does: that would load them anyway), so
    # only the import hook loads them
    alone = cond(pt.gt(x[0], 0), pt.tanh(pt.dot(m, x[:2])), pt.exp(x[:2]) * 2.0)
    outs = [alone] if sys.argv[1] == "unhooked" else [loop, alone]

    def converted(mode):
        fg = FunctionGraph([x, m], outs, clone=True)
        mode.optimizer.rewrite(fg)
        from pytensor.link.jax.dispatch import jax_funcify
        return jax_funcify(fg)

    xv, mv = np.array([1.0, -2.0, 3.0, 0.5]), np.array([[0.5, 0.1], [0.2, 0.3]])
    trace, acc = [], np.ones(2)
    for xt in xv:
        acc = np.tanh(mv @ acc) + xt if xt > 0 else np.exp(acc) * 2.0
        trace.append(acc)
    expected = [np.tanh(mv @ xv[:2])] if sys.argv[1] == "unhooked" else [np.asarray(trace), np.tanh(mv @ xv[:2])]
    try:
        fn = converted(get_mode("JAX"))
    except NotImplementedError as err:
        print(backend(), err)
        raise SystemExit(0)
    for got, want in zip(fn(xv, mv), expected, strict=True):
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-12)
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
        # file): nothing converts the in-graph conditional in the lowered loop's body
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
