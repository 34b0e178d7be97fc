"""Real PyMC models as benchmark cases: the NUTS function of five time-series models and four without loops.

Terms
-----
NUTS function
    What ``model.logp_dlogp_function(ravel_inputs=True)`` compiles: the model's
    joint log density and its gradient, one function of the raveled free
    (transformed) values. `nuts_graph` builds that graph the way PyMC's
    ``ValueGradFunction`` does, and the cases compile it with
    ``pymc.pytensorf.compile`` (PyMC's compile: its own rewrites on top of the mode).
model builder
    A function of no argument that returns a fresh ``pm.Model``, built with PyMC's
    and pymc-extras' public APIs on synthetic data (fixed seeds).

The models (issues 21 and 39): a structural time series (level + trend, AR(2),
measurement error; Kalman filter by scan), SARIMAX(2,0,1), VARMAX(1,0), and a
GARCH(1,1) likelihood written once with ``pm.Potential`` and once generatively with
``pm.CustomDist(dist=...)``, whose logp PyMC derives from the scan, and K = 8 and 32
GARCH(1,1) groups written with a Python loop, one scan per group (`garch_groups`).

Four models without control flow (`PLAIN_MODELS`) check the other half of the promise:
where innergraph cannot help it stays out of the way (the compiled graph is vanilla's,
the compile costs what vanilla's does): eight schools (non-centred), a Student-t
regression on 10 predictors, a hierarchical logistic regression over 20 groups, and a
three-component Normal mixture with ordered means.

PyMC and pymc-extras are imported when a model is built, never when this module is
imported: the project's own environment has no PyMC (``pip install -e ".[pymc]"``
brings it). The module itself imports nothing of innergraph at run time (only
`nuts_case` does), so a vanilla process can load it by path and build the same
models without installing innergraph.
"""

from __future__ import annotations

import contextvars
import fnmatch
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from innergraph_bench.case import Case, Graph  # not .cases: loading the models must not import innergraph

__all__ = [
    "MODELS",
    "PLAIN_MODELS",
    "build",
    "eight_schools",
    "garch_custom_dist",
    "garch_custom_dist_mean",
    "garch_groups",
    "garch_potential",
    "hierarchical_logistic",
    "normal_mixture",
    "nuts_case",
    "nuts_graph",
    "pymc_cases",
    "sarimax",
    "structural",
    "student_t_regression",
    "varmax",
]

_SEED = 2026

#: How much the edited prior's scale is multiplied by (`build` with ``edited=True``).
_EDIT: contextvars.ContextVar[float] = contextvars.ContextVar("innergraph_bench_prior_edit", default=1.0)


def _edited(scale: float) -> float:
    """``scale``, times the edit `build` asks for: one prior per model reads its scale through this."""
    return scale * _EDIT.get()


def _series(n: int, k: int = 1) -> np.ndarray:
    """A synthetic AR(1)-plus-trend series, ``n`` x ``k``."""
    rng = np.random.default_rng(_SEED)
    y = np.zeros((n, k))
    for t in range(1, n):
        y[t] = 0.7 * y[t - 1] + rng.normal(scale=0.5, size=k)
    return y + 0.01 * np.arange(n)[:, None]


def _priors(mod: Any) -> None:
    """Priors for every parameter of a pymc-extras state-space model, from its ``param_info``."""
    import pymc as pm
    import pytensor.tensor as pt

    for i, name in enumerate(mod.param_names):
        info = mod.param_info[name]
        edit = _edited(1.0) if i == 0 else 1.0
        shape, dims, constraint = info["shape"], info.get("dims"), (info.get("constraints") or "").lower()
        if "definite" in constraint:  # a covariance: a diagonal one from positive scales
            scales = pm.HalfNormal(f"{name}_scale", sigma=0.5 * edit, shape=shape[0])
            pm.Deterministic(name, pt.diag(scales**2), dims=dims)
        elif "positive" in constraint:
            pm.HalfNormal(name, sigma=0.5 * edit, shape=shape, dims=dims)
        else:
            pm.Normal(name, sigma=0.3 * edit, shape=shape, dims=dims)


def _statespace_model(mod: Any, data: np.ndarray) -> Any:
    import pandas as pd
    import pymc as pm

    index = pd.date_range("2000-01-01", periods=len(data), freq="D")
    frame = pd.DataFrame(data, index=index, columns=list(mod.coords["observed_state"]))
    with pm.Model(coords=mod.coords) as model:
        _priors(mod)
        mod.build_statespace_graph(frame)
    return model


def structural(n: int = 100) -> Any:
    """Level + trend, AR(2) and measurement error (pymc-extras structural components)."""
    from pymc_extras.statespace import structural as st

    mod = (st.LevelTrend(order=2) + st.Autoregressive(order=2) + st.MeasurementError()).build(verbose=False)
    return _statespace_model(mod, _series(n))


def sarimax(n: int = 100) -> Any:
    """SARIMAX(2,0,1) (pymc-extras ``BayesianSARIMAX``)."""
    from pymc_extras.statespace.models.SARIMAX import BayesianSARIMAX

    return _statespace_model(BayesianSARIMAX(order=(2, 0, 1), verbose=False), _series(n))


def varmax(n: int = 100) -> Any:
    """VARMAX(1,0) on two series (pymc-extras ``BayesianVARMAX``)."""
    from pymc_extras.statespace.models.VARMAX import BayesianVARMAX

    mod = BayesianVARMAX(order=(1, 0), endog_names=["y1", "y2"], verbose=False)
    return _statespace_model(mod, _series(n, 2))


def _returns(n: int) -> np.ndarray:
    """Synthetic GARCH(1,1) returns (omega 0.05, alpha 0.1, beta 0.85)."""
    rng = np.random.default_rng(_SEED)
    y, s2 = np.zeros(n), 1.0
    for t in range(1, n):
        s2 = 0.05 + 0.1 * y[t - 1] ** 2 + 0.85 * s2
        y[t] = rng.normal(scale=np.sqrt(s2))
    return y


def _garch_priors() -> tuple[Any, Any, Any]:
    import pymc as pm

    return pm.HalfNormal("omega", sigma=_edited(0.2)), pm.Beta("alpha", 2.0, 10.0), pm.Beta("beta", 10.0, 2.0)


def garch_potential(n: int = 200) -> Any:
    """GARCH(1,1): the variance recursion by scan, its Normal likelihood as a ``pm.Potential``."""
    import pymc as pm
    import pytensor
    import pytensor.tensor as pt

    y = _returns(n)
    with pm.Model() as model:
        omega, alpha, beta = _garch_priors()
        sigma2 = pytensor.scan(
            lambda y_tm1, s2_tm1, o, a, b: o + a * y_tm1**2 + b * s2_tm1,
            sequences=[pt.as_tensor(y[:-1])],
            outputs_info=[pt.as_tensor(np.var(y))],
            non_sequences=[omega, alpha, beta],
            return_updates=False,
        )
        pm.Potential("likelihood", pm.logp(pm.Normal.dist(0.0, pt.sqrt(sigma2)), y[1:]).sum())
    return model


def garch_custom_dist(n: int = 200) -> Any:
    """GARCH(1,1) written generatively with ``pm.CustomDist(dist=...)``: PyMC derives the logp from the scan."""
    import pymc as pm
    import pytensor
    import pytensor.tensor as pt
    from pymc.pytensorf import collect_default_updates

    y = _returns(n)

    def step(y_tm1: Any, s2_tm1: Any, o: Any, a: Any, b: Any) -> Any:
        s2 = o + a * y_tm1**2 + b * s2_tm1
        y_t = pm.Normal.dist(0.0, pt.sqrt(s2))
        return (y_t, s2), collect_default_updates([y_t])

    def dist(o: Any, a: Any, b: Any, s2_0: Any, size: Any) -> Any:
        with warnings.catch_warnings():  # the RNG updates are the point: PyMC needs them
            warnings.filterwarnings("ignore", "Scan return signature will change", DeprecationWarning)
            (ys, _), _ = pytensor.scan(
                step,
                outputs_info=[pt.zeros(()), s2_0],
                non_sequences=[o, a, b],
                n_steps=n,
                strict=True,
                return_updates=True,
            )
        return ys

    with pm.Model() as model:
        omega, alpha, beta = _garch_priors()
        pm.CustomDist("y", omega, alpha, beta, np.var(y), dist=dist, observed=y)
    return model


def garch_custom_dist_mean(n: int = 500) -> Any:
    """GARCH(1,1) with a mean, written generatively (``pm.CustomDist(dist=...)``), 500 points.

    Unlike `garch_custom_dist`: a mean ``mu`` inside the recursion (``(y - mu) ** 2``
    and ``Normal(mu, ...)``) and other priors (Exponential, Uniform, Beta(8, 2)), so
    the gradient loop's step has more elementwise work per row of the observed series,
    the work the sequence push-out would move out of the loop (issue 48).
    """
    import pymc as pm
    import pytensor
    import pytensor.tensor as pt
    from pymc.pytensorf import collect_default_updates

    y = _returns(n) + 0.02

    def step(y_tm1: Any, s2_tm1: Any, m: Any, o: Any, a: Any, b: Any) -> Any:
        s2 = o + a * (y_tm1 - m) ** 2 + b * s2_tm1
        y_t = pm.Normal.dist(m, pt.sqrt(s2))
        return (y_t, s2), collect_default_updates([y_t])

    def dist(m: Any, o: Any, a: Any, b: Any, s2_0: Any, size: Any) -> Any:
        with warnings.catch_warnings():  # the RNG updates are the point: PyMC needs them
            warnings.filterwarnings("ignore", "Scan return signature will change", DeprecationWarning)
            (ys, _), _ = pytensor.scan(
                step,
                outputs_info=[m + pt.zeros(()), s2_0],
                non_sequences=[m, o, a, b],
                n_steps=n,
                strict=True,
                return_updates=True,
            )
        return ys

    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, _edited(0.1))
        omega = pm.Exponential("omega", 20.0)
        alpha = pm.Uniform("alpha", 0.0, 0.5)
        beta = pm.Beta("beta", 8.0, 2.0)
        pm.CustomDist("y", mu, omega, alpha, beta, np.var(y), dist=dist, observed=y)
    return model


def garch_groups(k: int = 8, n: int = 200) -> Any:
    """``k`` GARCH(1,1) series, one variance recursion per group, each its own ``pytensor.scan``.

    The shape a hierarchical time-series model takes when written the plain way: a
    Python loop over groups, each group's returns a constant sequence, its three
    parameters indexed from vectors, its likelihood a ``pm.Potential``. Every group's
    step is the same function, so PyTensor's ``scan_merge`` fuses the ``k`` loops.
    """
    import pymc as pm
    import pytensor
    import pytensor.tensor as pt

    rng = np.random.default_rng(_SEED)
    ys = [_returns(n) * (1.0 + 0.1 * g) for g in range(k)]
    with pm.Model() as model:
        omega = pm.HalfNormal("omega", sigma=_edited(0.2), shape=k)
        alpha = pm.Beta("alpha", 2.0, 10.0, shape=k)
        beta = pm.Beta("beta", 10.0, 2.0, shape=k)
        for g, y in enumerate(ys):
            y = y + 0.01 * rng.normal(size=n)
            sigma2 = pytensor.scan(
                lambda y_tm1, s2_tm1, o, a, b: o + a * y_tm1**2 + b * s2_tm1,
                sequences=[pt.as_tensor(y[:-1])],
                outputs_info=[pt.as_tensor(np.var(y))],
                non_sequences=[omega[g], alpha[g], beta[g]],
                return_updates=False,
            )
            pm.Potential(f"likelihood_{g}", pm.logp(pm.Normal.dist(0.0, pt.sqrt(sigma2)), y[1:]).sum())
    return model


#: The models, by case id.
MODELS: dict[str, tuple[str, Callable[[], Any]]] = {
    "pymc-structural": ("structural time series (trend + AR(2) + measurement error), Kalman filter", structural),
    "pymc-sarimax": ("SARIMAX(2,0,1), Kalman filter", sarimax),
    "pymc-varmax": ("VARMAX(1,0), two series, Kalman filter", varmax),
    "pymc-garch-potential": ("GARCH(1,1) likelihood as pm.Potential", garch_potential),
    "pymc-garch-customdist": ("GARCH(1,1) as pm.CustomDist(dist=...), logp derived by PyMC", garch_custom_dist),
    "pymc-garch-customdist-mean": ("GARCH(1,1) with a mean, 500 points, as pm.CustomDist(dist=...)", garch_custom_dist_mean),
    "pymc-groups-8": ("8 GARCH(1,1) groups, one scan each in a Python loop", lambda: garch_groups(8)),
    "pymc-groups-32": ("32 GARCH(1,1) groups, one scan each in a Python loop", lambda: garch_groups(32)),
}


def eight_schools() -> Any:
    """Eight schools, non-centred: the classic hierarchical model (no loop)."""
    import pymc as pm

    y = np.array([28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0])
    sigma = np.array([15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0])
    with pm.Model() as model:
        mu, tau = pm.Normal("mu", 0.0, _edited(5.0)), pm.HalfCauchy("tau", 5.0)
        theta = pm.Normal("theta", 0.0, 1.0, shape=8)
        pm.Normal("y", mu + tau * theta, sigma, observed=y)
    return model


def student_t_regression(n: int = 500, k: int = 10) -> Any:
    """A robust linear regression: Student-t noise, ``k`` predictors, ``n`` rows (no loop)."""
    import pymc as pm

    rng = np.random.default_rng(_SEED)
    x = rng.normal(size=(n, k))
    y = x @ rng.normal(size=k) + rng.standard_t(4, size=n)
    with pm.Model() as model:
        b, a, s = pm.Normal("b", 0.0, 1.0, shape=k), pm.Normal("a", 0.0, _edited(1.0)), pm.HalfNormal("s", 1.0)
        pm.StudentT("y", nu=4, mu=a + pm.math.dot(x, b), sigma=s, observed=y)
    return model


def hierarchical_logistic(n: int = 1000, groups: int = 20) -> Any:
    """A logistic regression with a non-centred intercept per group (indexing, no loop)."""
    import pymc as pm

    rng = np.random.default_rng(_SEED)
    group, x = rng.integers(0, groups, n), rng.normal(size=n)
    y = rng.integers(0, 2, n)
    with pm.Model() as model:
        mu, sd = pm.Normal("mu", 0.0, _edited(1.0)), pm.HalfNormal("sd", 1.0)
        z, beta = pm.Normal("z", 0.0, 1.0, shape=groups), pm.Normal("beta", 0.0, 1.0)
        pm.Bernoulli("y", logit_p=mu + sd * z[group] + beta * x, observed=y)
    return model


def normal_mixture(n: int = 300) -> Any:
    """Three Normal components with ordered means and Dirichlet weights (logsumexp, no loop)."""
    import pymc as pm

    rng = np.random.default_rng(_SEED)
    y = np.concatenate([rng.normal(-2.0, 1.0, n), rng.normal(3.0, 1.0, n)])
    with pm.Model() as model:
        w = pm.Dirichlet("w", np.ones(3))
        mu = pm.Normal("mu", 0.0, 5.0, shape=3, transform=pm.distributions.transforms.ordered, initval=[-1.0, 0.0, 1.0])
        pm.NormalMixture("y", w=w, mu=mu, sigma=pm.HalfNormal("sd", _edited(2.0), shape=3), observed=y)
    return model


#: Models without control flow, by case id: innergraph must leave them as vanilla compiles them.
PLAIN_MODELS: dict[str, tuple[str, Callable[[], Any]]] = {
    "pymc-eight-schools": ("eight schools, non-centred (no loop)", eight_schools),
    "pymc-student-t-regression": ("Student-t regression, 10 predictors (no loop)", student_t_regression),
    "pymc-hierarchical-logistic": ("hierarchical logistic regression, 20 groups (no loop)", hierarchical_logistic),
    "pymc-normal-mixture": ("three-component Normal mixture (no loop)", normal_mixture),
}


def build(case_id: str, edited: bool = False) -> Any:
    """The model of case ``case_id``, as built; ``edited``: with one prior's scale changed (x 1.5).

    The edit changes a constant of the logp graph and nothing of its loops: the
    edited model's NUTS function is a new function whose loop bodies are the
    original's.
    """
    _, builder = {**MODELS, **PLAIN_MODELS}[case_id]
    token = _EDIT.set(1.5 if edited else 1.0)
    try:
        return builder()
    finally:
        _EDIT.reset(token)


def nuts_graph(model: Any) -> tuple[Graph, np.ndarray]:
    """The NUTS function's graph, as ``ValueGradFunction`` builds it, and a point to evaluate it at.

    Returns ``(([raveled values], [logp, gradient]), point)``: the point is the model's
    initial point, raveled, moved by a fixed small offset (so no parameter sits at a
    prior's mode).
    """
    import pytensor
    import pytensor.tensor as pt
    from pymc.blocking import DictToArrayBijection
    from pymc.pytensorf import join_nonshared_inputs, rewrite_pregrad

    grad_vars = model.continuous_value_vars
    initial = model.initial_point()
    cost = rewrite_pregrad(model.logp())
    grads: Any = pytensor.grad(cost, grad_vars, disconnected_inputs="ignore")
    outputs, raveled = join_nonshared_inputs(
        point=initial, inputs=grad_vars, outputs=[cost, pt.join(0, *[g.ravel() for g in grads])], make_inputs_shared=False
    )
    values = DictToArrayBijection.map({v.name: initial[v.name] for v in grad_vars}).data
    point = values + 0.05 * np.cos(np.arange(values.size))
    return ([raveled], list(outputs)), point


def _pymc_compile(inputs: list[Any], outputs: list[Any], mode: Any) -> Any:
    from pymc.pytensorf import compile as pymc_compile

    return pymc_compile(inputs, outputs, mode=mode)


def nuts_case(case_id: str) -> Case:
    """The benchmark `Case` of one of `MODELS`: its NUTS function, compiled with PyMC's compile."""
    title, build_model = {**MODELS, **PLAIN_MODELS}[case_id]
    _, point = nuts_graph(build_model())

    def build(variant: str) -> Graph:
        graph, _ = nuts_graph(build_model())
        return graph

    return Case(case_id, "pymc", f"NUTS function (logp + gradient) of {title}", build, [point], rtol=1e-8, compile=_pymc_compile)


def pymc_cases(patterns: Sequence[str] | None = None) -> list[Case]:
    """The PyMC cases whose id matches one of ``patterns`` (shell-style; all when empty), in report order.

    Builds each chosen model once (for its point); `innergraph_bench.cases.select` rules.

    Raises
    ------
    ValueError
        If a pattern matches no case.
    """
    every = [*MODELS, *PLAIN_MODELS]
    for pattern in patterns or ():
        if not fnmatch.filter(every, pattern) and pattern != "pymc":
            raise ValueError(f"no PyMC benchmark case matches {pattern!r}; cases: {', '.join(every)}")
    chosen = [i for i in every if not patterns or any(p == "pymc" or fnmatch.fnmatchcase(i, p) for p in patterns)]
    return [nuts_case(case_id) for case_id in chosen]
