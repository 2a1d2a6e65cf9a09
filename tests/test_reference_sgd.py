"""The benchmarks' independent SGD baseline (`benchmarks/_reference_sgd.py`) computes the same
gradients as headflow's autodiff of `Model.loss`, so the cost it is timed at is the cost of the
same simulation."""

from __future__ import annotations

import sys
from pathlib import Path

import jax.numpy as jnp
import jax.random as jr
import numpy as np

from headflow import dynamics
from headflow import sims

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from _reference_sgd import gradients, make_run  # noqa: E402


def test_reference_gradients_equal_autodiff():
    cfg = dynamics.load_config(None, ["model.L=4", "model.H=2"])
    model = cfg.build_model()
    D = 300
    teacher = dynamics.make_teacher(jr.key(0), D, model.F, model.rho, jnp.float64)
    w = dynamics.init_weights(jr.key(1), model.H, D, key_std=1.0, value_std=1.0, bias=0.3,
                              dtype=jnp.float64)
    X, y = dynamics.sample_data(jr.key(2), teacher, model, 3)
    g_chi, g_z, g_b = sims.attention.field_gradients(model, w, X, y)   # of the batch-mean loss
    ref = [np.stack(parts) for parts in zip(
        *(gradients(w.K, w.V, w.b, X[i], y[i]) for i in range(3)))]
    np.testing.assert_allclose(3 * np.asarray(g_chi), ref[0], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(3 * np.asarray(g_z), ref[1], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(np.asarray(g_b), ref[2].mean(axis=0), rtol=1e-10, atol=1e-12)


def test_reference_run_lowers_the_risk_proxy():
    run = make_run(200, 2, 4, dtype=jnp.float64)
    K, V, b = run(jr.split(jr.key(0), 2), 2000)
    assert np.all(np.isfinite(np.asarray(K))) and K.shape == (2, 2, 200)
    # values align with v*: after 10 time units the value overlap has left its initial scale
    assert float(jnp.max(jnp.abs(jnp.einsum("shd,shd->sh", V, V)) / 200)) > 0.05
