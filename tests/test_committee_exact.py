"""The committee machine's exact expectations (`kind = "committee"`, `docs/committee.md`) against
an independent implementation written here in numpy, against Monte Carlo, and against the
generic autodiff field on nodes.

Conventions (Saad & Solla 1995, Goldt et al. 2019): student `φ = Σ_k v_k g(λ_k)`, teacher
`y = Σ_m A_m g(ν_m) + σζ`, `g(x) = erf(x/√2)`; Gram matrix `C = [[Q, R], [Rᵀ, T]]` over the K
student and M teacher units; `w = (v, −A)` over all `K + M` units. With `I2, I3, I4, J2` the
Gaussian integrals on the covariance of the fields they name:

- `dR_in/dt = −η v_i Σ_a w_a I3(i, n, a)`,
- `dQ_ik/dt = −η v_i Σ_a w_a I3(i, k, a) − η v_k Σ_a w_a I3(k, i, a)
  + (η²/B) v_i v_k [Σ_ab w_a w_b I4(i, k, a, b) + σ² J2(i, k)]`,
- `dv_i/dt = −η_v Σ_a w_a I2(i, a)` (second layer trained), `dT = 0`, `dA = 0`,
- `ε_g = ½ Σ_ab w_a w_b I2(a, b)`.

Nothing of headflow's formulas is imported for the references: the closed forms below are
written from the papers, the right-hand side by explicit loops over units. Every seed is fixed.
"""

from __future__ import annotations

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.integrate import solve_ivp
from scipy.special import erf

from headflow.dynamics import StepSizes
from headflow.dynamics.config import Config
from headflow.dynamics.expectations import MonteCarlo, QuasiMonteCarlo, Quadrature
from headflow.dynamics.fields import ExactField, ModelField
from headflow.dynamics.models import Committee, GramState, model_risk
from headflow.dynamics.ode import (Integrator, integrate, model_arrays, run_ode, states_risk,
                                   traced_values)
from headflow.dynamics.units import get_unit

Z = 5.0  # z-score threshold; all seeds are fixed, so a miss beyond 5σ means a bug


# -- independent closed forms (numpy; any leading batch axes) -----------------------------------
def erf_i2(C):
    """`E[g(a) g(b)]`."""
    c00, c11, c01 = C[..., 0, 0], C[..., 1, 1], C[..., 0, 1]
    return (2.0 / np.pi) * np.arcsin(c01 / np.sqrt((1.0 + c00) * (1.0 + c11)))


def erf_j2(C):
    """`E[g'(a) g'(b)]`."""
    c00, c11, c01 = C[..., 0, 0], C[..., 1, 1], C[..., 0, 1]
    return (2.0 / np.pi) / np.sqrt(1.0 + c00 + c11 - c01**2 + c00 * c11)


def erf_i3(C):
    """`E[g'(a) b g(c)]`."""
    c00, c22 = C[..., 0, 0], C[..., 2, 2]
    c01, c02, c12 = C[..., 0, 1], C[..., 0, 2], C[..., 1, 2]
    lam3 = (1.0 + c00) * (1.0 + c22) - c02**2
    return (2.0 / np.pi) / np.sqrt(lam3) * (c12 * (1.0 + c00) - c01 * c02) / (1.0 + c00)


def erf_i4(C):
    """`E[g'(a) g'(b) g(c) g(d)]`."""
    def c(i, j):
        return C[..., i, j]

    lam4 = (1.0 + c(0, 0)) * (1.0 + c(1, 1)) - c(0, 1) ** 2
    lam0 = (lam4 * c(2, 3) - c(1, 2) * c(1, 3) * (1.0 + c(0, 0))
            - c(0, 2) * c(0, 3) * (1.0 + c(1, 1)) + c(0, 1) * c(0, 2) * c(1, 3)
            + c(0, 1) * c(0, 3) * c(1, 2))
    lam1 = (lam4 * (1.0 + c(2, 2)) - c(1, 2) ** 2 * (1.0 + c(0, 0))
            - c(0, 2) ** 2 * (1.0 + c(1, 1)) + 2.0 * c(0, 1) * c(0, 2) * c(1, 2))
    lam2 = (lam4 * (1.0 + c(3, 3)) - c(1, 3) ** 2 * (1.0 + c(0, 0))
            - c(0, 3) ** 2 * (1.0 + c(1, 1)) + 2.0 * c(0, 1) * c(0, 3) * c(1, 3))
    return (4.0 / np.pi**2) / np.sqrt(lam4) * np.arcsin(lam0 / np.sqrt(lam1 * lam2))


def relu_i2(C):
    """The arc-cosine kernel of degree 1 (Cho & Saul 2009)."""
    s = np.sqrt(C[..., 0, 0] * C[..., 1, 1])
    theta = np.arccos(np.clip(C[..., 0, 1] / s, -1.0, 1.0))
    return s * (np.sin(theta) + (np.pi - theta) * np.cos(theta)) / (2.0 * np.pi)


def relu_j2(C):
    """`P(a > 0, b > 0)` (Sheppard)."""
    theta = np.arccos(np.clip(C[..., 0, 1] / np.sqrt(C[..., 0, 0] * C[..., 1, 1]), -1.0, 1.0))
    return (np.pi - theta) / (2.0 * np.pi)


CLOSED = {
    "erf": {"i2": erf_i2, "i3": erf_i3, "i4": erf_i4, "j2": erf_j2},
    "linear": {"i2": lambda C: C[..., 0, 1], "i3": lambda C: C[..., 1, 2],
               "i4": lambda C: C[..., 2, 3], "j2": lambda C: np.ones_like(C[..., 0, 1])},
    "relu": {"i2": relu_i2, "j2": relu_j2},
}

# the integrands on samples z (n, size) of the named fields: g, g' of each unit
G = {
    "erf": (lambda x: erf(x / math.sqrt(2.0)),
            lambda x: math.sqrt(2.0 / math.pi) * np.exp(-0.5 * x**2)),
    "linear": (lambda x: x, lambda x: np.ones_like(x)),
    "relu": (lambda x: np.maximum(x, 0.0), lambda x: (x > 0).astype(float)),
}
SIZE = {"i2": 2, "i3": 3, "i4": 4, "j2": 2}


def integrand(unit: str, name: str, z: np.ndarray) -> np.ndarray:
    g, dg = G[unit]
    if name == "i2":
        return g(z[:, 0]) * g(z[:, 1])
    if name == "j2":
        return dg(z[:, 0]) * dg(z[:, 1])
    if name == "i3":
        return dg(z[:, 0]) * z[:, 1] * g(z[:, 2])
    return dg(z[:, 0]) * dg(z[:, 1]) * g(z[:, 2]) * g(z[:, 3])


def random_cov(rng: np.random.Generator, n: int) -> np.ndarray:
    """A random covariance with O(1) correlations and unequal variances."""
    W = rng.normal(size=(n, n + 2)) @ np.diag(rng.uniform(0.3, 1.5, n + 2))
    return W @ W.T / (n + 2)


# -- the independent right-hand side: explicit loops over units ---------------------------------
def gram_of(Q, R, T):
    return np.block([[Q, R], [R.T, T]])


def ref_rhs(Q, R, T, v, A, *, eta, eta_v, sigma, train, unit="erf", wd=0.0, batch=1,
            noise=True):
    """`(dQ, dR, dv)` by loops over units (the formulas of the module docstring; weight decay
    adds `−2ηλQ` and `−ηλR`)."""
    f = CLOSED[unit]
    K, M = R.shape
    P = K + M
    C = gram_of(Q, R, T)
    w = np.concatenate([v, -A])

    def sub(*idx):
        return C[np.ix_(idx, idx)]

    def s3(i, j):
        return sum(w[a] * f["i3"](sub(i, j, a)) for a in range(P))

    dR = np.zeros((K, M))
    for i in range(K):
        for n in range(M):
            dR[i, n] = -eta * v[i] * s3(i, K + n) - eta * wd * R[i, n]
    dQ = np.zeros((K, K))
    for i in range(K):
        for k in range(K):
            dQ[i, k] = -eta * v[i] * s3(i, k) - eta * v[k] * s3(k, i) - 2 * eta * wd * Q[i, k]
            if noise:
                s4 = sum(w[a] * w[b] * f["i4"](sub(i, k, a, b))
                         for a in range(P) for b in range(P))
                dQ[i, k] += eta**2 / batch * v[i] * v[k] * (s4 + sigma**2 * f["j2"](sub(i, k)))
    dv = np.zeros(K)
    if train:
        for i in range(K):
            dv[i] = -eta_v * sum(w[a] * f["i2"](sub(i, a)) for a in range(P))
    return dQ, dR, dv


def ref_risk(Q, R, T, v, A, unit="erf"):
    C = gram_of(Q, R, T)
    w = np.concatenate([v, -A])
    P = len(w)
    return 0.5 * sum(w[a] * w[b] * CLOSED[unit]["i2"](C[np.ix_((a, b), (a, b))])
                     for a in range(P) for b in range(P))


class VectorRHS:
    """The same right-hand side (erf), vectorized for `solve_ivp`: the index tuples of the loops
    above gathered once, the closed forms evaluated on all sub-covariances at once (checked
    against `ref_rhs` in `test_vector_rhs_matches_loops`)."""

    def __init__(self, K, M, T, A, *, eta, eta_v, sigma, train):
        self.K, self.M, self.T, self.A = K, M, np.asarray(T), np.asarray(A)
        self.eta, self.eta_v, self.sigma, self.train = eta, eta_v, sigma, train
        P = K + M
        self.idx3 = np.array([[[(i, j, a) for a in range(P)] for j in range(P)]
                              for i in range(K)])                          # (K, P, P, 3)
        self.idx4 = np.array([[[[(i, k, a, b) for b in range(P)] for a in range(P)]
                               for k in range(K)] for i in range(K)])     # (K, K, P, P, 4)
        self.idx2 = np.array([[(i, a) for a in range(P)] for i in range(K)])  # (K, P, 2)
        self.idxk = np.array([[(i, k) for k in range(K)] for i in range(K)])  # (K, K, 2)

    @staticmethod
    def _sub(C, idx):
        return C[idx[..., :, None], idx[..., None, :]]

    def split(self, y):
        K, M = self.K, self.M
        return (y[:K * K].reshape(K, K), y[K * K:K * K + K * M].reshape(K, M),
                y[K * K + K * M:])

    def pack(self, Q, R, v):
        return np.concatenate([Q.ravel(), R.ravel(), v])

    def __call__(self, t, y):
        del t
        K = self.K
        Q, R, v = self.split(y)
        C = gram_of(Q, R, self.T)
        w = np.concatenate([v, -self.A])
        E3 = erf_i3(self._sub(C, self.idx3)) @ w                            # (K, P)
        GL = v[:, None] * E3                                                # E[G_i λ_j]
        I4 = erf_i4(self._sub(C, self.idx4))                                # (K, K, P, P)
        GG = np.outer(v, v) * (np.einsum("ikab,a,b->ik", I4, w, w)
                               + self.sigma**2 * erf_j2(self._sub(C, self.idxk)))
        dQ = -self.eta * (GL[:, :K] + GL[:, :K].T) + self.eta**2 * GG
        dR = -self.eta * GL[:, K:]
        dv = (-self.eta_v * erf_i2(self._sub(C, self.idx2)) @ w if self.train
              else np.zeros(K))
        return self.pack(dQ, dR, dv)

    def risk(self, y):
        Q, R, v = self.split(y)
        C = gram_of(Q, R, self.T)
        w = np.concatenate([v, -self.A])
        P = len(w)
        idx = np.array([[(a, b) for b in range(P)] for a in range(P)])
        return 0.5 * w @ erf_i2(self._sub(C, idx)) @ w


def random_state(seed, K, M, *, dim=None):
    """A random valid state: P = K + M correlated rows in `dim` dimensions (a full-rank Gram
    matrix, diagonal in [0.25, 1.7], O(1) correlations), random `v` and `A` (mixed signs)."""
    rng = np.random.default_rng(seed)
    P = K + M
    dim = P + 3 if dim is None else dim
    W = rng.normal(size=(P, dim)) @ (np.eye(dim) + 0.4 * rng.normal(size=(dim, dim)))
    W *= rng.uniform(0.5, 1.3, size=(P, 1)) / np.sqrt(np.mean(W**2, axis=1, keepdims=True))
    C = W @ W.T / dim
    v = rng.normal(size=K)
    A = rng.uniform(0.5, 1.5, M) * rng.choice([-1.0, 1.0], M)
    return C, v, A


def committee(K, M, A, *, unit="erf", sigma=0.0, train=True):
    return Committee(K=K, M=M, unit=get_unit(unit), noise=sigma,
                     teacher_second_layer=jnp.asarray(A), train_second_layer=train)


def gram_state(C, v, A):
    return GramState(gram=jnp.asarray(C), params={"v": jnp.asarray(v), "A": jnp.asarray(A)})


# -- 1. the Gaussian integrals ------------------------------------------------------------------
MC_CASES = [(u, n) for u in ("erf", "linear") for n in ("i2", "i3", "i4", "j2")]
MC_CASES += [("relu", "i2"), ("relu", "j2")]


@pytest.mark.parametrize("unit,name", MC_CASES)
def test_integrals_match_monte_carlo(unit, name):
    """Each closed-form integral of headflow's units is a Monte Carlo mean of its integrand
    (400k samples in numpy) within 5 standard errors, at three random covariances."""
    rng = np.random.default_rng([ord(c) for c in unit + name])
    u = get_unit(unit)
    n = 400_000
    zs = []
    for _ in range(3):
        C = random_cov(rng, SIZE[name])
        z = rng.normal(size=(n, SIZE[name])) @ np.linalg.cholesky(C).T
        vals = integrand(unit, name, z)
        mean, se = vals.mean(), vals.std(ddof=1) / math.sqrt(n)
        got = float(getattr(u, name)(jnp.asarray(C)))
        assert abs(got - mean) <= Z * se + 1e-12, (unit, name, got, mean, se)
        # and the independent closed form of this file
        ref = float(CLOSED[unit][name](C))
        assert abs(ref - mean) <= Z * se + 1e-12, (unit, name, ref, mean, se)
        zs.append((got - mean) / se if se > 0 else 0.0)
    print(f"{unit} {name}: z = {', '.join(f'{z:+.2f}' for z in zs)}")


@pytest.mark.parametrize("unit", ["erf", "linear", "relu"])
def test_integrals_match_closed_forms(unit):
    """headflow's closed forms equal the independent ones of this file to 1e-13 on a batch of
    random covariances (leading batch axes kept)."""
    rng = np.random.default_rng(7)
    u = get_unit(unit)
    worst = 0.0
    for name, ref in CLOSED[unit].items():
        C = np.stack([random_cov(rng, SIZE[name]) for _ in range(60)]).reshape(
            3, 20, SIZE[name], SIZE[name])
        got = np.asarray(getattr(u, name)(jnp.asarray(C)))
        want = ref(C)
        assert got.shape == (3, 20)
        err = np.max(np.abs(got - want) / np.maximum(np.abs(want), 1.0))
        worst = max(worst, err)
        assert err <= 1e-13, (unit, name, err)
    print(f"{unit}: closed forms, max relative difference {worst:.2e}")


def test_arcsine_through_the_arctangent():
    """The erf unit's arcsine (the half-angle identity through `arctan`, which XLA evaluates
    faster) equals numpy's `arcsin` to a few units in the last place on all of `[−1, 1]`, the
    end points, their neighbours and the subnormals included, is odd, and is NaN outside."""
    from headflow.dynamics.units._erf import arcsin

    rng = np.random.default_rng(3)
    x = np.concatenate([rng.uniform(-1.0, 1.0, 20000), np.linspace(-1.0, 1.0, 2001),
                        1.0 - np.logspace(-16, -1, 200), [0.0, 5e-324, 1e-300, 1.0]])
    x = np.concatenate([x, -x])
    got, want = np.asarray(arcsin(jnp.asarray(x))), np.arcsin(x)
    ulp = np.abs(got - want) / np.spacing(np.abs(want))
    assert np.all(np.isfinite(got)) and ulp.max() <= 4, ulp.max()
    np.testing.assert_array_equal(got[: x.size // 2], -got[x.size // 2:])
    assert np.all(np.isnan(np.asarray(arcsin(jnp.asarray([1.0 + 2e-16, -1.5, np.inf])))))


@pytest.mark.parametrize("unit", ["erf", "linear"])
def test_integral_tables_match_closed_forms(unit):
    """The tables the exact field reads (`i3_table`: `I3(i, j, a)` for every student `i`;
    `i4_pairs`: `I4(i, k, a, b)` once per unordered pair `{i, k}`, `{a, b}`, in row-major
    order), taken from one Gram matrix of 7 fields of which 3 are students, equal the
    independent closed forms of this file on the covariance of each tuple, by explicit loops, to
    1e-13 (erf overrides both to share its square roots; linear keeps the defaults)."""
    rng = np.random.default_rng(11)
    S, P = 3, 7
    C = random_cov(rng, P)
    u = get_unit(unit)
    i3, i4 = CLOSED[unit]["i3"], CLOSED[unit]["i4"]
    got3 = np.asarray(u.i3_table(jnp.asarray(C), S))
    want3 = np.array([[[i3(C[np.ix_(t, t)]) for t in ([i, j, a] for a in range(P))]
                       for j in range(P)] for i in range(S)])
    got4 = np.asarray(u.i4_pairs(jnp.asarray(C), S))
    pairs = lambda n: [(a, b) for a in range(n) for b in range(a, n)]  # noqa: E731
    want4 = np.array([[i4(C[np.ix_(t, t)]) for t in ([i, k, a, b] for a, b in pairs(P))]
                      for i, k in pairs(S)])
    assert got3.shape == (S, P, P) and got4.shape == (S * (S + 1) // 2, P * (P + 1) // 2)
    np.testing.assert_allclose(got3, want3, rtol=0, atol=1e-13)
    np.testing.assert_allclose(got4, want4, rtol=0, atol=1e-13)


# -- 2. the exact field and risk at random states -----------------------------------------------
FIELD_CASES = [  # K, M, unit, train, sigma, weight decay, batch, sgd noise
    (1, 1, "erf", False, 0.0, 0.0, 1, True),
    (2, 3, "erf", True, 0.5, 0.0, 1, True),
    (4, 4, "erf", True, 0.0, 0.0, 1, True),
    (4, 2, "erf", True, 0.2, 0.1, 4, True),
    (3, 3, "erf", True, 0.4, 0.0, 1, False),
    (2, 3, "linear", True, 0.5, 0.0, 1, True),
]


@pytest.mark.fast_compile
@pytest.mark.parametrize("K,M,unit,train,sigma,wd,batch,noise", FIELD_CASES)
def test_exact_field_matches_reference(K, M, unit, train, sigma, wd, batch, noise):
    """`ExactField` equals the loop implementation of this file, block by block (`dT = 0`,
    `dA = 0`, `dv = 0` when the second layer is frozen), and `model_risk` equals `ε_g`, to 1e-12
    relative to the largest entry, at two random states: a correlated random one and
    `Committee.initial_state` at a small dimension."""
    eta, eta_v = 0.7, 0.35
    steps = StepSizes(lr=eta, lr_bias=eta_v, weight_decay=wd, batch=batch)
    C, v, A = random_state(10 * K + M, K, M)
    model = Committee(K=K, M=M, unit=get_unit(unit), noise=sigma,
                      teacher_second_layer=jnp.asarray(A), train_second_layer=train,
                      init_first_std=0.8, init_second=0.6)
    states = [gram_state(C, v, A),
              eqx.filter_jit(model.initial_state)(jax.random.key(K + M), K + M + 4)]
    field = eqx.filter_jit(ExactField.build(model, steps, sgd_noise=noise).__call__)
    worst = 0.0
    for state in states:
        d = field(0.0, state)
        g = np.asarray(state.gram)
        Q, R, T = g[:K, :K], g[:K, K:], g[K:, K:]
        vs, As = (np.asarray(state.params[k]) for k in ("v", "A"))
        dQ, dR, dv = ref_rhs(Q, R, T, vs, As, eta=eta, eta_v=eta_v, sigma=sigma, train=train,
                             unit=unit, wd=wd, batch=batch, noise=noise)
        dg = np.asarray(d.gram)
        assert np.all(dg[K:, K:] == 0.0)
        assert np.all(np.asarray(d.params["A"]) == 0.0)
        if not train:
            assert np.all(np.asarray(d.params["v"]) == 0.0)
        for got, want in ((dg[:K, :K], dQ), (dg[:K, K:], dR), (dg[K:, :K], dR.T),
                          (np.asarray(d.params["v"]), dv)):
            err = np.max(np.abs(got - want)) / max(np.max(np.abs(want)), 1e-300)
            worst = max(worst, err)
            assert err <= 1e-12, (got, want)
        risk, risk_err = eqx.filter_jit(model_risk)(model, state)
        want = ref_risk(Q, R, T, vs, As, unit=unit)
        assert float(risk_err) == 0.0
        err = abs(float(risk) - want) / abs(want)
        worst = max(worst, err)
        assert err <= 1e-12, (float(risk), want)
    print(f"K={K} M={M} {unit}: max relative difference {worst:.2e}")


@pytest.mark.parametrize("train,sigma", [(False, 0.0), (True, 0.4)])
def test_vector_rhs_matches_loops(train, sigma):
    """The vectorized right-hand side used with `solve_ivp` below is the loop one."""
    K, M = 3, 2
    C, v, A = random_state(3, K, M)
    rhs = VectorRHS(K, M, C[K:, K:], A, eta=0.9, eta_v=0.4, sigma=sigma, train=train)
    Q, R = C[:K, :K], C[:K, K:]
    got = rhs(0.0, rhs.pack(Q, R, v))
    want = rhs.pack(*ref_rhs(Q, R, C[K:, K:], v, A, eta=0.9, eta_v=0.4, sigma=sigma,
                             train=train))
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-14)
    assert abs(rhs.risk(rhs.pack(Q, R, v)) - ref_risk(Q, R, C[K:, K:], v, A)) <= 1e-14


# -- 3. trajectories through a plateau ---------------------------------------------------------
TRAJECTORY_CASES = [  # K, M, train second layer, σ, η, η_v, v0, seed of R0
    (2, 2, False, 0.0, 0.5, 0.0, 1.0, 1),
    # both layers trained, σ = 0.3: through the config (test_run_ode_config_matches_reference)
    pytest.param(3, 3, False, 0.2, 0.5, 0.0, 1.0, 2, marks=pytest.mark.slow),
]
T_MAX = 1000.0
TIMES = np.linspace(0.0, T_MAX, 201)
RTOL, ATOL = 1e-11, 1e-13


def plateau_start(K, M, v0, seed):
    """`Q = I/4`, `T = I`, `A = 1`, `v = v0` and a tiny random `R` (O(1e-3)): the students
    first reach the symmetric plateau, then the O(1e-3) asymmetry grows until they
    specialize (between t = 200 and t = 500 in all three cases)."""
    R0 = 1e-3 * np.random.default_rng(seed).normal(size=(K, M))
    return gram_of(0.25 * np.eye(K), R0, np.eye(M)), np.full(K, v0), np.ones(M)


def reference_trajectory(K, M, train, sigma, eta, eta_v, C0, v0, A):
    """`solve_ivp` (DOP853, rtol 1e-12, atol 1e-14) of the independent right-hand side on
    `TIMES`: Q, R, v and ε_g."""
    rhs = VectorRHS(K, M, C0[K:, K:], A, eta=eta, eta_v=eta_v, sigma=sigma, train=train)
    sol = solve_ivp(rhs, (0.0, T_MAX), rhs.pack(C0[:K, :K], C0[:K, K:], v0), method="DOP853",
                    rtol=1e-12, atol=1e-14, t_eval=TIMES)
    assert sol.success
    ref = [rhs.split(y) for y in sol.y.T]
    risk = np.array([rhs.risk(y) for y in sol.y.T])
    # the plateau and the escape are in the window: ε_g falls by more than half after t = 150
    assert risk[-1] < 0.5 * risk[np.searchsorted(TIMES, 150.0)]
    return {"Q": np.stack([r[0] for r in ref]), "R": np.stack([r[1] for r in ref]),
            "v": np.stack([r[2] for r in ref]), "risk": risk}


def differences(got, want, M):
    """The largest difference of each of Q, R, v and ε_g over the whole trajectory, relative to
    that quantity's largest magnitude; T and A must not move at all."""
    np.testing.assert_array_equal(got["t"], TIMES)
    assert np.all(got["T"] == np.eye(M)) and np.all(got["A"] == 1.0)
    return {k: float(np.max(np.abs(got[k] - w)) / np.max(np.abs(w))) for k, w in want.items()}


@pytest.mark.fast_compile
@pytest.mark.parametrize("K,M,train,sigma,eta,eta_v,v0,seed", TRAJECTORY_CASES)
def test_trajectory_matches_reference(K, M, train, sigma, eta, eta_v, v0, seed):
    """The engine of `run_ode` for a committee config (the exact field, dopri8 at rtol 1e-11,
    atol 1e-13, the closed-form risk on the saved states) through the plateau and the escape
    agrees with `solve_ivp` of the independent right-hand side to 1e-8 of each quantity's
    scale, over the whole trajectory."""
    C0, v0, A = plateau_start(K, M, v0, seed)
    model = committee(K, M, A, sigma=sigma, train=train)
    steps = StepSizes(lr=eta, lr_bias=eta_v, weight_decay=0.0, batch=1)
    field = ExactField.build(traced_values(model), traced_values(steps))
    sol = integrate(field, gram_state(C0, v0, A), TIMES,
                    Integrator.adaptive("dopri8", rtol=RTOL, atol=ATOL))
    risk, risk_err = states_risk(model, sol.overlaps, MonteCarlo(samples=64))
    assert np.all(risk_err == 0.0)
    got = {"t": np.asarray(sol.t), "risk": risk, **model_arrays(model, sol.overlaps)}
    diff = differences(got, reference_trajectory(K, M, train, sigma, eta, eta_v, C0, v0, A),
                       M)
    print(f"trajectory K={K} M={M} train={train} σ={sigma}: "
          + ", ".join(f"{k} {d:.2e}" for k, d in diff.items()))
    assert max(diff.values()) <= 1e-8, diff


COMMITTEE_TOML = """
[model]
kind = "committee"
K = 2
M = 2
activation = "erf"
noise = 0.3
train_second_layer = true
[training]
lr = 0.5
lr_second = 0.5
t_max = 1000.0
[ode]
solver = "dopri8"
rtol = 1e-11
atol = 1e-13
"""


@pytest.mark.fast_compile
def test_run_ode_config_matches_reference():
    """The same through the config: `Config.from_toml` of a committee (the expectation defaults
    to "exact" for erf) and `run_ode(cfg, state0, times)` (both layers, σ = 0.3)."""
    cfg = Config.from_toml(COMMITTEE_TOML)
    assert cfg.ode.expectation == "exact"
    C0, v0, A = plateau_start(2, 2, 0.5, 0)
    res = run_ode(cfg, gram_state(C0, v0, A), TIMES)
    assert np.all(res.arrays()["risk_err"] == 0.0)          # the closed-form risk
    diff = differences(res.arrays(), reference_trajectory(2, 2, True, 0.3, 0.5, 0.5, C0, v0, A),
                       2)
    print("run_ode(config): " + ", ".join(f"{k} {d:.2e}" for k, d in diff.items()))
    assert max(diff.values()) <= 1e-8, diff


# -- 4. the autodiff field on nodes against the exact field ------------------------------------
NODE_CASES = [  # backend, K, M, seed of the state
    (MonteCarlo(samples=1 << 14, seed=3), 3, 4, 11),
    (QuasiMonteCarlo(samples=1 << 14, seed=4), 4, 3, 12),
    (Quadrature(samples=8**5), 2, 2, 13),
]


@pytest.mark.fast_compile
@pytest.mark.parametrize("backend,K,M,seed", NODE_CASES,
                         ids=lambda x: type(x).__name__ if hasattr(x, "samples") else None)
def test_model_field_matches_exact(backend, K, M, seed):
    """`ModelField` (autodiff of the loss, averaged over nodes of all fields and the label noise)
    agrees with `ExactField` within 5 of its own error estimate in every entry, at a random
    state with both layers trained and σ > 0; entries with a zero error estimate (T, A) are
    exactly zero in both."""
    C, v, A = random_state(seed, K, M)
    model = committee(K, M, A, sigma=0.4, train=True)
    steps = StepSizes(lr=0.8, lr_bias=0.5, weight_decay=0.0, batch=1)
    state = gram_state(C, v, A)
    exact = eqx.filter_jit(ExactField.build(model, steps).__call__)(0.0, state)
    rhs, err = eqx.filter_jit(ModelField.build(model, steps, backend).with_error)(state)
    zs = []
    for e, r, s in zip(jax.tree.leaves(exact), jax.tree.leaves(rhs), jax.tree.leaves(err)):
        e, r, s = np.asarray(e), np.asarray(r), np.asarray(s)
        zero = s == 0.0
        assert np.all(r[zero] == e[zero]), (r[zero], e[zero])
        zs.append(np.abs(r[~zero] - e[~zero]) / s[~zero])
    z = np.concatenate(zs)
    scale = max(float(np.max(np.abs(np.asarray(x)))) for x in jax.tree.leaves(exact))
    rel = max(float(np.max(np.abs(np.asarray(a) - np.asarray(b)))) for a, b in
              zip(jax.tree.leaves(exact), jax.tree.leaves(rhs))) / scale
    print(f"{type(backend).__name__} K={K} M={M}: max |z| {z.max():.2f} over {z.size} "
          f"entries, max difference / max |RHS| {rel:.2e}")
    assert z.max() <= Z, z


def _relu_increments(C, v, A, *, eta, eta_v, sigma, wd, batch, n, seed):
    """`n` samples of `D ×` one step's change of `(Q, R, v)` for ReLU units as `D → ∞`, on
    fields `(λ, ν) ~ N(0, C)` and label noise ζ, written out by hand: `Δ = Σ v_i relu(λ_i) −
    Σ A_n relu(ν_n) − σζ`, `G_i = Δ v_i 1[λ_i > 0]`; `dQ_ik = −η(G_i λ_k + G_k λ_i) +
    η² G_i G_k/B − 2ηκ Q_ik`, `dR_in = −η G_i ν_n − ηκ R_in`, `dv_i = −η_v Δ relu(λ_i)`.
    Returns the flattened `(Q, R, v)` increments, (n, K² + K·M + K)."""
    K, M = len(v), len(A)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, K + M)) @ np.linalg.cholesky(C).T
    lam, nu = x[:, :K], x[:, K:]
    delta = (np.maximum(lam, 0) @ v - np.maximum(nu, 0) @ A
             - sigma * rng.standard_normal(n))
    G = delta[:, None] * v[None, :] * (lam > 0)
    Q, R = C[:K, :K], C[:K, K:]
    dQ = (-eta * (G[:, :, None] * lam[:, None, :] + lam[:, :, None] * G[:, None, :])
          + eta**2 / batch * G[:, :, None] * G[:, None, :] - 2 * eta * wd * Q[None])
    dR = -eta * G[:, :, None] * nu[:, None, :] - eta * wd * R[None]
    dv = -eta_v * delta[:, None] * np.maximum(lam, 0)
    return np.concatenate([dQ.reshape(n, -1), dR.reshape(n, -1), dv], axis=1)


@pytest.mark.fast_compile
def test_relu_drift_equals_monte_carlo_of_hand_increments():
    """The ReLU committee has no closed-form drift: `ModelField` (autodiff of the loss on QMC
    nodes of the fields and the label noise, its error estimate beside it) against a brute-force
    Monte Carlo mean of the increments written out by hand (4·10⁶ samples), with both layers
    trained, σ > 0, weight decay and a batch of 2: every entry of dQ, dR, dv within 5 combined
    standard errors, and the drift far from zero."""
    K, M = 2, 2
    C, v, A = random_state(11, K, M)
    model = Committee(K=K, M=M, unit=get_unit("relu"), noise=0.3,
                      teacher_second_layer=jnp.asarray(A), train_second_layer=True)
    eta, eta_v, wd, batch = 0.9, 0.4, 0.1, 2
    steps = StepSizes(lr=eta, lr_bias=eta_v, weight_decay=wd, batch=batch)
    field = ModelField.build(model, steps, QuasiMonteCarlo(samples=1 << 15, seed=2))
    rhs, err = eqx.filter_jit(lambda f, s: f.with_error(s))(field, gram_state(C, v, A))
    g, ge = np.asarray(rhs.gram), np.asarray(err.gram)
    got = np.concatenate([g[:K, :K].ravel(), g[:K, K:].ravel(), np.asarray(rhs.params["v"])])
    got_err = np.concatenate([ge[:K, :K].ravel(), ge[:K, K:].ravel(),
                              np.asarray(err.params["v"])])
    U = np.concatenate([_relu_increments(C, v, A, eta=eta, eta_v=eta_v, sigma=0.3, wd=wd,
                                         batch=batch, n=1_000_000, seed=s) for s in range(4)])
    want, se = U.mean(axis=0), U.std(axis=0) / np.sqrt(len(U))
    z = (got - want) / np.sqrt(se**2 + got_err**2)
    print(f"ReLU drift: max |z| {np.max(np.abs(z)):.2f} over {z.size} entries")
    assert np.all(np.abs(z) < Z), (got, want, se, got_err, z)
    assert np.all(np.abs(want) > 10 * se), (want, se)
    np.testing.assert_array_equal(g[K:, K:], 0.0)               # the teacher does not move
