"""The committee's differentiable learning curve (`dynamics.ode.ModelCurve`): equal to the ODE
run, gradients equal to finite differences, and `fit` recovering the hyperparameters of a curve
it did not see."""

from __future__ import annotations

import equinox as eqx
import jax
import numpy as np
import pytest

from dynamics import ConfigError, load_config
from dynamics.ode import ModelCurve, differentiable_keys, run_ode
from validation.experiments.fit import fit_curve

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


@pytest.fixture(scope="module")
def cfg(tmp_path_factory):
    path = tmp_path_factory.mktemp("c") / "c.toml"
    path.write_text(TOML)
    return load_config(path)


def test_curve_equals_ode_and_keys(cfg):
    curve = ModelCurve.from_config(cfg)
    assert set(curve.keys) == set(differentiable_keys(cfg)) == {
        "training.lr", "training.lr_second", "training.weight_decay", "model.noise",
        "training.init_first_std", "training.init_second"}
    risk = eqx.filter_jit(lambda c: c({}))(curve)
    np.testing.assert_allclose(risk, run_ode(cfg).risk, rtol=1e-12)
    with pytest.raises(ConfigError, match="unknown parameter"):
        curve({"training.lr_bias": 1.0})


def test_gradient_equals_finite_differences(cfg):
    """Central differences of the final risk in a step size, a model parameter and an
    initial scale (tight tolerances, so the solver's step choice moves the curve far less
    than the difference step)."""
    curve = ModelCurve.from_config(cfg)
    p0 = {k: float(v) for k, v in curve.defaults().items()}
    p0["training.weight_decay"] = 0.05
    final = eqx.filter_jit(lambda c, p: c(p)[-1])
    grad = eqx.filter_jit(jax.grad(lambda p, c: c(p)[-1]))(p0, curve)
    for k in ("training.lr_second", "model.noise", "training.init_first_std"):
        h = 1e-5 * max(1.0, abs(p0[k]))
        up, down = dict(p0), dict(p0)
        up[k] += h
        down[k] -= h
        fd = (float(final(curve, up)) - float(final(curve, down))) / (2 * h)
        assert abs(float(grad[k]) - fd) <= 1e-5 * max(1.0, abs(fd)), (k, float(grad[k]), fd)


def test_fit_recovers_the_hyperparameters(cfg):
    """The ODE curve at (η, σ) = (0.5, 0.2), fitted from (0.8, 0.1)."""
    truth = run_ode(cfg)
    start = cfg.replace(**{"training.lr": 0.8, "model.noise": 0.1})
    fit = fit_curve(start, np.asarray(truth.t)[1:], np.asarray(truth.risk)[1:],
                    ["training.lr", "model.noise"])
    assert fit.converged
    assert abs(fit.values["training.lr"] - 0.5) < 1e-6
    assert abs(fit.values["model.noise"] - 0.2) < 1e-6
    with pytest.raises(ConfigError, match="--model sde is not available"):
        fit_curve(start, np.asarray(truth.t)[1:], np.asarray(truth.risk)[1:],
                  ["training.lr"], model="sde")
