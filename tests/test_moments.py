"""The Gaussian moment identities of `headflow.dynamics.fields` (Isserlis/Wick with means), checked
exactly against derivatives of the moment-generating function, and numerically."""

from __future__ import annotations

import inspect

import jax.numpy as jnp
import numpy as np
import sympy as sp

from headflow.dynamics.fields import fourth_moment, third_moment


def _mgf_moments():
    """`E[abc]`, `E[abcd]` and the second moments of a Gaussian with symbolic means and
    covariance, from `∂ⁿ M / ∂t_a … |_{t=0}`, `M(t) = exp(tᵀμ + ½ tᵀΣt)`."""
    t = sp.symbols("t0:4")
    mu = sp.symbols("mu0:4")
    S = sp.Matrix(4, 4, lambda i, j: sp.Symbol(f"s{min(i, j)}{max(i, j)}"))
    tv = sp.Matrix(t)
    M = sp.exp((tv.T * sp.Matrix(mu))[0] + (tv.T * S * tv)[0] / 2)
    at0 = {x: 0 for x in t}

    def E(*idx):
        return sp.expand(sp.diff(M, *[t[i] for i in idx]).subs(at0))

    return mu, E


def test_isserlis_with_means_is_exact():
    # the plain functions (without the run-time array type checks) take sympy expressions
    third_moment_, fourth_moment_ = inspect.unwrap(third_moment), inspect.unwrap(fourth_moment)
    mu, E = _mgf_moments()
    a, b, c, d = mu
    e2 = {(i, j): E(i, j) for i in range(4) for j in range(4)}
    third = third_moment_(a, b, c, e2[0, 1], e2[0, 2], e2[1, 2])
    assert sp.expand(third - E(0, 1, 2)) == 0
    fourth = fourth_moment_(a, b, c, d, e2[0, 1], e2[0, 2], e2[0, 3], e2[1, 2], e2[1, 3],
                           e2[2, 3])
    assert sp.expand(fourth - E(0, 1, 2, 3)) == 0


def test_moments_broadcast_numerically():
    """The same identities on arrays (the way the fields call them), against Monte Carlo
    within 5 standard errors."""
    rng = np.random.default_rng(0)
    A = rng.normal(size=(4, 4))
    cov, mean = A @ A.T / 4, rng.normal(size=4)
    x = rng.multivariate_normal(mean, cov, size=400_000)
    m = jnp.asarray(mean)
    e2 = jnp.asarray(mean[:, None] * mean[None, :] + cov)
    third = float(third_moment(m[0], m[1], m[2], e2[0, 1], e2[0, 2], e2[1, 2]))
    fourth = float(fourth_moment(m[0], m[1], m[2], m[3], e2[0, 1], e2[0, 2], e2[0, 3], e2[1, 2],
                                 e2[1, 3], e2[2, 3]))
    for exact, samples in ((third, x[:, 0] * x[:, 1] * x[:, 2]), (fourth, np.prod(x, axis=1))):
        se = samples.std() / np.sqrt(len(samples))
        assert abs(samples.mean() - exact) < 5 * se, (samples.mean(), exact, se)
