"""The alpha-equivalence laws, on random closed bodies (hypothesis; see innergraph.testing).

Profiles: ``ci`` (the default: 200 examples per law, deterministic; law 5, whose examples
compile, 100) and ``thorough`` (``--hypothesis-profile=thorough``: 3,000 for every law);
``repeat``: 25.
"""

from typing import Any

import numpy as np
import pytensor
import pytensor.tensor as pt
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from pytensor.compile.mode import Mode, get_default_mode
from pytensor.graph.basic import equal_computations
from pytensor.graph.fg import FunctionGraph
from pytensor.graph.rewriting.basic import MergeOptimizer
from pytensor.ifelse import ifelse as native_ifelse
from pytensor.link.vm import VMLinker

import innergraph
from innergraph import graph_stats
from innergraph.testing import assert_alpha_equivalent, assert_not_alpha_equivalent
from innergraph.testing.recipes import IDENTITIES, build_function, build_outputs, mutate, mutations, recipes, sample_arguments
from profiles import examples
from vanilla import vanilla_function
from typed import call, grad

#: Law 5's examples under the ``ci`` profile (its bodies compile: fewer than the other laws' 200).
LAW5_CI_EXAMPLES = 100


def merged(*functions):
    fg = FunctionGraph(outputs=list(functions), clone=True)
    MergeOptimizer().rewrite(fg)
    return fg.outputs


def inputs_for(recipe, prefix="x"):
    return [pt.tensor(dtype=p.dtype, shape=p.static, name=f"{prefix}{i}") for i, p in enumerate(recipe.params)]


@given(recipes(), st.integers(0, 1000), st.integers(0, 1000))
def test_law1_alpha_equivalent_bodies_merge_into_one_object(recipe, seed_a, seed_b):
    a = build_function(recipe, prefix="a", order_seed=seed_a).function
    b = build_function(recipe, prefix="b", order_seed=seed_b).function
    assert a is not b
    assert_alpha_equivalent(a, b)
    out_a, out_b = merged(a, b)
    assert out_a is out_b


@given(recipes(), mutations())
def test_law2_bodies_that_differ_in_meaning_never_merge(recipe, mutation):
    changed = mutate(recipe, *mutation)
    assume(changed is not None)
    assert changed is not None
    a = build_function(recipe).function
    b = build_function(changed).function
    assert_not_alpha_equivalent(a, b)
    out_a, out_b = merged(a, b)
    assert out_a is not out_b


@st.composite
def pairs(draw):
    first = draw(recipes())
    how = draw(st.sampled_from(["same", "mutated", "independent"]))
    if how == "same":
        return first, first
    if how == "mutated":
        changed = mutate(first, *draw(mutations()))
        return first, changed if changed is not None else first
    return first, draw(recipes())


@given(pairs())
def test_law3_merging_agrees_with_equal_computations(pair):
    first, second = pair
    a, b = build_function(first).function, build_function(second).function
    out_a, out_b = merged(a, b)
    assert (out_a is out_b) == classic_fgraphs_equal(first, second)


def classic_fgraphs_equal(first, second):
    """The oracle: equal input types and `equal_computations` on the outputs.

    `equal_computations` only walks from the outputs, so the inputs' types (an unused
    input's included) are compared separately, as FunctionGraph equivalence requires.
    """
    ins_a, ins_b = inputs_for(first, "u"), inputs_for(second, "v")
    if [v.type for v in ins_a] != [v.type for v in ins_b]:
        return False
    outputs_a: list[Any] = build_outputs(first, ins_a)
    outputs_b: list[Any] = build_outputs(second, ins_b)
    return equal_computations(outputs_a, outputs_b, ins_a, ins_b)


FAST_RUN_REWRITES = get_default_mode().excluding("inplace").optimizer


@given(recipes(nesting=0), st.sampled_from(sorted(IDENTITIES)), st.integers(0, 20))
def test_law4_bodies_equal_up_to_canonicalization_become_one(recipe, identity, where):
    from dataclasses import replace

    n = len(recipe.params)
    live_steps = sorted(v - n for v in recipe.live() if v >= n)
    k = live_steps[where % len(live_steps)]
    padded = replace(recipe, steps=(*recipe.steps[:k], replace(recipe.steps[k], identity=identity), *recipe.steps[k + 1 :]))
    a, b = build_function(recipe).function, build_function(padded).function
    assert_not_alpha_equivalent(a, b)  # different before rewriting: frozen graphs cannot merge them
    args = inputs_for(recipe)
    out_a, out_b = call(a, *args), call(b, *args)
    fg = FunctionGraph(args, [pt.as_tensor(out_a if not isinstance(out_a, list) else out_a[0]),
                              pt.as_tensor(out_b if not isinstance(out_b, list) else out_b[0])], clone=True)
    FAST_RUN_REWRITES.rewrite(fg)
    assert fg.outputs[0] is fg.outputs[1], (graph_stats(fg), fg.outputs)


# PyTensor's `py` linker cannot run Scan gradients (preallocated mit-mot outputs need a VM);
# a VM with Python thunks needs no C compilation, which keeps each example fast.
VM = Mode(linker=VMLinker(use_cloop=False, c_thunks=False), optimizer="fast_run")


def program(recipe, kind, n_steps, flavor, inputs, nested="call"):
    """A loop and/or a conditional around the recipe's body; returns a float64 scalar.

    ``nested``: how the recipe's nested bodies are built (`build_outputs`).
    """
    scan = innergraph.scan if flavor == "innergraph" else pytensor.scan
    cond = innergraph.ifelse if flavor == "innergraph" else native_ifelse
    first, others = inputs[0], inputs[1:]
    parts = []
    if kind in ("loop", "both"):
        def step(y, *rest):
            out = build_outputs(recipe, [y, *rest], nested=nested)[0]
            return pt.cast(y * 0.5 + pt.tanh(out).sum() * 0.25, y.dtype)

        ys = scan(step, outputs_info=[first], non_sequences=others, n_steps=n_steps, mode=VM, return_updates=False)
        parts.append(ys.sum())
    if kind in ("conditional", "both"):
        then = pt.tanh(build_outputs(recipe, inputs, nested=nested)[0]).sum()
        parts.append(cond(inputs[0].sum() > 0, pt.cast(then, "float64"), pt.cast((inputs[-1] ** 2).sum(), "float64")))
    return pt.add(*[pt.cast(p, "float64") for p in parts])


# Each example compiles two programs and their gradients (about 0.5 s): 100 examples under
# CI's profile (half its 200: CI's time budget); the other profiles' counts as they are.
@settings(max_examples=examples(ci=LAW5_CI_EXAMPLES))
@given(recipes(max_steps=4, nesting=1), st.sampled_from(["loop", "conditional", "both"]), st.integers(1, 3),
       st.sampled_from(["native", "innergraph"]), st.integers(0, 2**16))
def test_law5_lift_rewrite_lower_never_changes_results(recipe, kind, n_steps, flavor, seed):
    inputs = inputs_for(recipe)

    def with_grads(out):
        return [out, *grad(out, inputs, disconnected_inputs="ignore")]

    ours = pytensor.function(inputs, with_grads(program(recipe, kind, n_steps, flavor, inputs)), mode=VM)
    values = sample_arguments(recipe, np.random.default_rng(seed))
    # vanilla: PyTensor's own scan and ifelse, nested bodies inlined (a `call` needs innergraph)
    expected = vanilla_function(lambda: (inputs, with_grads(program(recipe, kind, n_steps, "native", inputs, nested="inline"))), VM)
    tol = 1e-4 if any(p.dtype == "float32" for p in recipe.params) else 1e-10
    for got, want in zip(ours(*values), expected(*values), strict=True):
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
