"""Under Numba, a function's float constants are arguments: an edited number reuses the compiled code.

`innergraph.rewriting.link_arguments` hides the float constants of a function's graph
from fusion; `innergraph.backends.numba_link` passes them (and every other float
constant) to the compiled function as arguments and compiles the converted graph once.
Checked here: values against vanilla PyTensor under Numba (fused elementwise code,
fused reductions, packed numbers of several dtypes, arrays, a constant output, in-place
work beside the pool, loop bodies), the compiled function's cache key independent of
the numbers and dependent on everything else, the user's graph untouched, and, in fresh
processes sharing a compile directory, an edited function taken from Numba's disk cache.
"""

import json
import os
import subprocess
import sys
import textwrap

from typing import Any

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.graph.basic import Constant
from pytensor.graph.fg import FunctionGraph
from pytensor.link.numba.cache import CACHED_SRC_FUNCTIONS
from pytensor.scalar.basic import ScalarType
from pytensor.tensor.basic import Alloc
from pytensor.tensor.elemwise import DimShuffle
from pytensor.tensor.rewriting.fused_elemwise import FusedElemwise
from pytensor.tensor.rewriting.scalarize import ScalarizedElemwise

import innergraph
from innergraph.backends.numba_link import final_function, outline_constants_for_link
from innergraph.ops.link_argument import LinkArgument, PoolRead
from innergraph.rewriting.link_arguments import link_float_constants
from vanilla import vanilla_function

NUMBA = "NUMBA"


def _final_key(fn):
    """The cache key the compiled function's final Numba dispatcher was registered under."""
    jitted = final_function(fn.vm.jit_fn)
    return CACHED_SRC_FUNCTIONS.get(jitted.py_func)


def _params(fn):
    code = final_function(fn.vm.jit_fn).py_func.__code__
    return code.co_varnames[: code.co_argcount]


def _smoothed(x):
    """A loop over ``x`` (graphs without a loop keep their numbers in their code)."""
    return pytensor.scan(lambda v, c: 0.5 * c + v, sequences=[x], outputs_info=[pt.zeros(())], return_updates=False)[-1]


def _density(scale, shift=3.7, power=2):
    def build():
        x = pt.dvector("x")
        y = pt.exp(-0.5 * (x / scale) ** power).sum() + pt.log(x.sum() + shift) + _smoothed(x)
        return [x], [y, pytensor.grad(y, x)]

    return build


def _ours(build):
    inputs, outputs = build()
    return pytensor.function(inputs, outputs, mode=NUMBA)


def _check(build, *args):
    ours, vanilla = _ours(build), vanilla_function(build, mode=NUMBA)
    for _ in range(2):  # a second call reads the same numbers: nothing wrote into them
        for got, want in zip(ours(*args), vanilla(*args), strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-14, atol=0)
    return ours


def test_an_edited_number_keeps_the_compiled_functions_key():
    a, b = _check(_density(1.5), np.arange(1.0, 5.0)), _check(_density(2.5), np.arange(1.0, 5.0))
    assert _final_key(a) is not None and _final_key(a) == _final_key(b)
    assert "outlined_float64" in _params(a)


def test_the_rule_is_by_type_not_by_value():
    # 2.0 and 0.5 are as round as numbers get, 1/3 is not: the key stays (1.0 would not: `x / 1.0` is
    # rewritten away, a decision taken on the value, which is the rewriter's to take)
    keys = {_final_key(_ours(_density(scale, shift))) for scale, shift in [(2.0, 0.5), (1.5, 3.7), (1 / 3, 12.0)]}
    assert len(keys) == 1 and None not in keys


def test_a_number_that_equals_another_or_stops_equalling_it_keeps_the_key():
    # two priors of scale 0.3 share one merged constant; edit one (0.45) and they are two constants:
    # every use is its own argument, so the sharing is not in the code (the structural model's
    # edited rerun recompiled its outer function for this)
    def build(first, second):
        def graph():
            x, y = pt.dvector("x"), pt.dvector("y")
            logp = (-0.5 * (x / first) ** 2).sum() + (-0.5 * (y / second) ** 2).sum() + _smoothed(x)
            gradient: Any = pytensor.grad(logp, x)
            return [x, y], [logp, gradient]
        return graph

    values = (np.arange(1.0, 5.0), np.arange(2.0, 6.0))
    shared, apart = _check(build(0.3, 0.3), *values), _check(build(0.45, 0.3), *values)
    assert _final_key(shared) is not None and _final_key(shared) == _final_key(apart)
    uses = [n.op.use for n in shared.maker.fgraph.apply_nodes if isinstance(n.op, LinkArgument)]
    assert sorted(uses) == list(range(len(uses))) and len(uses) >= 2  # one argument per use, numbered in order


def test_an_edit_that_makes_two_numbers_of_one_node_equal_keeps_the_key():
    # `b` is met first (in `x * b`), then `clip(x, a, b)` reads `a` before it: uses numbered by node
    # alone, in the order their constants were found, would number clip's two inputs one way when a and
    # b are two constants and the other way when they are one merged constant. The compiled code's
    # numbering (`numba_link.outline_constants_for_link`, by node and input) must not depend on it
    def build(a, b):
        def graph():
            x = pt.dvector("x")
            y = (x * b).sum() + pt.clip(x, a, b).sum() + _smoothed(x)
            return [x], [y]
        return graph

    x = np.linspace(-1.0, 1.0, 7)
    shared, apart = _check(build(0.3, 0.3), x), _check(build(0.2, 0.3), x)  # 0.25 would be float32: a type
    assert _final_key(shared) is not None and _final_key(shared) == _final_key(apart)


def test_the_count_is_the_uses_wrapped_and_zero_where_the_rule_does_not_apply():
    x, v = pt.dscalar("x"), pt.dvector("v")

    def graph(loop):
        fgraph = FunctionGraph([x, v], [x * 1.5 + 2.5 + (_smoothed(v) if loop else v.sum())], clone=True)
        fgraph.update_mapping = {}  # a function's own graph, as `pytensor.function` makes it
        return fgraph

    with pytensor.config.change_flags(mode=NUMBA):
        looped, plain = graph(True), graph(False)
        assert link_float_constants(looped) == 2 == sum(isinstance(n.op, LinkArgument) for n in looped.apply_nodes)
        assert link_float_constants(plain) == 0
    assert not any(isinstance(n.op, LinkArgument) for n in plain.apply_nodes)


def test_a_changed_integer_or_structure_changes_the_key():
    base = _final_key(_ours(_density(1.5)))
    assert _final_key(_ours(_density(1.5, power=3))) != base  # an integer exponent stays baked
    def other():
        x = pt.dvector("x")
        y = pt.exp(-0.5 * (x / 1.5) ** 2).sum() + pt.log(x.sum() * 3.7) + _smoothed(x)  # * for +
        return [x], [y, pytensor.grad(y, x)]

    assert _final_key(_ours(other)) != base


def test_numbers_of_several_dtypes_arrays_and_a_constant_output():
    def build():
        x = pt.dvector("x")
        f = pt.fvector("f")
        c = pt.zvector("c")
        data = np.linspace(0.5, 2.0, 7)
        strided = np.arange(20.0)[::3]  # not contiguous, as PyTensor keeps it
        y = (x * data).sum() * np.float64(1.25) + pt.sqrt(x[:6] + strided[:6]).sum() + pt.concatenate([x, np.zeros(0)]).sum()
        y = y + _smoothed(x)
        g = (f * np.float32(0.3) + np.float32(1.5)).sum()
        z = (c * (0.5 + 2.0j)).real.sum()
        return [x, f, c], [y, g, z, pt.constant(np.array([1.0, 2.0]))]

    ours = _check(build, np.linspace(1.0, 2.0, 7), np.arange(3, dtype="float32"), np.array([1 + 1j, 2 - 1j]))
    assert {"outlined_float64", "outlined_float32", "outlined_complex128"} <= set(_params(ours))
    # an array is wrapped as it is, a tensor argument (a single number is a scalar one); the pass's errors
    # are only warnings (`on_opt_error`), so without this a pass that failed would go unnoticed here
    arrays = [n for n in ours.maker.fgraph.apply_nodes if isinstance(n.op, LinkArgument) and n.inputs[0].data.size > 1]
    assert arrays and all(n.outputs[0].type == n.inputs[0].type for n in arrays)


def test_in_place_work_beside_the_pool_leaves_the_numbers_alone():
    def build():
        x = pt.dvector("x")
        a = pt.exp(x) + 2.5  # an elementwise node that may overwrite its input in place
        b = a * 0.5 + _smoothed(x)
        return [x], [b, (b + 2.5).sum()]

    _check(build, np.arange(4.0))


def test_a_loop_body_keeps_its_numbers_and_its_values():
    def build():
        x0 = pt.dscalar("x0")
        xs = pt.dvector("xs")
        ys = pytensor.scan(lambda v, c: 0.9 * c + 0.3 * v, sequences=[xs], outputs_info=[x0], return_updates=False)
        y = (ys * 1.7).sum()
        return [x0, xs], [y, pytensor.grad(y, x0)]

    _check(build, 0.4, np.linspace(0.0, 1.0, 6))


def test_a_single_number_reaches_the_fused_loop_as_a_scalar_read_by_one_node():
    # as a broadcast array input instead, each number cost the fused loop an input and the outer
    # function a slice, a dimshuffle and a conversion (about 5% of the grouped model's cold start)
    ours = _check(_density(1.5), np.arange(1.0, 5.0))
    graph = ours.maker.fgraph
    arguments = [n.outputs[0] for n in graph.apply_nodes if isinstance(n.op, LinkArgument)]
    assert arguments and all(isinstance(a.type, ScalarType) for a in arguments)
    fused = [n for n in graph.apply_nodes if isinstance(n.op, FusedElemwise | ScalarizedElemwise)]
    assert any(i in arguments for n in fused for i in n.inputs)  # PyTensor's scalarize pass took them natively
    outlined = outline_constants_for_link(graph, graph.toposort(), {})
    (pool,) = [i for i in outlined.fgraph.inputs if i.name == "outlined_float64"]
    reads = [client for client, _ in outlined.fgraph.clients[pool]]
    scalar_reads = [n for n in reads if isinstance(n.op, PoolRead)]
    assert len(scalar_reads) == len(arguments)  # one node each; the other reads are views for arrays (Alloc's fill)
    assert all(isinstance(client.op, Alloc | DimShuffle) for n in reads if n not in scalar_reads for client, _ in outlined.fgraph.clients[n.outputs[0]])


def test_the_users_graph_is_not_changed():
    inputs, outputs = _density(1.5)()
    fn = pytensor.function(inputs, outputs, mode=NUMBA)
    fn(np.arange(1.0, 4.0))
    graph = fn.maker.fgraph
    assert any(isinstance(n.op, LinkArgument) for n in graph.apply_nodes)  # the rewrite's own node, as compiled
    assert all(isinstance(i, Constant) for n in graph.apply_nodes if isinstance(n.op, LinkArgument) for i in n.inputs)
    assert len(graph.inputs) == 1  # the pool is the linker's, not the function's


def test_a_graph_without_a_loop_keeps_its_numbers_and_is_compiled_once():
    def build():
        x = pt.dvector("x")
        y = pt.exp(-0.5 * (x / 1.5) ** 2).sum() + pt.log(x.sum() + 3.7)
        return [x], [y, pytensor.grad(y, x)]

    ours = _check(build, np.arange(1.0, 5.0))
    assert not any(isinstance(n.op, LinkArgument) for n in ours.maker.fgraph.apply_nodes)
    assert _params(ours) == ("x",)  # no pool: the numbers are in the code, as vanilla has them
    assert "_innergraph_outlined_final" in _final_key(ours)  # the converted graph itself, compiled once


def test_vanilla_bakes_the_numbers_in():
    fn = vanilla_function(_density(1.5), mode=NUMBA, first_call=[np.arange(1.0, 4.0)])
    assert not any(isinstance(n.op, LinkArgument) for n in fn.maker.fgraph.apply_nodes)
    assert final_function(fn.vm.jit_fn).py_func.__source__.startswith("def numba_funcified_fgraph(*args)")  # PyTensor's own wrapper


def test_other_linkers_never_see_link_arguments():
    inputs, outputs = _density(1.5)()
    fn = pytensor.function(inputs, outputs, mode=pytensor.compile.mode.Mode(linker="cvm", optimizer="fast_run"))
    assert not any(isinstance(n.op, LinkArgument) for n in fn.maker.fgraph.apply_nodes)


_CHILD = textwrap.dedent(
    """
    import json, sys
    import numpy as np, pytensor, pytensor.tensor as pt
    import innergraph
    scale = float(sys.argv[1])
    x = pt.dvector("x")
    y = pt.exp(-0.5 * (x / scale) ** 2).sum() + pt.log(x.sum() + 3.7)
    y = y + pytensor.scan(lambda v, c: 0.5 * c + v, sequences=[x], outputs_info=[pt.zeros(())], return_updates=False)[-1]
    fn = pytensor.function([x], [y, pytensor.grad(y, x)], mode="NUMBA")
    value = fn(np.arange(1.0, 4.0))
    from innergraph.backends.numba_link import final_function
    stats = final_function(fn.vm.jit_fn).stats
    print(json.dumps({"hits": sum(stats.cache_hits.values()), "misses": sum(stats.cache_misses.values()),
                      "value": float(value[0])}))
    """
)


def _child(compiledir, scale):
    env = {**os.environ, "PYTENSOR_FLAGS": f"base_compiledir={compiledir}"}
    done = subprocess.run([sys.executable, "-c", _CHILD, str(scale)], env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_an_edited_function_comes_from_numbas_disk_cache_in_a_new_process(tmp_path):
    first = _child(tmp_path, 1.5)
    edited = _child(tmp_path, 2.5)
    assert (first["hits"], first["misses"]) == (0, 1)
    assert (edited["hits"], edited["misses"]) == (1, 0)
    want = np.exp(-0.5 * (np.arange(1.0, 4.0) / 2.5) ** 2).sum() + np.log(6.0 + 3.7) + (0.25 * 1 + 0.5 * 2 + 3)
    assert edited["value"] == pytest.approx(want, rel=1e-14)


def test_uninstalled_numba_linker_is_pytensors():
    from pytensor.link.numba.linker import NumbaLinker

    with innergraph.uninstalled():
        assert NumbaLinker.fgraph_convert.__module__.startswith("pytensor")
        assert NumbaLinker.jit_compile.__module__.startswith("pytensor")


def test_jit_fn_takes_the_graphs_inputs_only_from_numba_code():
    """``fn.vm.jit_fn`` called from Numba code with the graph's inputs gives the function's value.

    nutpie calls a compiled function's ``vm.jit_fn`` from its own jitted function with the
    graph's inputs only; the final function also takes the outlined constants, so nutpie
    failed to type it (``Cannot bind args=(array(float64, 1d, C),)``) on every model with a loop.
    """
    import numba

    def build():
        x = pt.dvector("x")
        ys = pytensor.scan(lambda v, c: c * 0.9 + v, sequences=[x], outputs_info=[pt.as_tensor_variable(np.float64(0.0))], return_updates=False)
        return [x], ys[-1] * 1.7 + pt.exp(x * 0.3).sum()

    inputs, output = build()
    fn = pytensor.function(inputs, output, mode="NUMBA")
    assert final_function(fn.vm.jit_fn).py_func.__code__.co_argcount > 1  # the final function takes outlined constants too
    inner = fn.vm.jit_fn

    @numba.njit
    def outer(a):
        return inner(a)

    v = np.arange(1.0, 5.0)
    (got,) = outer(v)
    expected = vanilla_function(build, mode="NUMBA")(v)
    np.testing.assert_allclose(got, expected, rtol=1e-14)
    assert float(fn(v)) == pytest.approx(float(expected), rel=1e-14)
    (from_python,) = inner(v)  # called from Python with the graph's inputs, as vanilla's jit_fn can be
    np.testing.assert_allclose(from_python, expected, rtol=1e-14)
