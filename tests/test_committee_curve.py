"""The committee's differentiable learning curves (`headflow.dynamics.ode.LearningCurve`, and the
SDE ensemble's mean, `headflow.dynamics.sde.SDECurve`): each equal to its run (`run_ode`,
`run_sde`), gradients equal to finite differences, and `fit` (`--model ode` and `--model sde`)
recovering the hyperparameters of a curve it did not see."""

from __future__ import annotations

from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from headflow.dynamics import Config, ConfigError, load_config
from headflow.dynamics.ode import LearningCurve, differentiable_keys, run_ode
from headflow.dynamics.sde import SDECurve, run_sde
from headflow.validation.experiments.fit import fit_curve

pytestmark = pytest.mark.fast_compile

TOML = """
[model]
kind = "committee"
K = 2
M = 2
noise = 0.2
train_second_layer = true
[training]
lr = 0.5
lr_second = 0.3
t_max = 5.0
[output]
n_save = 6
[ode]
rtol = 1e-10
atol = 1e-12
"""


def _arrays(params: dict) -> dict:
    return {k: jnp.asarray(v, dtype=jnp.float64) for k, v in params.items()}


@pytest.fixture(scope="module")
def cfg(tmp_path_factory):
    path = tmp_path_factory.mktemp("c") / "c.toml"
    path.write_text(TOML)
    return load_config(path)


@pytest.fixture(scope="module")
def ode_run(cfg):
    """`run_ode` of the config (traced and compiled once for the two tests that use it)."""
    return run_ode(cfg)


def test_curve_equals_ode_and_keys(cfg, ode_run):
    curve = LearningCurve.from_config(cfg)
    assert set(curve.keys) == set(differentiable_keys(cfg)) == {
        "training.lr", "training.lr_second", "training.weight_decay", "model.noise",
        "training.init_first_std", "training.init_second"}
    risk = eqx.filter_jit(lambda c: c({}))(curve)
    np.testing.assert_allclose(risk, ode_run.risk, rtol=1e-12)
    with pytest.raises(ConfigError, match="unknown parameter"):
        curve({"training.lr_bias": 1.0})


def test_gradient_equals_finite_differences(cfg):
    """Central differences of the final risk in a step size, a model parameter and an
    initial scale (tight tolerances, so the solver's step choice moves the curve far less
    than the difference step)."""
    curve = LearningCurve.from_config(cfg)
    p0 = {k: float(v) for k, v in curve.defaults().items()}
    p0["training.weight_decay"] = 0.05
    # one program, whose value the differences below use (compiling the solve costs more than
    # running its reverse pass a few times), called with arrays: `eqx.filter_jit` holds Python
    # floats static, a compile per value
    value_and_grad = eqx.filter_jit(jax.value_and_grad(lambda p, c: c(p)[-1]))
    _, grad = value_and_grad(_arrays(p0), curve)
    for k in ("training.lr_second", "model.noise", "training.init_first_std"):
        h = 1e-5 * max(1.0, abs(p0[k]))
        up, down = dict(p0), dict(p0)
        up[k] += h
        down[k] -= h
        fd = (float(value_and_grad(_arrays(up), curve)[0])
              - float(value_and_grad(_arrays(down), curve)[0])) / (2 * h)
        assert abs(float(grad[k]) - fd) <= 1e-5 * max(1.0, abs(fd)), (k, float(grad[k]), fd)


def test_fit_recovers_the_hyperparameters(cfg, ode_run):
    """The ODE curve at (η, σ) = (0.5, 0.2), fitted from (0.8, 0.1)."""
    truth = ode_run
    start = cfg.replace(**{"training.lr": 0.8, "model.noise": 0.1})
    fit = fit_curve(start, np.asarray(truth.t)[1:], np.asarray(truth.risk)[1:],
                    ["training.lr", "model.noise"])
    assert fit.converged
    assert abs(fit.values["training.lr"] - 0.5) < 1e-6
    assert abs(fit.values["model.noise"] - 0.2) < 1e-6


SDE = {"sim.dim": 300, "sde.paths": 4, "sde.dt": 0.25, "sde.samples_noise": 256}
TIMES = np.linspace(0.0, 5.0, 6)      # the config's save grid


class _SDE(NamedTuple):
    cfg: Config
    curve: SDECurve
    paths: np.ndarray


@pytest.fixture(scope="module")
def sde(cfg) -> _SDE:
    """The SDE ensemble's curve (forward mode) on `TIMES` and its paths at the config's
    values (one program, shared by the three tests of the SDE curve)."""
    c = cfg.replace(**SDE)
    curve = SDECurve.from_config(c, times=TIMES, adjoint="forward")
    return _SDE(c, curve, np.asarray(eqx.filter_jit(lambda cv: cv.paths({}))(curve)))


def test_sde_curve_equals_run_sde(sde):
    """The SDE ensemble's mean curve at the config's values is the mean risk of `run_sde`'s
    paths (same starts, Brownian paths and nodes; only the order of sums differs)."""
    c, curve, got = sde
    np.testing.assert_array_equal(c.save_times(), TIMES)
    assert set(curve.keys) == set(differentiable_keys(c))
    run = run_sde(c)
    np.testing.assert_allclose(got, run.risk, rtol=1e-9, atol=1e-14)
    with pytest.raises(ConfigError, match="unknown parameter"):
        curve({"training.lr_bias": 1.0})


def test_sde_curve_gradient_equals_finite_differences(sde):
    """Forward-mode derivatives of the mean final risk over fixed paths (common random
    numbers: a smooth function) against central differences."""
    curve = sde.curve
    names = ("training.lr", "model.noise", "training.init_first_std")
    p0 = {k: float(v) for k, v in curve.defaults().items()}
    rest = {k: v for k, v in p0.items() if k not in names}

    @eqx.filter_jit
    def jacobian_and_final(p, c):
        # tangents in the checked parameters only; the differences below use the value
        def twice(q):
            r = c({**rest, **q})[-1]
            return r, r
        return jax.jacfwd(twice, has_aux=True)(p)

    def final(c, p):     # arrays, not Python floats (`eqx.filter_jit` holds those static)
        return jacobian_and_final(_arrays({k: p[k] for k in names}), c)[1]

    jac, _ = jacobian_and_final(_arrays({k: p0[k] for k in names}), curve)
    for k in names:
        h = 1e-5 * max(1.0, abs(p0[k]))
        up, down = dict(p0), dict(p0)
        up[k] += h
        down[k] -= h
        fd = (float(final(curve, up)) - float(final(curve, down))) / (2 * h)
        print(f"SDE curve d/d{k}: forward {float(jac[k]):.9g}, central differences {fd:.9g}")
        assert abs(float(jac[k]) - fd) <= 1e-6 * max(1.0, abs(fd)), (k, float(jac[k]), fd)


def test_fit_sde_recovers_the_hyperparameters(sde):
    """`fit --model sde` on the SDE ensemble's own mean curve at (η, σ) = (0.5, 0.2), started
    from (0.7, 0.1): the least-squares problem has its exact minimum there."""
    c = sde.cfg
    truth = sde.paths.mean(axis=0)                  # the curve's value, `curve({})`
    start = c.replace(**{"training.lr": 0.7, "model.noise": 0.1})
    fit = fit_curve(start, TIMES[1:], truth[1:],
                    ["training.lr", "model.noise"], model="sde")
    print("fit --model sde:", fit.values)
    assert fit.converged
    assert abs(fit.values["training.lr"] - 0.5) < 1e-5
    assert abs(fit.values["model.noise"] - 0.2) < 1e-5
