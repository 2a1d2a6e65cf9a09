"""Priors of θ (`docs/model.md#data-the-teacher`,
`docs/model.md#bayes-optimal-risk-and-the-bayes-softmax-construction`): sampling moments, `log π`,
`scaled`, integration nodes."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
from scipy.special import logsumexp

from headflow.dynamics import ConfigError
from headflow.dynamics.expectations import Quadrature
from headflow.dynamics.priors import AbstractDiscretePrior, Discrete, FlippedSpike, Gaussian, OneHot

PRIORS = {
    "flipped_spike_e1": lambda: FlippedSpike(3.0, 0.7, [1.0, 0.0]),
    "flipped_spike_diag": lambda: FlippedSpike(1.5, 0.2, [1.0, 1.0, -2.0]),
    "one_hot_uniform": lambda: OneHot(2.0, 3),
    "one_hot_weighted": lambda: OneHot(1.2, 3, [0.5, 0.3, 0.2]),
    "discrete_1d": lambda: Discrete([[1.5], [-1.0], [0.3]], [0.3, 0.5, 0.2]),
    "discrete_2d": lambda: Discrete([[1.0, 0.5], [-0.4, 2.0], [0.0, 0.0], [0.7, -1.1]],
                                    [0.1, 0.2, 0.3, 0.4]),
    "discrete_zero_weight": lambda: Discrete([[1.0], [5.0], [-2.0]], [0.6, 0.0, 0.4]),
    "gaussian_1d": lambda: Gaussian([0.5], [2.0]),
    "gaussian_2d": lambda: Gaussian([0.3, -0.7], [1.5, 0.25]),
}
DISCRETE = [k for k in PRIORS if not k.startswith("gaussian")]
N_SAMPLES = 200_000
Z = 5.0  # z-score threshold (deterministic seeds; a 5σ miss means a bug)


@pytest.fixture(params=list(PRIORS))
def prior(request):
    return PRIORS[request.param]()


def _draws(prior, n=N_SAMPLES, seed=0):
    th = np.asarray(prior.sample(jr.key(seed), (n,)))
    assert th.shape == (n, prior.F) and th.dtype == np.float64
    return th


def test_sample_mean_and_variance(prior):
    th = _draws(prior)
    n = th.shape[0]
    mean, var = np.asarray(prior.mean()), np.asarray(prior.variance())
    assert mean.shape == var.shape == (prior.F,)
    emp_mean = th.mean(0)
    dev = th - mean
    emp_var = (dev**2).mean(0)  # known mean: unbiased
    se_mean = np.sqrt(var / n)
    se_var = np.sqrt(np.maximum((dev**4).mean(0) - emp_var**2, 0.0) / n)
    for f in range(prior.F):
        if var[f] == 0:  # a constant coordinate is sampled exactly
            np.testing.assert_array_equal(th[:, f], mean[f])
            continue
        assert abs(emp_mean[f] - mean[f]) < Z * se_mean[f], (f, emp_mean[f], mean[f])
        # (+ round-off: a symmetric two-point law has a deterministic |θ − Eθ|)
        assert abs(emp_var[f] - var[f]) < Z * se_var[f] + 1e-12, (f, emp_var[f], var[f])


@pytest.mark.parametrize("name", DISCRETE)
def test_discrete_samples_are_support_points_with_weights(name):
    prior = PRIORS[name]()
    th = _draws(prior)
    pts, w = np.asarray(prior.points), np.asarray(prior.weights)
    match = np.all(np.isclose(th[:, None, :], pts[None], rtol=0, atol=1e-15), axis=-1)
    assert np.all(match.sum(-1) >= 1)            # every draw is a support point
    freq = match.argmax(-1)
    counts = np.bincount(freq, minlength=len(w)) / len(th)
    se = np.sqrt(w * (1 - w) / len(th))
    assert np.all(np.abs(counts - w) <= Z * se + 1e-12), (counts, w)


def test_sample_dtype_and_shape(prior):
    th = prior.sample(jr.key(1), (3, 5), dtype=jnp.float32)
    assert th.shape == (3, 5, prior.F) and th.dtype == jnp.float32
    assert prior.sample(jr.key(1)).shape == (prior.F,)


# -- log π -------------------------------------------------------------------------------------

def _points_c(F, seed=3, n=6):
    rng = np.random.default_rng(seed)
    return np.concatenate([np.zeros((1, F)), 2.0 * rng.standard_normal((n - 1, F))])


@pytest.mark.parametrize("name", DISCRETE)
def test_log_pi_discrete_exact(name):
    prior = PRIORS[name]()
    pts, w = np.asarray(prior.points), np.asarray(prior.weights)
    c = _points_c(prior.F)
    expected = logsumexp(c @ pts.T - 0.5 * (pts**2).sum(-1), b=w, axis=-1)
    np.testing.assert_allclose(prior.log_pi(jnp.asarray(c)), expected, rtol=1e-13, atol=1e-13)
    # batch shapes, and very large c (log-sum-exp stays finite)
    np.testing.assert_allclose(prior.log_pi(jnp.asarray(c.reshape(2, 3, prior.F))),
                               expected.reshape(2, 3), rtol=1e-13, atol=1e-13)
    big = 1e3 * c[1:]
    got = np.asarray(prior.log_pi(jnp.asarray(big)))
    assert np.all(np.isfinite(got))
    np.testing.assert_allclose(got, logsumexp(big @ pts.T - 0.5 * (pts**2).sum(-1), b=w, axis=-1),
                               rtol=1e-12)


@pytest.mark.parametrize("name", list(PRIORS))
def test_log_pi_monte_carlo(name):
    """`log π(c) = log E_θ exp(θ·c − |θ|²/2)` against the Monte Carlo average over prior draws
    (delta method: se(log π̂) = se(π̂)/π̂)."""
    prior = PRIORS[name]()
    th = _draws(prior, seed=11)
    c = _points_c(prior.F)
    vals = np.exp(th @ c.T - 0.5 * (th**2).sum(-1, keepdims=True))   # (n, #c)
    est = vals.mean(0)
    se = vals.std(0, ddof=1) / np.sqrt(len(th))
    got = np.asarray(prior.log_pi(jnp.asarray(c)))
    # (+ round-off: for spikes of fixed |θ| and c = 0 the integrand is constant, se = 0)
    assert np.all(np.abs(np.exp(got) - est) < Z * se + 1e-10 * est), (got, np.log(est), se)


@pytest.mark.parametrize("mean,var", [([0.5], [2.0]), ([0.3, -0.7], [1.5, 0.25]),
                                      ([0.0, 0.0, 1.0], [0.1, 1.0, 4.0])])
def test_log_pi_gaussian_quadrature(mean, var):
    """The Gaussian closed form against Gauss–Hermite quadrature (exact up to round-off for
    this smooth, Gaussian-weighted integrand)."""
    prior = Gaussian(mean, var)
    F = prior.F
    x1, w1 = np.polynomial.hermite_e.hermegauss(80)
    w1 = w1 / w1.sum()
    c = _points_c(F, n=5)
    # product over coordinates (diagonal covariance): π(c) = Π_f E exp(θ_f c_f − θ_f²/2)
    th = np.asarray(mean)[:, None] + np.sqrt(var)[:, None] * x1[None, :]     # (F, k)
    per = np.einsum("k,nfk->nf", w1, np.exp(c[:, :, None] * th[None] - 0.5 * th[None] ** 2))
    np.testing.assert_allclose(prior.log_pi(jnp.asarray(c)), np.log(per).sum(-1), rtol=1e-12,
                               atol=1e-12)


def test_log_pi_point_mass_limit():
    """A Gaussian of vanishing variance tends to the point mass at its mean."""
    c = jnp.asarray(_points_c(2))
    point = Discrete([[0.4, -0.3]])
    for v in (1e-4, 1e-8):
        np.testing.assert_allclose(Gaussian([0.4, -0.3], [v, v]).log_pi(c), point.log_pi(c),
                                   atol=50 * v)


# -- scaled ------------------------------------------------------------------------------------

@pytest.mark.parametrize("factor", [0.0, 0.5, 2.0])
def test_scaled(prior, factor):
    if isinstance(prior, Gaussian) and factor == 0:
        with pytest.raises(ValueError, match="var"):  # zero variance is not a prior
            prior.scaled(factor)
        return
    sp = prior.scaled(factor)
    assert type(sp) is type(prior) or (isinstance(prior, AbstractDiscretePrior)
                                       and isinstance(sp, AbstractDiscretePrior))
    assert sp.F == prior.F
    np.testing.assert_allclose(sp.mean(), factor * np.asarray(prior.mean()), atol=1e-15)
    np.testing.assert_allclose(sp.variance(), factor**2 * np.asarray(prior.variance()),
                               rtol=1e-12, atol=1e-15)
    # the same key gives factor·θ
    np.testing.assert_allclose(sp.sample(jr.key(4), (100,)),
                               factor * prior.sample(jr.key(4), (100,)), rtol=1e-12, atol=1e-15)
    if isinstance(prior, AbstractDiscretePrior):
        np.testing.assert_allclose(sp.points, factor * np.asarray(prior.points), atol=1e-15)
        np.testing.assert_array_equal(sp.weights, prior.weights)


def test_scaled_keeps_kind():
    assert isinstance(FlippedSpike(3.0, 0.7, [1.0]).scaled(2.0), FlippedSpike)
    assert FlippedSpike(3.0, 0.7, [1.0]).scaled(2.0).amplitude == 6.0
    assert isinstance(OneHot(1.0, 2).scaled(2.0), OneHot)
    assert isinstance(Gaussian([0.0], [1.0]).scaled(2.0), Gaussian)


# -- integration nodes -------------------------------------------------------------------------

@pytest.mark.parametrize("name", DISCRETE)
def test_theta_nodes_discrete_exact(name):
    prior = PRIORS[name]()
    assert prior.n_normal_dims == 0
    thetas, w = prior.theta_nodes(jnp.zeros((7, 0)))
    thetas, w = np.asarray(thetas), np.asarray(w)
    assert thetas.shape == (prior.S, 7, prior.F) and w.shape == (prior.S,)
    np.testing.assert_allclose(w.sum(), 1.0, rtol=0, atol=1e-15)
    th = thetas[:, 0]
    np.testing.assert_allclose(w @ th, prior.mean(), atol=1e-14)
    np.testing.assert_allclose(w @ (th - np.asarray(prior.mean())) ** 2, prior.variance(),
                               atol=1e-13)
    # and exactly the support: E f(θ) = Σ p_s f(θ^s) for any f
    pts, pw = np.asarray(prior.points), np.asarray(prior.weights)
    f = lambda t: np.cos(t @ np.arange(1, prior.F + 1.0)) + t.sum(-1) ** 3  # noqa: E731
    np.testing.assert_allclose(w @ f(th), pw @ f(pts), rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("mean,var", [([0.5], [2.0]), ([0.3, -0.7], [1.5, 0.25])])
def test_theta_nodes_gaussian_moments(mean, var):
    """Mapped from Gauss–Hermite nodes, the θ-nodes integrate the first moments exactly."""
    prior = Gaussian(mean, var)
    assert prior.n_normal_dims == prior.F
    nodes = Quadrature(samples=6 ** prior.F).nodes(prior.F)
    thetas, w = prior.theta_nodes(nodes.x)
    assert thetas.shape == (1, nodes.size, prior.F)
    np.testing.assert_allclose(np.asarray(w).sum(), 1.0, atol=1e-15)
    th = np.asarray(thetas[0])
    nw = np.asarray(nodes.w)
    mu, v = np.asarray(mean), np.asarray(var)
    np.testing.assert_allclose(nw @ th, mu, atol=1e-13)
    np.testing.assert_allclose(nw @ (th - mu) ** 2, v, rtol=1e-12)
    np.testing.assert_allclose(nw @ (th - mu) ** 4, 3 * v**2, rtol=1e-12)
    if prior.F == 2:
        np.testing.assert_allclose(nw @ ((th[:, 0] - mu[0]) * (th[:, 1] - mu[1])), 0.0,
                                   atol=1e-13)


def test_theta_nodes_under_jit():
    prior = Discrete([[1.0], [-2.0]], [0.25, 0.75])
    thetas, w = jax.jit(lambda x: prior.theta_nodes(x))(jnp.zeros((3, 0)))
    assert thetas.shape == (2, 3, 1)


# -- validation --------------------------------------------------------------------------------

@pytest.mark.parametrize("build,key", [
    (lambda: Discrete([[1.0], [2.0]], [0.5, 0.6]), "weights"),
    (lambda: Discrete([[1.0], [2.0]], [1.5, -0.5]), "weights"),
    (lambda: Discrete([[1.0], [2.0]], [1.0]), "weights"),
    (lambda: Discrete([], []), "points"),
    (lambda: Discrete([[np.nan]]), "points"),
    (lambda: FlippedSpike(1.0, 1.5, [1.0]), "p"),
    (lambda: FlippedSpike(-1.0, 0.5, [1.0]), "amplitude"),
    (lambda: FlippedSpike(1.0, 0.5, [0.0, 0.0]), "direction"),
    (lambda: OneHot(1.0, 2, [0.2, 0.2, 0.6]), "weights"),
    (lambda: Gaussian([0.0], [0.0]), "var"),
    (lambda: Gaussian([0.0], [-1.0]), "var"),
    (lambda: Gaussian([0.0, 1.0], [1.0]), "mean"),
])
def test_prior_validation(build, key):
    """The math layer names its own arguments (it knows nothing of the config file); the
    config layer adds the `prior.` table (tests/test_config_cli.py)."""
    with pytest.raises(ValueError, match=rf"^{key}\b") as info:
        build()
    assert not isinstance(info.value, ConfigError)
