"""Benchmark and demonstration cases: real graphs built for vanilla PyTensor and for innergraph.

Terms
-----
case
    A `Case`: a graph builder, the input values to call it with, and the linker
    it is compiled with. `pytensor.function` on the built graph is what gets
    measured.
variant
    ``"vanilla"`` (built and compiled with innergraph uninstalled: PyTensor as
    released, `innergraph_bench.bench.as_variant`) or ``"innergraph"`` (the default pipeline: lift, rewrite, lower). Most cases
    build the *same* graph for both; a case whose graph needs an innergraph
    builder (`innergraph.ifelse`, `innergraph.call`) builds PyTensor's own
    construct for vanilla (`pytensor.ifelse.ifelse`, `OpFromGraph`).
group
    The issue's case number (``"1"`` .. ``"7"``), ``"ofg"`` for PyTensor's own
    `OpFromGraph` lifted by the pipeline, ``"jax"`` for cases 1 and 5 under the JAX
    linker, plus ``"demo"`` for cases only the demonstration needs; `CASES` lists
    every case of the default run in report order.
family
    Cases that differ only in the number K of consumers sharing one body
    (``"shared"``: `shared_step`, issue 22). The bench reports, per family, the
    compile time against K and its slope (seconds per extra loop). They are left
    out of the default run (`FAMILY_CASES`; ``--cases shared`` selects them).

The builders are plain functions, so the pytest benchmarks (``tests/benchmarks``),
``python -m innergraph`` and ``python -m innergraph bench`` measure the very same
graphs.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Sequence
from typing import Any, cast

import numpy as np
import pytensor
import pytensor.tensor as pt
from pytensor.compile.builders import OpFromGraph
from pytensor.conditional.op import ifelse as vanilla_ifelse
from pytensor.raise_op import Assert

import innergraph
from innergraph_bench.case import VARIANTS, Case, Graph
from innergraph_bench.cases_loops import loop_cases

__all__ = [
    "CASES",
    "VARIANTS",
    "Case",
    "ar2",
    "checkpoint_cases",
    "checkpointed_filter",
    "elementwise_chain",
    "filter_loglik",
    "filter_step",
    "garch",
    "identical_scans",
    "ifelse_heavy",
    "jax_cases",
    "issue_1669",
    "nested_scan",
    "ofg_unused_output",
    "scan_over_sequences",
    "FAMILY_CASES",
    "select",
    "shared_step",
    "student_t",
    "student_t_ofg",
    "trivial_scan",
]

def _grad(cost: Any, wrt: list[Any]) -> list[Any]:
    grads: Any = pytensor.grad(cost, wrt)
    return list(grads)


# Case 1 ------------------------------------------------------------------------------


def issue_1669(order: int) -> Case:
    """PyTensor #1669: the ``order``-th derivative of ``ys[-1]`` of a 4-step ``y ** 2`` scan."""

    def build(variant: str) -> Graph:
        x0 = pt.dscalar("x0")
        ys = pytensor.scan(lambda y: y**2, outputs_info=[x0], n_steps=4, return_updates=False)
        out = ys[-1]
        for _ in range(order):
            out = pytensor.grad(out, x0)
        return [x0], [out]

    nth = {2: "2nd", 3: "3rd"}[order]
    title = f"#1669: {nth} derivative of a 4-step y**2 scan"
    return Case(f"1669-d{order}", "1", title, build, [np.float64(1.1)], params={"order": order})


# Case 2 ------------------------------------------------------------------------------


def _decay_step(x_t: Any, acc: Any) -> Any:
    return acc * 0.9 + pt.sin(x_t) * pt.exp(-(x_t**2))


def scan_over_sequences(k: int, length: int = 100) -> Case:
    """The same step function scanned over ``k`` different sequences, results summed."""

    def build(variant: str) -> Graph:
        xs = [pt.dvector(f"x{i}") for i in range(k)]
        a = pt.dscalar("a")
        finals = [
            pytensor.scan(_decay_step, sequences=[x], outputs_info=[a], return_updates=False)[-1] for x in xs
        ]
        return [*xs, a], [pt.add(*finals) if k > 1 else finals[0]]

    rng = np.random.default_rng(2)
    values = [rng.normal(size=length) for _ in range(k)] + [np.float64(0.3)]
    title = f"one step function scanned over K={k} sequences"
    return Case(f"seqs-K{k}", "2", title, build, values, params={"K": k})


# Case 3 ------------------------------------------------------------------------------

_UNARY: tuple[Callable[[Any], Any], ...] = (
    lambda y: y + 0.1,
    pt.sin,
    lambda y: y * 0.9,
    pt.tanh,
    pt.cos,
)


def elementwise_chain(y: Any, n_ops: int) -> Any:
    """``n_ops`` elementwise ops applied in turn (add, sin, mul, tanh, cos, add, ...)."""
    for i in range(n_ops):
        y = _UNARY[i % len(_UNARY)](y)
    return y


def identical_scans(n_ops: int, k: int = 4, steps: int = 50, size: int = 8) -> Case:
    """``k`` identical Scans over the same input, each body ``n_ops`` elementwise ops."""

    def build(variant: str) -> Graph:
        x0 = pt.dvector("x0")
        finals = [
            pytensor.scan(
                lambda y: elementwise_chain(y, n_ops), outputs_info=[x0], n_steps=steps, return_updates=False
            )[-1]
            for _ in range(k)
        ]
        return [x0], [pt.add(*finals).sum()]

    values = [np.linspace(-1, 1, size)]
    title = f"K={k} identical scans, body of {n_ops} elementwise ops"
    return Case(f"same-{n_ops}ops", "3", title, build, values, params={"K": k, "ops": n_ops})


# Issue 22: one body shared by K loops ---------------------------------------------------


def shared_step(n_ops: int, k: int, length: int = 100) -> Case:
    """One step ``0.9 * acc + f(x_t)`` (``f``: ``n_ops`` elementwise ops) scanned over ``k`` sequences, summed.

    Family ``"shared"``: ``params`` holds ``K`` and ``ops``, so the bench can fit the
    compile time against K for each step size. The state decays: a plain sum
    ``acc + f(x_t)`` is no loop at all once innergraph pushes ``f`` out
    (`innergraph.rewriting.push_out.push_out_dot_sums` sums the sequence), and the
    family measures K loops over one body.
    """

    def build(variant: str) -> Graph:
        xs = [pt.dvector(f"x{i}") for i in range(k)]
        a = pt.dscalar("a")

        def step(x_t: Any, acc: Any) -> Any:
            return 0.9 * acc + elementwise_chain(x_t, n_ops)

        finals = [pytensor.scan(step, sequences=[x], outputs_info=[a], return_updates=False)[-1] for x in xs]
        return [*xs, a], [pt.add(*finals) if k > 1 else finals[0]]

    rng = np.random.default_rng(22)
    values = [rng.normal(size=length) for _ in range(k)] + [np.float64(0.3)]
    title = f"a step of {n_ops} elementwise ops scanned over K={k} sequences"
    return Case(f"shared-{n_ops}ops-K{k}", "shared", title, build, values, params={"K": k, "ops": n_ops, "family": "shared"})


# Case 4 ------------------------------------------------------------------------------


def nested_scan(outer_steps: int = 20, inner_steps: int = 5) -> Case:
    """A scan whose step runs a scan, and the gradient w.r.t. the sequence, state and weight."""

    def build(variant: str) -> Graph:
        xs, x0, w = pt.dvector("xs"), pt.dscalar("x0"), pt.dscalar("w")

        def outer_step(x_t: Any, acc: Any, w_: Any) -> Any:
            inner = pytensor.scan(
                lambda a, x_, w__: pt.sin(a) * w__ + x_,
                outputs_info=[acc],
                non_sequences=[x_t, w_],
                n_steps=inner_steps,
                return_updates=False,
            )
            return inner[-1]

        ys = pytensor.scan(outer_step, sequences=[xs], outputs_info=[x0], non_sequences=[w], return_updates=False)
        cost = (ys**2).sum()
        return [xs, x0, w], [cost, *_grad(cost, [xs, x0, w])]

    values = [np.linspace(0, 1, outer_steps), np.float64(0.2), np.float64(0.7)]
    title = f"nested scan ({outer_steps} x {inner_steps} steps) + gradient"
    return Case("nested", "4", title, build, values, rtol=1e-9)


# Case 5 ------------------------------------------------------------------------------


def _normal_logp(r: Any, sigma2: Any) -> Any:
    return -0.5 * (np.log(2 * np.pi) + pt.log(sigma2) + r**2 / sigma2)


def ar2(n: int = 1000) -> Case:
    """AR(2) log-likelihood over ``n`` points, accumulated by a scan, and its gradient."""

    def build(variant: str) -> Graph:
        y = pt.dvector("y")
        phi1, phi2, sigma = pt.dscalar("phi1"), pt.dscalar("phi2"), pt.dscalar("sigma")

        def step(y_t: Any, y_tm1: Any, y_tm2: Any, acc: Any, p1: Any, p2: Any, s: Any) -> Any:
            return acc + _normal_logp(y_t - p1 * y_tm1 - p2 * y_tm2, s**2)

        acc = pytensor.scan(
            step,
            sequences=[{"input": y, "taps": [0, -1, -2]}],
            outputs_info=[pt.constant(0.0, dtype="float64")],
            non_sequences=[phi1, phi2, sigma],
            return_updates=False,
        )
        logp = acc[-1]
        return [y, phi1, phi2, sigma], [logp, *_grad(logp, [phi1, phi2, sigma])]

    rng = np.random.default_rng(5)
    data = np.zeros(n)
    for t in range(2, n):
        data[t] = 0.5 * data[t - 1] - 0.3 * data[t - 2] + rng.normal()
    values = [data, np.float64(0.4), np.float64(-0.2), np.float64(1.1)]
    return Case("ar2", "5", f"AR(2) log-likelihood over {n} points + gradient", build, values, rtol=1e-9)


def garch(n: int = 1000) -> Case:
    """GARCH(1,1): the variance recursion by scan, the log-likelihood and its gradient."""

    def build(variant: str) -> Graph:
        r = pt.dvector("r")
        omega, alpha, beta = pt.dscalar("omega"), pt.dscalar("alpha"), pt.dscalar("beta")
        sigma2 = pytensor.scan(
            lambda r_tm1, s2_tm1, o, a, b: o + a * r_tm1**2 + b * s2_tm1,
            sequences=[r[:-1]],
            outputs_info=[pt.var(r)],
            non_sequences=[omega, alpha, beta],
            return_updates=False,
        )
        logp = _normal_logp(r[1:], sigma2).sum()
        return [r, omega, alpha, beta], [logp, *_grad(logp, [omega, alpha, beta])]

    rng = np.random.default_rng(6)
    values = [rng.standard_t(5, size=n) * 0.5, np.float64(0.05), np.float64(0.1), np.float64(0.85)]
    return Case("garch", "5", f"GARCH(1,1) log-likelihood over {n} points + gradient", build, values, rtol=1e-9)


# Issue 24 ----------------------------------------------------------------------------


def filter_step(y_t: Any, m: Any, v: Any, ll: Any, phi: Any, q: Any, r: Any) -> list[Any]:
    """One step of a scalar Kalman filter: the mean, the variance and the running log-likelihood."""
    pred_m, pred_v = phi * m, phi**2 * v + q
    gain = pred_v / (pred_v + r)
    innovation = y_t - pred_m
    return [pred_m + gain * innovation, (1 - gain) * pred_v, ll + _normal_logp(innovation, pred_v + r)]


def filter_loglik(n: int = 1000) -> Case:
    """A filter with three carried states (mean, variance, log-likelihood) over two series, and its gradient.

    Each series is its own scan, so the gradient has a reverse loop per series with
    one cotangent per state: vanilla keeps six full-length buffers nobody reads.
    """

    def build(variant: str) -> Graph:
        y1, y2 = pt.dvector("y1"), pt.dvector("y2")
        phi, q, r = pt.dscalar("phi"), pt.dscalar("q"), pt.dscalar("r")
        zero, one = pt.constant(0.0, dtype="float64"), pt.constant(1.0, dtype="float64")
        total = 0
        for y in (y1, y2):
            _, _, ll = pytensor.scan(
                filter_step, sequences=[y], outputs_info=[zero, one, zero], non_sequences=[phi, q, r], return_updates=False
            )
            total = total + ll[-1]
        return [y1, y2, phi, q, r], [total, *_grad(total, [phi, q, r])]

    rng = np.random.default_rng(24)
    values: list[Any] = [np.cumsum(rng.normal(size=n)) * 0.1, np.cumsum(rng.normal(size=n)) * 0.1]
    values += [np.float64(0.9), np.float64(0.2), np.float64(0.5)]
    title = f"filter (mean, variance, log-likelihood) over 2 series of {n} points + gradient"
    return Case("filter", "24", title, build, values, rtol=1e-9, params={"n": n})


# Case 6 ------------------------------------------------------------------------------


def ifelse_heavy(size: int = 500, n_conditionals: int = 4, guard: bool = False, plain: bool = False) -> Case:
    """Conditionals whose untaken branch solves a ``size`` x ``size`` system.

    The then branch (cheap) is taken for the benchmark's inputs. innergraph builds
    the conditionals with `innergraph.ifelse`, vanilla with `pytensor.ifelse.ifelse`;
    both are compiled with the Numba linker, where PyTensor's IfElse is lazy since
    3.3.6 (it evaluated both branches before: PyTensor issue #501). With ``plain=True``
    both variants build them with `pytensor.ifelse.ifelse` (case ``ifelse-plain``:
    innergraph leaves PyTensor's lazy IfElse as it is). With ``guard=True`` every expensive branch
    first asserts that it is allowed to run (it never is, for the given inputs):
    evaluating it raises ``AssertionError`` — timing-free evidence of laziness.
    """

    def build(variant: str) -> Graph:
        in_graph = variant == "innergraph" and not plain
        cond_fn: Callable[..., Any] = innergraph.ifelse if in_graph else vanilla_ifelse
        a, b, x = pt.dmatrix("A"), pt.dvector("b"), pt.dscalar("x")
        outs = []
        for i in range(n_conditionals):
            shifted = a + (i + 1) * pt.eye(size)
            if guard:
                shifted = Assert(f"expensive branch {i} ran")(shifted, pt.lt(x, 0))
            slow = pt.linalg.solve(shifted, b).sum()
            fast = (b * x).sum() + i
            outs.append(cond_fn(pt.gt(x, 0), fast, slow))
        return [a, b, x], [pt.add(*outs)]

    rng = np.random.default_rng(7)
    values = [rng.normal(size=(size, size)), rng.normal(size=size), np.float64(1.5)]
    if plain:
        title = f"{n_conditionals} plain pytensor.ifelse, untaken branch a {size}x{size} solve (PyTensor's IfElse in both)"
        return Case("ifelse-plain", "6", title, build, values, params={"size": size})
    title = f"{n_conditionals} conditionals, untaken branch a {size}x{size} solve (innergraph.ifelse vs IfElse)"
    return Case("ifelse", "6", title, build, values, params={"size": size})


# Case 7 ------------------------------------------------------------------------------


def trivial_scan(linker: str, steps: int = 10_000, scan: Callable[..., Any] = pytensor.scan) -> Case:
    """``x_t = x_{t-1} + 1`` over ``steps`` steps, the whole trace returned.

    Returning the trace keeps PyTensor's save-memory rewrite (which only native
    Scans get) from changing the work per step.
    """

    def build(variant: str) -> Graph:
        x0 = pt.dscalar("x0")
        ys = scan(lambda y: y + 1, outputs_info=[x0], n_steps=steps, return_updates=False)
        return [x0], [ys]

    title = f"trivial scan, {steps:,} steps, {linker} linker (per-step cost)"
    return Case(f"step-{linker}", "7", title, build, [np.float64(0.5)], linker=linker)


# Demonstration ------------------------------------------------------------------------


def student_t_logp(x: Any, mu: Any, sigma: Any) -> Any:
    """The Student-t (nu = 4) log-density of ``x``, summed."""
    nu = 4.0
    z = (x - mu) / sigma
    return (
        pt.gammaln((nu + 1) / 2)
        - pt.gammaln(nu / 2)
        - 0.5 * pt.log(nu * np.pi)
        - pt.log(sigma)
        - (nu + 1) / 2 * pt.log1p(z**2 / nu)
    ).sum()


def student_t(k: int = 8) -> Case:
    """A log-density helper applied to ``k`` data sets, plus its gradient.

    Vanilla wraps the helper in an `OpFromGraph` per call site; innergraph uses
    `innergraph.call`.
    """

    def build(variant: str) -> Graph:
        mu, sigma = pt.dscalar("mu"), pt.dscalar("sigma")
        data = [pt.dvector(f"x{i}") for i in range(k)]
        terms = []
        for x in data:
            if variant == "innergraph":
                terms.append(innergraph.call(student_t_logp, x, mu, sigma))
            else:
                xs, m, s = pt.dvector(), pt.dscalar(), pt.dscalar()
                terms.append(OpFromGraph([xs, m, s], [student_t_logp(xs, m, s)])(x, mu, sigma))
        logp = pt.add(*terms)
        return [*data, mu, sigma], [logp, *_grad(logp, [mu, sigma])]

    rng = np.random.default_rng(0)
    values = [rng.standard_t(4, size=200) + i for i in range(k)] + [np.float64(0.5), np.float64(1.5)]
    title = f"Student-t log-likelihood over K={k} data sets + gradient (OpFromGraph vs innergraph.call)"
    return Case(f"student-t-K{k}", "demo", title, build, values, params={"K": k})


# OpFromGraph lifted by the pipeline ----------------------------------------------------


def student_t_ofg(k: int = 8) -> Case:
    """`student_t` with an `OpFromGraph` per call site in both variants: the pipeline's lift at work.

    Both variants build the same graph (PyTensor's own construct); innergraph lifts
    the OpFromGraphs (one body, compiled once), vanilla keeps them.
    """

    def build(variant: str) -> Graph:
        mu, sigma = pt.dscalar("mu"), pt.dscalar("sigma")
        data = [pt.dvector(f"x{i}") for i in range(k)]
        terms = []
        for x in data:
            xs, m, s = pt.dvector(), pt.dscalar(), pt.dscalar()
            terms.append(OpFromGraph([xs, m, s], [student_t_logp(xs, m, s)])(x, mu, sigma))
        logp = pt.add(*terms)
        return [*data, mu, sigma], [logp, *_grad(logp, [mu, sigma])]

    base = student_t(k)
    title = f"Student-t log-likelihood over K={k} data sets + gradient, OpFromGraph in both variants"
    return Case(f"student-t-ofg-K{k}", "ofg", title, build, base.values, params={"K": k})


def ofg_unused_output(size: int = 200) -> Case:
    """A plain `OpFromGraph` returning a cheap and an expensive output, of which only the cheap one is used.

    PyTensor issue #697: vanilla computes the unused output (a ``size`` x ``size``
    matrix product and its ``tanh``) on every call; innergraph lifts the Op and
    drops it.
    """

    def build(variant: str) -> Graph:
        a, b = pt.dmatrix("a"), pt.dmatrix("b")
        p, q = pt.dmatrix(), pt.dmatrix()
        op = OpFromGraph([p, q], [(p * q).sum(axis=0), pt.tanh(p @ q)])
        used, _ = cast(list[Any], op(a, b, return_list=True))
        return [a, b], [used]

    rng = np.random.default_rng(8)
    values = [rng.normal(size=(size, size)), rng.normal(size=(size, size))]
    title = f"OpFromGraph with an unused output ({size}x{size} product), PyTensor #697"
    return Case("ofg-unused", "ofg", title, build, values, params={"size": size})


# Checkpointing -----------------------------------------------------------------------


def checkpointed_filter(n: int, policy: Any = None, linker: str = "numba") -> Case:
    """The filter step of `filter_loglik` over one series of ``n`` points + gradient, under a checkpoint policy.

    ``policy`` is the checkpoint policy its gradient is built under (`innergraph.ops.checkpoint`):
    ``None`` stores every step, ``"sqrt"`` stores ``sqrt(n)`` segment carries.
    """

    def build(variant: str) -> Graph:
        y, phi, q, r = pt.dvector("y"), pt.dscalar("phi"), pt.dscalar("q"), pt.dscalar("r")
        zero = pt.constant(0.0, dtype="float64")
        _, _, ll = pytensor.scan(filter_step, sequences=[y], outputs_info=[zero, zero + 1, zero], non_sequences=[phi, q, r], return_updates=False)
        with innergraph.checkpointing(policy):
            grads = _grad(ll[-1], [phi, q, r])
        return [y, phi, q, r], [ll[-1], *grads]

    values = [np.random.default_rng(3).normal(size=n), np.float64(0.8), np.float64(0.5), np.float64(0.3)]
    tag = "" if policy is None else f"-ckpt-{policy}"
    title = f"filter log-likelihood over {n} points + gradient, {'stored trace' if policy is None else f'checkpointed ({policy})'}"
    return Case(f"filter-{n}{tag}", "checkpoint", title, build, values, linker=linker, rtol=1e-9, params={"n": n, "policy": policy})


def checkpoint_cases() -> list[Case]:
    """The checkpointing cases (group ``"checkpoint"``): not in the default run, selected by ``--cases``."""
    return [checkpointed_filter(n, policy) for n in (1_000, 100_000) for policy in (None, "sqrt")]


def all_cases() -> list[Case]:
    """Every benchmark case, in report order (cases 1-7, then the demonstration's)."""
    return [
        issue_1669(2),
        issue_1669(3),
        *(scan_over_sequences(k) for k in (1, 2, 4, 8, 16)),
        # issue 48: innergraph's own rewrite time on K loops over one 50-op step, in every run
        # (its compile target, 0.15x, went unmeasured while the family ran only on request)
        shared_step(50, 16),
        *(identical_scans(n) for n in (5, 50, 500)),
        nested_scan(),
        ar2(),
        garch(),
        filter_loglik(),
        ifelse_heavy(),
        ifelse_heavy(plain=True),
        *(trivial_scan(linker) for linker in ("numba", "cvm", "py")),
        student_t(),
        student_t_ofg(),
        ofg_unused_output(),
        *jax_cases(),
        *loop_cases(),
    ]


def jax_cases() -> list[Case]:
    """Cases 1 and 5 under the JAX linker (group ``"jax"``): the lowered Scans' JAX conversions.

    The inputs get the static shapes of the case's values: PyTensor's JAX Scan
    (vanilla's too) cannot run a loop over a vector of unknown length under ``jit``.
    """
    import dataclasses

    cases = [issue_1669(2), ar2(), garch()]
    return [
        dataclasses.replace(
            case,
            id=f"{case.id}-jax",
            group="jax",
            title=f"{case.title}, JAX linker",
            build=_with_static_shapes(case),
            linker="jax",
        )
        for case in cases
    ]


def _with_static_shapes(case: Case) -> Callable[[str], Graph]:
    """``case.build``, its inputs replaced by inputs of the static shapes of ``case.values``."""

    def build(variant: str) -> Graph:
        inputs, outputs = case.build(variant)
        fixed = [pt.tensor(v.name, dtype=v.type.dtype, shape=np.shape(value)) for v, value in zip(inputs, case.values, strict=True)]
        from pytensor.graph.replace import clone_replace

        replaced = clone_replace(outputs, dict(zip(inputs, fixed, strict=True)), rebuild_strict=False)
        return fixed, list(replaced)

    return build


#: Every case of the default run, in report order.
CASES: list[Case] = all_cases()

#: Case families, measured only on request (``--cases shared``): issue 22's step of
#: 5 / 50 / 200 elementwise ops over K = 1, 4, 16, 64 sequences.
FAMILY_CASES: list[Case] = [shared_step(n, k) for n in (5, 50, 200) for k in (1, 4, 16, 64)]


def select(patterns: Sequence[str] | None, cases: Sequence[Case] | None = None) -> list[Case]:
    """The cases whose id or group matches one of ``patterns`` (`CASES` when empty).

    Without ``cases``, patterns are matched against `CASES` and `FAMILY_CASES`.

    A pattern matches a case when it equals the case's group, or matches its id
    as a shell-style pattern (`fnmatch`): ``["1", "seqs-K16", "same-*"]`` selects
    both #1669 cases, case 2 at K = 16 and every case 3.

    Raises
    ------
    ValueError
        If a pattern matches no case.
    """
    if not patterns:
        return list(CASES if cases is None else cases)
    if cases is None:
        family = {c.id for c in FAMILY_CASES}  # shared-50ops-K16 is in both; it is listed in its family's order
        cases = [*(c for c in CASES if c.id not in family), *FAMILY_CASES, *checkpoint_cases()]  # optional cases answer to patterns only
    chosen: list[Case] = []
    for pattern in patterns:
        hits = [c for c in cases if c.group == pattern or fnmatch.fnmatchcase(c.id, pattern)]
        if not hits:
            known = ", ".join(c.id for c in cases)
            raise ValueError(f"no benchmark case matches {pattern!r}; cases: {known}")
        chosen += [c for c in hits if c not in chosen]
    return [c for c in cases if c in chosen]
