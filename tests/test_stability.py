"""Linear stability of the unspecialized phase (dynamics/analysis): the symmetric subspace,
exact head-permutation equivariance of the closed-node field, Schur block structure of the
Jacobian, autodiff Jacobian against finite differences, and the tangent-linear propagator
against the nonlinear ODE for a small head-difference perturbation."""

from __future__ import annotations

import itertools
import math

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
from _util import make_model, optimized

from headflow.dynamics import Overlaps, StepSizes
from headflow.dynamics import analysis as st
from headflow.dynamics._risk import key_dims
from headflow.dynamics.expectations import QuasiMonteCarlo
from headflow.dynamics.models.attention import ManifoldField
from headflow.dynamics.ode import Integrator, integrate
from headflow.dynamics.models.attention import symmetric_start
from headflow.dynamics.priors import Discrete


def _model(activation="bayes_softmax", H=3, F=2, L=3, train_values=True):
    prior = Discrete([[1.5, 0.0], [-1.0, 1.0], [0.3, -2.0]], [0.3, 0.5, 0.2]) if F == 2 \
        else None
    return make_model(activation, L=L, H=H, prior=prior, train_values=train_values)


def _random_state(key, H, F):
    k = jr.split(key, 5)
    m = 0.5 * jr.normal(k[0], (H, F))
    A = jr.normal(k[1], (H, H)) / np.sqrt(H)
    q = m @ m.T + 0.3 * A @ A.T + 0.05 * jnp.eye(H)
    n = 0.4 * jr.normal(k[2], (H,))
    C = jr.normal(k[3], (H, H)) / np.sqrt(H)
    s = jnp.outer(n, n) + 0.3 * C @ C.T + 0.05 * jnp.eye(H)
    b = 0.3 * jr.normal(k[4], (H,))
    return Overlaps.manifold(m, q, n, s, b)


def _permute(ov, p):
    p = np.asarray(p)
    return Overlaps.manifold(ov.m[p], ov.q[p][:, p], ov.n[p], ov.s[p][:, p], ov.b[p])


def _field(model, samples=6 * 64, lr=0.8):
    return st.equivariant_field(model, StepSizes(lr=lr, lr_bias=1.0),
                                QuasiMonteCarlo(samples=samples))


def _close(a, b, rtol, atol):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=rtol, atol=atol)


def test_head_average_is_orthogonal_projector():
    H, F = 4, 2
    x = _random_state(jr.key(0), H, F)
    y = _random_state(jr.key(1), H, F)
    px = st.head_average(x)
    _close(st.head_average(px), px, 1e-14, 1e-14)
    for p in itertools.permutations(range(H)):
        _close(_permute(px, p), px, 1e-14, 1e-14)
    resid = st.flatten(x) - st.flatten(px)
    assert abs(float(resid @ st.flatten(st.head_average(y)))) < 1e-12


@pytest.mark.parametrize("activation,H", [("softmax", 3), ("softmax1", 3),
                                          ("bayes_softmax", 3), ("bayes_softmax", 5)])
def test_closed_nodes_make_the_field_exactly_equivariant(activation, H):
    F = 2
    model = _model(activation, H=H, F=F)
    field = _field(model, samples=math.factorial(H) * 16)
    assert field.nodes.orbit == math.factorial(H)
    f = jax.jit(lambda o: field(0.0, o))
    ov = _random_state(jr.key(2), H, F)
    d = f(ov)
    scale = max(float(jnp.max(jnp.abs(x))) for x in jax.tree.leaves(d))
    rng = np.random.default_rng(0)
    for _ in range(3):
        p = rng.permutation(H)
        _close(f(_permute(ov, p)), _permute(d, p), 0, 1e-12 * scale)
    # independent (unclosed) nodes are equivariant only up to their sampling error
    raw = QuasiMonteCarlo(samples=384).nodes(key_dims(model))
    plain = ManifoldField(model=model, steps=field.steps, nodes=raw)
    g = jax.jit(lambda o: plain(0.0, o))
    p = np.roll(np.arange(H), 1)
    gap = max(float(jnp.max(jnp.abs(a - b))) for a, b in
              zip(jax.tree.leaves(g(_permute(ov, p))), jax.tree.leaves(_permute(g(ov), p))))
    assert gap > 1e-6 * scale


def test_schur_block_structure_of_the_jacobian():
    """At a symmetric state the Jacobian maps the symmetric subspace and each standard block
    to themselves, with the same matrix B on every block (Schur's lemma)."""
    H, F = 4, 2
    model = _model(H=H, F=F)
    field = _field(model, samples=24 * 16)
    modes = st.HeadModes.build(model)
    ov = st.head_average(_random_state(jr.key(3), H, F))
    N = st.flatten(ov).shape[0]
    P = np.stack([np.asarray(st.flatten(st.head_average(st.unflatten(jnp.asarray(e), H, F))))
                  for e in np.eye(N)], axis=1)
    u, sv, _ = np.linalg.svd(P)
    sym = u[:, sv > 0.5]
    assert sym.shape[1] == F + 6        # m (F), q diag/off, n, s diag/off, b
    blocks = [np.asarray(u) for u in modes.standard]
    U = np.concatenate([sym] + blocks + [np.asarray(modes.differences)], axis=1)
    J = np.asarray(st.restricted_jacobian(field, ov, jnp.asarray(U)))
    ks, mu = sym.shape[1], modes.mu
    scale = np.abs(J).max()
    # symmetric ↔ differences decouple
    assert np.abs(J[:ks, ks:]).max() < 1e-10 * scale
    assert np.abs(J[ks:, :ks]).max() < 1e-10 * scale
    B = [J[ks + i * mu:ks + (i + 1) * mu, ks + i * mu:ks + (i + 1) * mu] for i in range(H - 1)]
    for i in range(H - 1):
        np.testing.assert_allclose(B[i], B[0], atol=1e-10 * scale)
        for j in range(H - 1):
            if i != j:
                off = J[ks + i * mu:ks + (i + 1) * mu, ks + j * mu:ks + (j + 1) * mu]
                assert np.abs(off).max() < 1e-10 * scale
    # the standard blocks lie inside the head-difference space, which is orthogonal to `sym`
    D = np.asarray(modes.differences)
    for u in blocks:
        np.testing.assert_allclose(D @ (D.T @ u), u, atol=1e-12)
    assert np.abs(sym.T @ D).max() < 1e-12
    # the B of growth_matrix is the first block
    np.testing.assert_allclose(np.asarray(st.growth_matrix(field, ov, modes)), B[0],
                               atol=1e-10 * scale)


@pytest.mark.parametrize("activation", ["softmax", "bayes_softmax"])
def test_jacobian_matches_finite_differences(activation):
    H, F = 3, 2
    model = _model(activation, H=H, F=F)
    field = _field(model)
    modes = st.HeadModes.build(model)
    ov = _random_state(jr.key(4), H, F)
    U = modes.differences
    J = np.asarray(st.restricted_jacobian(field, ov, U))
    f = jax.jit(lambda v: st.flatten(field(0.0, st.unflatten(v, H, F))))
    x0 = st.flatten(ov)
    h = 1e-5
    for j in range(U.shape[1]):
        e = U[:, j]
        # fourth-order central difference
        fd = (-f(x0 + 2 * h * e) + 8 * f(x0 + h * e) - 8 * f(x0 - h * e) + f(x0 - 2 * h * e)
              ) / (12 * h)
        np.testing.assert_allclose(np.asarray(U.T @ fd), J[:, j], rtol=1e-6,
                                   atol=1e-7 * np.abs(J).max())


def test_softmax_bias_and_frozen_values_are_left_out():
    m = st.HeadModes.build(_model("softmax", H=3, F=1, train_values=False))
    assert m.labels == ("m_1", "q_diag", "q_off")
    m = st.HeadModes.build(_model("softmax1", H=2, F=2))
    assert m.labels == ("m_1", "m_2", "q_diag", "n", "s_diag", "b")


@pytest.mark.slow
def test_tangent_linear_matches_nonlinear_growth():
    """A small head-difference perturbation integrated with the full nonlinear ODE grows as the
    tangent-linear propagator predicts, within 2% (in fact far better) while it stays small."""
    H = 2
    model = make_model("bayes_softmax", L=3, H=H)
    field = st.equivariant_field(model, StepSizes(lr=1.0, lr_bias=1.0),
                                 QuasiMonteCarlo(samples=512))
    modes = st.HeadModes.build(model)
    ov0 = symmetric_start(model, key_std=0.1, value_std=0.1, bias=0.0)
    ts = np.linspace(0.0, 8.0, 17)
    res = st.linear_stability(field, ov0, ts, modes=modes,
                              integrator=Integrator.adaptive(rtol=1e-9, atol=1e-12,
                                                             max_steps=20000, blowup=None))
    x = np.array(jr.normal(jr.key(5), (modes.mu,)))
    x /= np.linalg.norm(x)
    eps = 3e-5
    U = np.asarray(modes.standard[0])
    pert = st.unflatten(jnp.asarray(eps * U @ x), H, model.F)
    start = jax.tree.map(lambda a, b: a + b, st.head_average(ov0), pert)
    sol = integrate(field, start, ts, Integrator.adaptive(rtol=1e-9, atol=1e-13))
    sym = res.symmetric
    diff = np.asarray(jax.vmap(st.flatten)(sol.overlaps)) - np.asarray(jax.vmap(st.flatten)(sym))
    got = diff @ U / eps                                             # (T, μ) coordinates
    want = np.einsum("tij,j->ti", np.asarray(res.propagator), x)
    growth = np.linalg.norm(want, axis=1)
    assert growth[-1] > 5.0                                          # it did grow
    rel = np.linalg.norm(got - want, axis=1) / growth
    print(f"tangent-linear vs nonlinear: max relative deviation {rel.max():.2e}, growth "
          f"x{growth[-1]:.1f}")
    assert rel.max() < 0.02, rel
    # and the perturbation stayed in its block (no leak into the symmetric subspace)
    leak = diff - (diff @ U) @ U.T
    assert np.abs(leak).max() < 1e-3 * eps * growth.max()
    # the instantaneous eigenvalue is the late-time growth rate of Φ when it barely changes
    lam = np.asarray(res.growth_rate)
    assert np.all(np.isfinite(lam))


def test_crossing_times_of_an_exponential():
    """For a stationary rate λ: ln S = λt + ln s0, so t_esc(D) = (ln θ + ½ ln D − ln s0)/λ and
    the slope in ln D is exactly 1/(2λ)."""
    lam, s0, theta = 0.7, 0.3, 0.2
    t = np.linspace(0.0, 30.0, 3001)
    logs = (lam * t + np.log(s0))[None, :]
    dims = np.array([250, 500, 1000, 2000, 4000], dtype=float)
    got = st.crossing_times(t, logs, np.log(theta) + 0.5 * np.log(dims))[0]
    want = (np.log(theta) + 0.5 * np.log(dims) - np.log(s0)) / lam
    np.testing.assert_allclose(got, want, atol=1e-10)
    assert np.polyfit(np.log(dims), got, 1)[0] == pytest.approx(1 / (2 * lam), rel=1e-10)


def test_linear_spread_is_homogeneous_and_initial_law_scales():
    """The linear spread is positively homogeneous of degree one in the initial contrasts, and
    `√D ×` the head differences of a random start have a D-independent law (second moments
    within Monte Carlo error at D = 500 and 4000)."""
    model = make_model("softmax1", L=3, H=3)
    modes = st.HeadModes.build(model)
    # 2000 random starts of dimension up to 4000: drawing them (run time, not compile time)
    # dominates, so compile with XLA's optimizations
    with optimized():
        c1 = np.asarray(st.initial_contrasts(model, jr.key(6), modes, n=2000, dim=500,
                                             key_std=0.1, value_std=0.1, bias=0.0))
        c2 = np.asarray(st.initial_contrasts(model, jr.key(7), modes, n=2000, dim=4000,
                                             key_std=0.1, value_std=0.1, bias=0.0))
    v1, v2 = (c1 ** 2).mean(axis=0), (c2 ** 2).mean(axis=0)
    se = np.sqrt(((c1 ** 2).var(axis=0) + (c2 ** 2).var(axis=0)) / 2000)
    assert np.all(np.abs(v1 - v2) < 5 * se + 1e-12)
    # m contrasts: m_hf ~ N(0, σ_k²/D) per head, so √D·(w·m) has variance σ_k² = 0.01
    i = modes.labels.index("m_1")
    assert abs(v2[:, i].mean() - 0.01) < 5 * se[:, i].mean()


def test_reduced_symmetric_field():
    """On the symmetric subspace the reduced ODE is the full (equivariant) field itself; off it,
    the head average of the field at the projected state."""
    H, F = 3, 2
    model = _model(H=H, F=F)
    field = _field(model)
    red = st.SymmetricField(field)
    ov_s = st.head_average(_random_state(jr.key(8), H, F))
    full = field(0.0, ov_s)
    _close(red(0.0, ov_s), full, 0, 1e-13)
    _close(st.head_average(full), full, 0, 1e-13)           # f(symmetric) is symmetric
    # off it: the field at the projected state, whatever the head differences (which leave
    # the projection unchanged); no second projection is needed since f(symmetric) is symmetric
    ov = _random_state(jr.key(9), H, F)
    shifted = jax.tree.map(lambda a, b: a + b, ov,
                           st.head_differences(_random_state(jr.key(10), H, F)))
    _close(st.head_average(shifted), st.head_average(ov), 0, 1e-13)
    _close(red(0.0, ov), field(0.0, st.head_average(ov)), 0, 1e-12)
    _close(red(0.0, shifted), red(0.0, ov), 0, 1e-12)
