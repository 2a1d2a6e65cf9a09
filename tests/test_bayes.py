"""Bayes-optimal risk and the Bayes-softmax construction
(`docs/model.md#bayes-optimal-risk-and-the-bayes-softmax-construction`)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
from _util import (Z, make_model, mean_se, sampled_fields, squared_errors, teacher_for,
                   with_activation)

from headflow.dynamics import (ConfigError, bayes_construction, bayes_risk, construction_weights,
                               population_risk)
from headflow.dynamics.expectations import MonteCarlo, QuasiMonteCarlo, Quadrature
from headflow.dynamics.priors import Discrete, FlippedSpike, Gaussian, OneHot

POINTS = [[1.5], [-1.0], [0.3]]
WEIGHTS = [0.3, 0.5, 0.2]


def _three_point_model(activation="bayes_softmax", L=4, noise=0.0, rho=1.0):
    return make_model(activation, L=L, H=3, prior=Discrete(POINTS, WEIGHTS), noise=noise,
                      rho=rho)


def _construction_biases(prior):
    pts, w = np.asarray(prior.points), np.asarray(prior.weights)
    return np.log(w) - 0.5 * (pts**2).sum(-1)


@pytest.fixture(scope="module")
def construction_run():
    """Real finite-D sequences (D = 500) through the construction's weights, with both
    Bayes-softmax and per-head softmax."""
    model = _three_point_model()
    teacher = teacher_for(model, 500, seed=3)
    w = construction_weights(teacher, POINTS, _construction_biases(model.prior),
                             dtype=jnp.float64)
    models = [model, with_activation(model, "softmax")]
    errs = squared_errors(models, teacher, w, jr.key(4), 40_960)
    r, r_err = bayes_risk(model, MonteCarlo(samples=1 << 16, seed=1))
    return dict(model=model, teacher=teacher, w=w, errs=errs, bayes=(float(r), float(r_err)))


def test_construction_simulated_risk_is_bayes(construction_run):
    est, se = mean_se(construction_run["errs"][0])
    r, r_err = construction_run["bayes"]
    assert abs(est - r) < Z * np.hypot(se, r_err), (est, se, r, r_err)


def test_softmax_with_construction_weights_is_worse(construction_run):
    bayes, soft = construction_run["errs"]
    diff, se = mean_se(soft - bayes)                                # paired: same sequences
    assert diff > 20 * se, (diff, se)
    r_soft, se_soft = mean_se(soft)
    r, r_err = construction_run["bayes"]
    assert r_soft - r > 20 * np.hypot(se_soft, r_err)


def test_construction_predicts_posterior_mean():
    """Per sequence, the construction's ŷ is the posterior mean `Σ_ℓ p_ℓ y*_ℓ` with
    `p_ℓ ∝ π(χ*_ℓ)` (to round-off): the construction is exact at any D."""
    model = _three_point_model(L=5)
    teacher = teacher_for(model, 64, seed=5)
    w = construction_weights(teacher, POINTS, _construction_biases(model.prior),
                             dtype=jnp.float64)
    W = jnp.concatenate([w.K, w.V, teacher.kstar, teacher.vstar[None]])
    lam, _ = sampled_fields(jr.key(6), teacher, model, W, 2000, chunk=2000)
    chi, z = np.swapaxes(lam[..., :3], 1, 2), np.swapaxes(lam[..., 3:6], 1, 2)
    chi_star, ystar = lam[..., 6:7], lam[..., 7]
    yhat = np.asarray(jax.vmap(model.predict, in_axes=(0, 0, None))(
        jnp.asarray(chi), jnp.asarray(z), w.b))
    logp = np.asarray(model.prior.log_pi(jnp.asarray(chi_star)))           # (n, L)
    p = np.exp(logp - logp.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    np.testing.assert_allclose(yhat, (p * ystar).sum(1), rtol=1e-9, atol=1e-11)


# -- limits ------------------------------------------------------------------------------------

NO_SIGNAL = {"point_mass_0": lambda: Discrete([[0.0]]), "one_hot_0": lambda: OneHot(0.0, 2),
             "flipped_spike_0": lambda: FlippedSpike(0.0, 0.7, [1.0, 0.0])}


@pytest.mark.parametrize("prior,L", [("point_mass_0", 1), ("one_hot_0", 4),
                                     ("flipped_spike_0", 7)])
@pytest.mark.parametrize("noise,rho", [(0.0, 1.0), (0.5, 1.0), (0.3, 2.5)])
def test_bayes_risk_no_signal(prior, L, noise, rho):
    model = make_model(L=L, H=1, prior=NO_SIGNAL[prior](), noise=noise, rho=rho)
    r, err = bayes_risk(model, MonteCarlo(samples=256))
    np.testing.assert_allclose(r, noise**2 + rho * (1 - 1 / L), rtol=1e-12)
    assert float(err) < 1e-12


@pytest.mark.parametrize("noise,rho", [(0.0, 1.0), (0.4, 2.0)])
def test_bayes_risk_infinite_signal(noise, rho):
    """Decreasing in the amplitude (common random numbers) and → Δ²."""
    amps = [0.0, 1.0, 2.0, 4.0, 8.0, 16.0]
    risks = []
    for a in amps:
        model = make_model(L=4, H=1, prior=FlippedSpike(a, 0.7, [1.0]), noise=noise, rho=rho)
        r, _ = bayes_risk(model, MonteCarlo(samples=1 << 14, seed=2))
        risks.append(float(r))
    risks = np.array(risks)
    np.testing.assert_allclose(risks[0], noise**2 + rho * 0.75, rtol=1e-12)
    assert np.all(np.diff(risks) < 0), risks
    assert risks[-1] - noise**2 < 1e-6 * rho
    assert risks[-2] - noise**2 < 0.05 * rho


def _brute_force_bayes(prior, L, noise, rho, n, seed):
    """`R_Bayes` by brute force: θ and the teacher key fields sampled, `π` by explicit
    quadrature over θ (no closed form), and the label's value fields integrated out in the
    form `Δ² + ρ*(1 − 2 p_ε + Σ_ℓ p_ℓ²)` (not the `1 − Σ p²` the code uses)."""
    rng = np.random.default_rng(seed)
    F = prior.F
    if isinstance(prior, Gaussian):
        mu, sd = np.asarray(prior.mean()), np.sqrt(np.asarray(prior.variance()))
        theta = mu + sd * rng.standard_normal((n, F))
        x1, w1 = np.polynomial.hermite_e.hermegauss(60)
        w1 = w1 / w1.sum()
        nodes = mu[:, None] + sd[:, None] * x1

        def log_pi(c):  # independent coordinates: product of 1-D quadratures
            per = np.einsum("k,...fk->...f", w1,
                            np.exp(c[..., None] * nodes - 0.5 * nodes**2))
            return np.log(per).sum(-1)
    else:
        pts, w = np.asarray(prior.points), np.asarray(prior.weights)
        theta = pts[rng.choice(len(w), size=n, p=w)]

        def log_pi(c):
            e = np.exp(c @ pts.T - 0.5 * (pts**2).sum(-1))
            return np.log(e @ w)
    chi_star = rng.standard_normal((n, L, F))
    chi_star[:, 0] += theta                                          # ε = first token
    lp = log_pi(chi_star)
    p = np.exp(lp - lp.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    return mean_se(noise**2 + rho * (1 - 2 * p[:, 0] + (p**2).sum(1)))


@pytest.mark.parametrize("prior", [
    lambda: Gaussian([0.5], [2.0]),
    lambda: Gaussian([0.3, -0.2], [1.5, 0.4]),
    lambda: Gaussian([0.0], [9.0]),
    lambda: Discrete(POINTS, WEIGHTS),
    lambda: FlippedSpike(2.0, 0.7, [1.0]),
], ids=["gauss_1d", "gauss_2d", "gauss_wide", "three_point", "flipped_spike"])
def test_bayes_risk_brute_force(prior):
    prior = prior()
    L, noise, rho = 3, 0.2, 1.3
    model = make_model(L=L, H=1, prior=prior, noise=noise, rho=rho)
    r, r_err = bayes_risk(model, MonteCarlo(samples=1 << 15, seed=7))
    est, se = _brute_force_bayes(prior, L, noise, rho, 1 << 15, seed=8)
    assert abs(float(r) - est) < Z * np.hypot(se, float(r_err)), (float(r), r_err, est, se)
    # strictly between the infinite-signal and the no-signal risks
    assert noise**2 < float(r) < noise**2 + rho * (1 - 1 / L)


def test_bayes_risk_backends_agree():
    model = _three_point_model(L=4, noise=0.1)
    r, r_err = bayes_risk(model, MonteCarlo(samples=1 << 15, seed=9))
    for backend in (QuasiMonteCarlo(samples=1 << 14, seed=3), Quadrature(samples=10**4)):
        q, q_err = bayes_risk(model, backend)
        assert abs(float(q) - float(r)) < Z * np.hypot(float(r_err), float(q_err)) + 1e-4, (
            type(backend).__name__, float(q), float(r))


# -- the construction through the population risk ----------------------------------------------

CONSTRUCTION_PRIORS = {
    "three_point": lambda: Discrete(POINTS, WEIGHTS),
    "flipped_spike": lambda: FlippedSpike(3.0, 0.7, [1.0]),
    "one_hot": lambda: OneHot(2.0, 2, [0.4, 0.6]),
    "zero_weight_point": lambda: Discrete([[1.0, 0.5], [-0.4, 2.0], [0.0, 0.0], [5.0, 5.0]],
                                          [0.3, 0.3, 0.4, 0.0]),
}


@pytest.mark.parametrize("prior,L,noise,rho", [
    ("three_point", 4, 0.0, 1.0), ("three_point", 3, 0.3, 1.7), ("one_hot", 4, 0.2, 1.0),
    ("zero_weight_point", 3, 0.0, 1.3)])
def test_population_risk_of_construction_is_bayes(prior, L, noise, rho):
    prior = CONSTRUCTION_PRIORS[prior]()
    base = make_model(L=L, H=1, prior=prior, noise=noise, rho=rho)
    ov, theta = bayes_construction(base)
    S = int(np.sum(np.asarray(prior.weights) > 0))
    assert theta.shape == (S, prior.F) and ov.H == S
    np.testing.assert_allclose(ov.m, theta)
    np.testing.assert_allclose(ov.q, theta @ theta.T)
    np.testing.assert_allclose(ov.n, rho)
    np.testing.assert_allclose(ov.s, rho)
    model = with_activation(base, "bayes_softmax", H=S)
    c, c_err = population_risk(model, ov, MonteCarlo(samples=1 << 14, seed=11), manifold=True)
    r, r_err = bayes_risk(base, MonteCarlo(samples=1 << 14, seed=12))
    assert abs(float(c) - float(r)) < Z * np.hypot(float(c_err), float(r_err)), (c, r)
    if prior.F > 1 or L == 3:
        # the full (off-manifold) law, with its pseudo-inverse of r = 0, gives the same with
        # the same nodes
        c_full, _ = population_risk(model, ov, MonteCarlo(samples=1 << 14, seed=11))
        np.testing.assert_allclose(c_full, c, rtol=1e-9)
    soft, soft_err = population_risk(with_activation(model, "softmax"), ov,
                                     MonteCarlo(samples=1 << 14, seed=11), manifold=True)
    assert float(soft) > float(c) + 10 * float(soft_err)


def test_construction_needs_discrete_prior():
    model = make_model(L=3, H=1, prior=Gaussian([0.0], [1.0]))
    with pytest.raises(ConfigError, match="discrete"):
        bayes_construction(model)
