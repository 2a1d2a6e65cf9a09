"""The differentiable learning curve (`headflow.dynamics.ode.learning_curve`,
`docs/differentiable.md`):
gradients of the three functionals (risk at T, time-averaged risk, time to reach a risk level)
with respect to every differentiable parameter against central finite differences of whole
solves (float64, tight tolerances), the backsolve adjoint against the recursive one, and the
curve against `run_ode`; the SDE ensemble's mean curve
(`headflow.dynamics.sde.SDECurve`) against
`run_sde` and its forward-mode Jacobian against finite differences."""

from __future__ import annotations

from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _util import xla_optimizations

from headflow.dynamics import ConfigError, load_config
from headflow.dynamics.models.attention import PARAMS
from headflow.dynamics.ode import (LearningCurve, final_risk, learning_curve, mean_risk, run_ode,
                                   time_to_risk)
from headflow.dynamics.sde import SDECurve, run_sde
from headflow.validation.experiments.fit import jacobian_and_curve


@pytest.fixture(autouse=True, scope="module")
def _fast_compile():
    # a few large programs (a solve and its reverse pass) that then run briefly
    with xla_optimizations(False):
        yield


# softmax1 (its bias is not a gauge: the bias terms move the risk), label noise, weight decay
# and a non-zero initial bias, so every parameter has a visible effect
BASE = ["model.L=2", "model.H=1", "model.activation=softmax1", "model.noise=0.2",
        "training.weight_decay=0.05", "training.init_bias=0.3", "training.lr=0.8",
        "training.lr_bias=1.5", "training.init_key_std=0.3", "training.init_value_std=0.2",
        "training.t_max=6", "output.n_save=13", "ode.samples=64", "ode.rtol=1e-10",
        "ode.atol=1e-12", "prior.amplitude=2.0"]
SCHEDULES = ['training.lr_schedule={kind = "log", times = [0.5, 2, 6], values = [1.2, 0.7, 0.3]}',
             "training.lr_bias_schedule={times = [0, 3, 6], values = [2.0, 1.0, 0.5]}"]
RTOL = 1e-4


def _functionals(curve: LearningCurve, level):
    def f(params):
        risk = curve(params)
        return jnp.stack([final_risk(risk), mean_risk(curve.ts, risk),
                          time_to_risk(curve.ts, risk, level)])
    return f


# one program each for the curve with its functionals and for their reverse-mode Jacobian: the
# level is an argument (a traced scalar), not a constant of a new closure
@eqx.filter_jit
def _curve_and_functionals(curve: LearningCurve, params, level):
    return curve(params), _functionals(curve, level)(params)


@eqx.filter_jit
def _jacobian(curve: LearningCurve, params, level):
    return jax.jacrev(_functionals(curve, level))(params)


class _Point(NamedTuple):
    curve: LearningCurve
    p0: dict
    level: jax.Array
    jac: dict


def _point(cfg_overrides: list[str]) -> _Point:
    """The curve of a config at its defaults, the level its risk crosses between two save
    points, and the Jacobian of the three functionals there."""
    curve = LearningCurve.from_config(load_config(None, cfg_overrides))
    p0 = curve.defaults()
    # the level a strong-typed float64 (`jnp.asarray(0.0)` is weakly typed, a second program
    # for the same shapes): this call, the finite differences and the Jacobian share one
    risk, _ = _curve_and_functionals(curve, p0, jnp.asarray(0.0, jnp.float64))
    risk = np.asarray(risk)
    assert np.all(np.isfinite(risk)) and risk[-1] < risk[0]
    level = jnp.asarray(0.5 * (risk[0] + risk[-1]), jnp.float64)   # crossed between two saves
    return _Point(curve, p0, level, _jacobian(curve, p0, level))


@pytest.fixture(scope="module")
def base_point() -> _Point:
    """`BASE` at its defaults (shared by the finite differences and the adjoints' test)."""
    return _point(BASE)


def _check_against_fd(point: _Point, names: tuple[str, ...]) -> None:
    curve, p0, level, jac = point
    for name in names:
        x0 = np.asarray(p0[name])
        flat = x0.reshape(-1)
        for i in range(flat.size):
            h = 1e-4 * max(abs(float(flat[i])), 0.1)
            e = np.zeros_like(flat)
            e[i] = h
            _, plus = _curve_and_functionals(
                curve, {**p0, name: jnp.asarray((flat + e).reshape(x0.shape))}, level)
            _, minus = _curve_and_functionals(
                curve, {**p0, name: jnp.asarray((flat - e).reshape(x0.shape))}, level)
            fd = (np.asarray(plus) - np.asarray(minus)) / (2 * h)
            g = np.asarray(jac[name]).reshape(3, -1)[:, i]
            for k, what in enumerate(("risk at T", "mean risk", "time to level")):
                if k == 2 and abs(fd[k]) < 1e-9 and abs(g[k]) < 1e-9:
                    continue    # a knot after the crossing cannot move it (causality)
                assert abs(fd[k]) > 1e-6, f"{name}[{i}] has no visible effect on {what}"
                err = abs(g[k] - fd[k]) / abs(fd[k])
                assert err <= RTOL, (f"d({what})/d{name}[{i}]: autodiff {g[k]:.10g}, central "
                                     f"differences {fd[k]:.10g} (relative error {err:.2e})")


@pytest.mark.slow
def test_gradients_match_finite_differences(base_point):
    """Every parameter but the schedules' knot values (they replace lr and lr_bias)."""
    names = tuple(p for p in PARAMS if "schedule" not in p)
    _check_against_fd(base_point, names)


@pytest.mark.slow
def test_schedule_gradients_match_finite_differences():
    _check_against_fd(_point(BASE + SCHEDULES),
                      ("training.lr_schedule", "training.lr_bias_schedule"))


@pytest.mark.slow
def test_backsolve_agrees_with_recursive_checkpointing(base_point):
    """The gradient of the mean risk: the recursive adjoint's is the middle row of the
    functionals' Jacobian (`base_point`, one program shared with the finite differences)."""
    curve = LearningCurve.from_config(load_config(None, BASE), adjoint="backsolve")
    backsolve = eqx.filter_jit(
        lambda c, p: jax.grad(lambda q: mean_risk(c.ts, c(q)))(p))(curve, curve.defaults())
    recursive = {name: np.asarray(j)[1] for name, j in base_point.jac.items()}
    assert set(backsolve) == set(recursive)
    for name, g in recursive.items():
        np.testing.assert_allclose(backsolve[name], g, rtol=1e-5, atol=1e-9, err_msg=name)


def test_the_curve_is_run_ode():
    cfg = load_config(None, BASE + SCHEDULES)
    np.testing.assert_allclose(learning_curve({}, cfg), run_ode(cfg).risk, rtol=1e-12)


def test_time_to_risk_interpolates():
    t = jnp.asarray([0.0, 1.0, 2.0, 3.0])
    r = jnp.asarray([1.0, 0.8, 0.4, 0.3])
    assert float(time_to_risk(t, r, 0.6)) == pytest.approx(1.5, rel=1e-15)
    assert float(time_to_risk(t, r, 1.2)) == 0.0
    assert float(time_to_risk(t, r, 0.1)) == np.inf
    np.testing.assert_allclose(jax.grad(lambda r: time_to_risk(t, r, 0.6))(r),
                               [0.0, 1.25, 1.25, 0.0], rtol=1e-12)
    assert float(mean_risk(t, r)) == pytest.approx((0.9 + 0.6 + 0.35) / 3, rel=1e-15)


@pytest.mark.parametrize("params,message", [
    ({"training.momentum": 1.0}, "unknown parameter"),
    ({"training.lr_schedule": jnp.ones(2)}, "sets no [training] lr_schedule"),
])
def test_bad_parameters(params, message):
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        learning_curve(params, load_config(None, BASE))


def test_lr_with_a_schedule_is_refused():
    with pytest.raises(ConfigError, match="has no effect"):
        learning_curve({"training.lr": 1.0}, load_config(None, BASE + SCHEDULES))


# three SDE paths of a small softmax-1 model with label noise (the config of `headflow fit
# --model sde`'s test, tests/test_schedule_cli.py)
SDE_BASE = ["model.L=2", "model.activation=softmax1", "model.noise=0.2", "ode.samples=64",
            "sde.samples_drift=64",
            "sde.samples_noise=64", "sde.dt=0.2", "training.t_max=2", "output.n_save=6",
            "sim.dim=400", "sim.risk_samples=256", "sde.paths=3"]


@pytest.mark.slow
def test_sde_curve_is_the_ensemble_mean_and_differentiable():
    """`SDECurve({})` is `run_sde`'s mean risk (the same paths, to round-off), and its
    forward-mode Jacobian in (η, Δ) matches central differences of whole ensembles."""
    cfg = load_config(None, SDE_BASE)
    curve = SDECurve.from_config(cfg)

    # one program for the curve and its tangents: the differences below reuse it
    jacobian_and_value = eqx.filter_jit(lambda c, p: jacobian_and_curve(p, c))

    def value(c, p):
        return jacobian_and_value(c, p)[1]

    p0 = {k: v for k, v in curve.defaults().items() if k in ("training.lr", "model.noise")}
    jac, mean = jacobian_and_value(curve, p0)
    mean = np.asarray(mean)
    np.testing.assert_allclose(mean, np.asarray(run_sde(cfg).risk).mean(axis=0), rtol=1e-12)
    assert mean[-1] < mean[0]
    for name, x in p0.items():
        h = 1e-5
        fd = (np.asarray(value(curve, {**p0, name: x + h}))
              - np.asarray(value(curve, {**p0, name: x - h}))) / (2 * h)
        g = np.asarray(jac[name])
        assert np.abs(fd).max() > 1e-3, name
        np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-8 * np.abs(fd).max(),
                                   err_msg=name)
