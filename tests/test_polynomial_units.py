"""Polynomial units (`he1` … `he4`, `square`), the smooth and kinked non-polynomial ones (`tanh`,
`abs`) and the Hermite expansion of a unit (its information exponent).

- `He_k` equals numpy's probabilists' Hermite polynomial (an independent implementation).
- The four Gaussian integrals of a polynomial unit are exact: Mehler's `E[He_k(a) He_k(b)] =
  k! ρ^k` to round-off, every integral a Monte Carlo mean of its integrand (numpy, its own
  derivatives) within 5 standard errors at random and at singular covariances, and unchanged
  by a rule two orders higher.
- The committee's exact field from these integrals equals the autodiff field on Gauss–Hermite
  nodes of an order that is exact for the integrand, to round-off.
- The information exponent (the first non-zero Hermite coefficient of order ≥ 1) of each unit
  is the textbook one.
"""

from __future__ import annotations

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numpy.polynomial import hermite_e as H

from headflow.dynamics import StepSizes
from headflow.dynamics.expectations import Quadrature
from headflow.dynamics.fields import ExactField, ModelField
from headflow.dynamics.models import Committee, GramState
from headflow.dynamics.units import (get_unit, hermite, hermite_coefficients,
                                     information_exponent)
from headflow.dynamics.units._polynomial import gaussian_expectation

Z = 5.0
POLY = {"he1": [0, 1], "he2": [0, 0, 1], "he3": [0, 0, 0, 1], "he4": [0, 0, 0, 0, 1],
        "square": [1, 0, 1]}
"""Each polynomial unit as He-series coefficients (numpy's `hermite_e`): `x² = He_0 + He_2`."""


def _numpy(unit: str):
    c = np.asarray(POLY[unit], float)
    return (lambda x: H.hermeval(x, c)), (lambda x: H.hermeval(x, H.hermeder(c)))


def _integrand(unit: str, name: str, x: np.ndarray) -> np.ndarray:
    g, dg = _numpy(unit)
    return {"i2": lambda: g(x[:, 0]) * g(x[:, 1]),
            "j2": lambda: dg(x[:, 0]) * dg(x[:, 1]),
            "i3": lambda: dg(x[:, 0]) * x[:, 1] * g(x[:, 2]),
            "i4": lambda: dg(x[:, 0]) * dg(x[:, 1]) * g(x[:, 2]) * g(x[:, 3])}[name]()


SIZE = {"i2": 2, "j2": 2, "i3": 3, "i4": 4}


def _random_cov(rng, n: int, singular: bool) -> np.ndarray:
    W = rng.normal(size=(n, n + 2)) * rng.uniform(0.4, 1.2, size=(n, 1))
    if singular:
        W[-1] = W[0]                      # the last field is the first one
    return W @ W.T / (n + 2)


def test_hermite_equals_numpys():
    x = np.random.default_rng(0).normal(scale=2.0, size=200)
    for k in range(6):
        want = H.hermeval(x, np.eye(k + 1)[k])
        np.testing.assert_allclose(np.asarray(hermite(k, jnp.asarray(x))), want, rtol=1e-12,
                                   atol=1e-12)


@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_mehler(k):
    """`E[He_k(a) He_k(b)] = k! ρ^k` for unit variances and correlation ρ (Mehler's formula),
    and `E[He_k'(a) He_k'(b)] = k² (k−1)! ρ^{k−1}` (`He_k' = k He_{k−1}`)."""
    u = get_unit(f"he{k}")
    for rho in (-0.7, 0.0, 0.3, 0.95):
        C = jnp.asarray([[1.0, rho], [rho, 1.0]])
        assert float(u.i2(C)) == pytest.approx(math.factorial(k) * rho**k, abs=1e-12)
        want = k**2 * math.factorial(k - 1) * rho ** (k - 1)
        assert float(u.j2(C)) == pytest.approx(want, abs=1e-12)


@pytest.mark.parametrize("unit", ["he2", "he3", "square"])
@pytest.mark.parametrize("name", ["i2", "j2", "i3", "i4"])
def test_integrals_match_monte_carlo(unit, name):
    """At two random covariances and one singular one, each integral of the unit within 5
    standard errors of a Monte Carlo mean of its integrand (numpy, 400k samples), and equal to
    the same rule two orders higher to round-off (the order covers the degree)."""
    rng = np.random.default_rng([ord(c) for c in unit + name])
    u = get_unit(unit)
    n = 400_000
    for singular in (False, False, True):
        C = _random_cov(rng, SIZE[name], singular)
        w, V = np.linalg.eigh(C)
        x = rng.normal(size=(n, len(C))) @ (V * np.sqrt(np.maximum(w, 0))).T
        vals = _integrand(unit, name, x)
        mean, se = vals.mean(), vals.std(ddof=1) / math.sqrt(n)
        got = float(getattr(u, name)(jnp.asarray(C)))
        assert abs(got - mean) <= Z * se + 1e-12, (unit, name, singular, got, mean, se)
        f = {"i2": lambda y: u(y[..., 0]) * u(y[..., 1]),
             "j2": lambda y: u.derivative(y[..., 0]) * u.derivative(y[..., 1]),
             "i3": lambda y: u.derivative(y[..., 0]) * y[..., 1] * u(y[..., 2]),
             "i4": lambda y: (u.derivative(y[..., 0]) * u.derivative(y[..., 1])
                              * u(y[..., 2]) * u(y[..., 3]))}[name]
        higher = float(gaussian_expectation(f, jnp.asarray(C), 4 * u.degree + 4))
        assert got == pytest.approx(higher, rel=1e-11, abs=1e-12)


def test_integrals_keep_batch_axes():
    u = get_unit("he3")
    rng = np.random.default_rng(5)
    C = np.stack([_random_cov(rng, 4, False) for _ in range(6)]).reshape(2, 3, 4, 4)
    got = np.asarray(u.i4(jnp.asarray(C)))
    assert got.shape == (2, 3)
    assert float(got[1, 2]) == pytest.approx(float(u.i4(jnp.asarray(C[1, 2]))), rel=1e-13)


@pytest.mark.parametrize("unit", ["he2", "he3", "square"])
def test_committee_exact_field_equals_nodes(unit):
    """A committee of polynomial units (K = 2, M = 2, both layers trained, σ > 0, a batch of
    2): the exact field (its integrals) equals the autodiff field on an 8-point Gauss–Hermite
    product rule over the fields and the label noise, which is exact for these integrands (of
    degree at most 15 a coordinate), to round-off."""
    rng = np.random.default_rng(3)
    W = rng.normal(size=(4, 7))
    C = W @ W.T / 7
    model = Committee(K=2, M=2, unit=get_unit(unit), noise=0.3,
                      teacher_second_layer=jnp.asarray([1.0, -0.7]), train_second_layer=True)
    state = GramState(gram=jnp.asarray(C), params={"v": jnp.asarray([0.6, -0.4]),
                                                   "A": jnp.asarray([1.0, -0.7])})
    steps = StepSizes(lr=0.3, lr_bias=0.2, weight_decay=0.1, batch=2)
    assert get_unit(unit).exact
    exact = eqx.filter_jit(ExactField.build(model, steps).__call__)(0.0, state)
    nodes = eqx.filter_jit(ModelField.build(model, steps, Quadrature(samples=8**5)).__call__)(
        0.0, state)
    scale = max(float(jnp.max(jnp.abs(x))) for x in jax.tree.leaves(exact))
    assert scale > 1e-2
    for e, r in zip(jax.tree.leaves(exact), jax.tree.leaves(nodes)):
        np.testing.assert_allclose(np.asarray(r), np.asarray(e), rtol=0, atol=1e-11 * scale)


@pytest.mark.parametrize("unit,k", [("he1", 1), ("he2", 2), ("he3", 3), ("he4", 4),
                                    ("square", 2), ("linear", 1), ("erf", 1), ("relu", 1),
                                    ("tanh", 1), ("abs", 2)])
def test_information_exponent_of_each_unit(unit, k):
    assert information_exponent(get_unit(unit)) == k


def test_hermite_coefficients_of_a_combination():
    """`g = He_3 + 0.5 He_4 + 2`: the coefficients are `(2, 0, 0, 1, 0.5, 0, …)`, the exponent
    3; a constant has none."""
    c = hermite_coefficients(lambda x: hermite(3, x) + 0.5 * hermite(4, x) + 2.0, order=6)
    np.testing.assert_allclose(c, [2.0, 0, 0, 1.0, 0.5, 0, 0], atol=1e-12)
    assert information_exponent(lambda x: hermite(3, x) + 0.5 * hermite(4, x) + 2.0) == 3
    assert information_exponent(lambda x: jnp.ones_like(x)) is None
