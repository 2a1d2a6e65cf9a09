"""The benchmarks' independent SGD baseline (`benchmarks/_reference_sgd.py`) computes the same
gradients as headflow's autodiff of `Model.loss`, so the cost it is timed at is the cost of the
same simulation."""

from __future__ import annotations

import sys
from pathlib import Path

import jax
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


def _risk(K, V, b, kstar, vstar, key, *, tokens: int, amplitude: float, p: float,
          n: int = 4096) -> tuple[float, float]:
    """The mean and standard error of `½(ŷ − y)²` over `n` fresh samples of the reference's
    data law (independent of headflow), for one seed's weights."""
    dim = K.shape[-1]
    kx, ks, ke = jr.split(key, 3)
    X = jr.normal(kx, (n, tokens, dim))
    theta = jnp.where(jr.uniform(ks, (n,)) < p, amplitude, -amplitude)
    eps = jr.randint(ke, (n,), 0, tokens)
    X = X.at[jnp.arange(n), eps].add(theta[:, None] * kstar[None, :] / jnp.sqrt(dim))
    y = X[jnp.arange(n), eps] @ vstar / jnp.sqrt(dim)
    z = jnp.einsum("hd,nld->nhl", V, X) / jnp.sqrt(dim)
    chi = jnp.einsum("hd,nld->nhl", K, X) / jnp.sqrt(dim)
    A = jax.nn.softmax((chi + b[None, :, None]).reshape(n, -1), axis=1).reshape(chi.shape)
    loss = 0.5 * (jnp.sum(A * z, axis=(1, 2)) - y) ** 2
    return float(loss.mean()), float(loss.std() / np.sqrt(n))


def test_reference_run_lowers_the_risk():
    """After 10 time units (2000 steps at D = 200) the reference's risk on fresh samples is
    below its value at the start, for every seed, by over 5 combined standard errors."""
    law = dict(tokens=4, amplitude=3.0, p=0.7)
    run = make_run(200, 2, 4, dtype=jnp.float64, teacher=True)
    keys = jr.split(jr.key(0), 2)
    start, end = run(keys, 0), run(keys, 2000)
    for s in range(2):
        r0, e0 = _risk(*(x[s] for x in start), jr.key(10 + s), **law)
        r1, e1 = _risk(*(x[s] for x in end), jr.key(20 + s), **law)
        assert np.all(np.isfinite(np.asarray(end[0][s])))
        assert r0 - r1 > 5 * np.hypot(e0, e1), (r0, e0, r1, e1)


def test_reference_sgd_equals_headflow_in_law():
    """The reference (its own data, teacher and updates) and `headflow.sims.run_sgd` on the
    same model, D = 100, 128 seeds each, to t = 8: the laws of the final overlaps
    `m_h = K_h·k*/D` and `n_h = V_h·v*/D` (head-sorted, heads being exchangeable) agree by
    two-sample Kolmogorov–Smirnov tests (Bonferroni over 4 statistics, family level 1e-3)."""
    from scipy.stats import ks_2samp

    D, S, t = 100, 128, 8.0
    run = make_run(D, 2, 3, dtype=jnp.float64, teacher=True, lr=0.8, lr_bias=0.5)
    K, V, _, kstar, vstar = run(jr.split(jr.key(1), S), int(t * D))
    ref = {"m": np.sort(np.asarray(jnp.einsum("shd,sd->sh", K, kstar)) / D, axis=1),
           "n": np.sort(np.asarray(jnp.einsum("shd,sd->sh", V, vstar)) / D, axis=1)}
    cfg = dynamics.load_config(None, [
        "model.L=3", "model.H=2", "model.F=1", 'model.activation="bayes_softmax"',
        'prior.kind="flipped_spike"', "prior.amplitude=3.0", "prior.p=0.7", "model.rho=1.0",
        "training.lr=0.8", "training.lr_bias=0.5", "training.init_key_std=0.1",
        "training.init_value_std=0.1", "training.init_bias=0.0", f"training.t_max={t}",
        "output.n_save=2", 'sim.space="weights"', 'sim.dtype="float64"'])
    res = sims.run_sgd(cfg, dim=D, seeds=S)
    ours = {"m": np.sort(np.asarray(res.overlaps.m)[:, -1, :, 0], axis=1),
            "n": np.sort(np.asarray(res.overlaps.n)[:, -1, :], axis=1)}
    moved = np.mean(np.abs(ours["n"]))
    assert moved > 0.05, moved                     # the overlaps left their initial scale
    for name in ("m", "n"):
        for h in range(2):
            p = ks_2samp(ref[name][:, h], ours[name][:, h]).pvalue
            assert p > 1e-3 / 4, (name, h, p)
