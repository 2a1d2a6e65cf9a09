"""Local fields and the population risk (`docs/model.md#population-risk`): sampled local fields
have the means and
covariances of `docs/model.md#population-risk` (within error bars), the `FieldLaw` chain reproduces
the Gram matrix,
and `population_risk` is the risk of real finite-D sequences."""

from __future__ import annotations

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
from _util import (ACTIVATIONS, PRIORS, Z, correlated_weights, first_moment_z, make_model,
                   mean_se, prior_covariance, sampled_fields, second_moment_z, squared_errors,
                   teacher_for, with_activation)

from headflow.dynamics import (SIGNAL, FieldLaw, Overlaps, bayes_construction, population_risk,
                               weights_from_overlaps)
from headflow.dynamics.expectations import MonteCarlo, QuasiMonteCarlo
from headflow.dynamics.priors import Discrete

# -- (a) real sequences at finite D ------------------------------------------------------------


@pytest.fixture(scope="module", params=list(PRIORS))
def real_fields(request):
    """Fields `λ_ℓ = W x_ℓ/√D` (W = [K; V; K*; v*]) of real sequences, with the signal token
    recovered from the label (Δ = 0: `y = v*·x_ε/√D` exactly)."""
    H, L, D, n = 2, 3, 300, 24_576
    model = make_model(L=L, H=H, prior=PRIORS[request.param](), rho=1.4)
    teacher = teacher_for(model, D, seed=1)
    w = correlated_weights(jr.key(2), teacher, H)
    W = jnp.concatenate([w.K, w.V, teacher.kstar, teacher.vstar[None]])
    lam, y = sampled_fields(jr.key(3), teacher, model, W, n)
    ystar = lam[..., -1]                                                    # (n, L)
    eps = np.argmin(np.abs(ystar - y[:, None]), axis=1)
    return dict(model=model, teacher=teacher, w=w, W=np.asarray(W), lam=lam, y=y, eps=eps,
                omega=np.asarray(w.overlaps(teacher).gram(model.rho)), D=D, L=L)


def test_gram_matrix_definition(real_fields):
    f = real_fields
    W = f["W"]
    np.testing.assert_allclose(f["omega"], W @ W.T / f["D"], atol=1e-12)
    np.testing.assert_allclose(f["w"].gram_rows(f["teacher"]), (W @ W.T / f["D"])[:4],
                               atol=1e-12)


def test_labels_and_signal_location(real_fields):
    f = real_fields
    n, L = f["lam"].shape[:2]
    rows = np.arange(n)
    # the label is the teacher's value field at the signal token, exactly (Δ = 0) ...
    np.testing.assert_allclose(f["lam"][rows, f["eps"], -1], f["y"], rtol=1e-12, atol=1e-12)
    # ... and no other token's field matches it
    others = np.abs(f["lam"][..., -1] - f["y"][:, None])
    others[rows, f["eps"]] = np.inf
    assert others.min() > 1e-9
    # the location is uniform
    counts = np.bincount(f["eps"], minlength=L) / n
    assert np.all(np.abs(counts - 1 / L) < Z * np.sqrt((1 / L) * (1 - 1 / L) / n))


def test_nonsignal_fields_covariance_is_gram(real_fields):
    f = real_fields
    n, L, P = f["lam"].shape
    mask = np.ones((n, L), bool)
    mask[np.arange(n), f["eps"]] = False
    x = f["lam"][mask]                                                   # (n(L−1), P)
    assert np.all(np.abs(first_moment_z(x, np.zeros(P))) < Z)
    z = second_moment_z(x, np.zeros(P), f["omega"])
    assert np.all(np.abs(z) < Z), np.round(z, 1)
    # chi-square style aggregate over the independent entries (upper triangle)
    iu = np.triu_indices(P)
    chi2 = float(np.sum(z[iu] ** 2))
    dof = len(iu[0])
    assert chi2 < dof + 6 * np.sqrt(2 * dof), (chi2, dof)


def test_signal_field_mean_and_covariance(real_fields):
    f = real_fields
    n = f["lam"].shape[0]
    x = f["lam"][np.arange(n), f["eps"]]                                  # (n, P)
    prior = f["model"].prior
    H2, F = 4, prior.F
    om_k = f["omega"][:, H2:H2 + F]                                        # Ω_{·K*}
    mean = om_k @ np.asarray(prior.mean())
    cov = f["omega"] + om_k @ prior_covariance(prior) @ om_k.T
    zm = first_moment_z(x, mean)
    assert np.all(np.abs(zm) < Z), np.round(zm, 1)
    zc = second_moment_z(x, mean, cov)
    assert np.all(np.abs(zc) < Z), np.round(zc, 1)
    # the signal moves the second moments away from Ω by many standard errors: the test has
    # teeth (a sampler that forgot the signal would fail it)
    assert np.max(np.abs(second_moment_z(x, np.zeros_like(mean), f["omega"]))) > 20


def test_label_noise():
    """`y = v*·x_ε/√D + Δξ`: `E y² = ρ* + Δ²` and `E[y Σ_ℓ y*_ℓ] = ρ*` (only the signal token
    correlates with the label)."""
    model = make_model(L=3, H=1, noise=0.7, rho=1.3)
    teacher = teacher_for(model, 50)
    lam, y = sampled_fields(jr.key(0), teacher, model, teacher.vstar[None], 40_000)
    est, se = mean_se(y**2)
    assert abs(est - (model.rho + model.noise**2)) < Z * se
    est, se = mean_se(y * lam[..., 0].sum(-1))
    assert abs(est - model.rho) < Z * se


# -- (b) the FieldLaw chain --------------------------------------------------------------------

def _chain_fields(law: FieldLaw, theta, g_star, g_perp, g_nu):
    """All fields `[χ; z; χ*; y*]` (P, L) from the chain."""
    chi_star, chi = law.key_fields(theta, g_star, g_perp)
    z, ystar = law.value_fields(chi_star, g_perp, g_nu)
    return jnp.concatenate([chi, z, chi_star, ystar[None]])


@eqx.filter_jit
def _chain_linear_map(law: FieldLaw):
    """The (exactly linear) map from one non-signal token's normals to its fields."""
    H, F = law.m.shape
    L = 2
    other = 1 - SIGNAL

    def token(g):
        gs = jnp.zeros((F, L)).at[:, other].set(g[:F])
        gp = jnp.zeros((H, L)).at[:, other].set(g[F:F + H])
        gn = jnp.zeros((H + 1, L)).at[:, other].set(g[F + H:])
        return _chain_fields(law, jnp.zeros(F), gs, gp, gn)[:, other]

    return jax.jacfwd(token)(jnp.zeros(F + 2 * H + 1))


def _overlap_cases():
    """(name, overlaps, ρ*, prior) on and off the manifold, including rank-deficient q."""
    rho = 1.3
    cases = []
    prior2 = PRIORS["discrete_2d"]()
    m = make_model(H=2, prior=prior2, rho=rho)
    teacher = teacher_for(m, 60, seed=4)
    w = correlated_weights(jr.key(5), teacher, 2)
    ov = w.overlaps(teacher)
    cases.append(("off_manifold", ov, rho, prior2))
    cases.append(("on_manifold", ov.on_manifold(), rho, prior2))
    # duplicated head (q and r singular) with values correlated with the keys' noise part
    K = jnp.stack([w.K[0], w.K[0], w.K[1]])
    V = jnp.stack([w.V[0], 0.5 * w.K[0] + w.V[1], w.V[1]])
    from headflow.dynamics import Weights
    w3 = Weights(K=K, V=V, b=jnp.zeros(3))
    ov3 = w3.overlaps(teacher)
    assert float(jnp.linalg.eigvalsh(ov3.r)[0]) < 1e-10
    cases.append(("off_manifold_duplicate_head", ov3, rho, prior2))
    # the Bayes construction: r = 0 exactly, s = ρ* 11ᵀ rank one
    prior3 = Discrete([[1.5], [-1.0], [0.3]], [0.3, 0.5, 0.2])
    ovb, _ = bayes_construction(make_model(H=3, prior=prior3, rho=rho))
    np.testing.assert_array_equal(ovb.r, 0.0)
    cases.append(("bayes_construction", ovb, rho, prior3))
    return cases


# the cases are built on first use, not at import: collection (in every xdist worker) would
# otherwise compile their eager JAX operations
CASE_NAMES = ("off_manifold", "on_manifold", "off_manifold_duplicate_head", "bayes_construction")


@functools.cache
def overlap_cases():
    cases = _overlap_cases()
    assert tuple(c[0] for c in cases) == CASE_NAMES
    return cases


@pytest.mark.parametrize("case", range(len(CASE_NAMES)), ids=CASE_NAMES)
@pytest.mark.parametrize("manifold", [False, True])
def test_field_law_reproduces_gram_exactly(case, manifold):
    name, ov, rho, prior = overlap_cases()[case]
    H, F = ov.H, ov.F
    law = FieldLaw.from_overlaps(ov, rho, manifold=manifold)
    M = _chain_linear_map(law)
    target = ov.on_manifold().gram(rho) if manifold else ov.gram(rho)
    np.testing.assert_allclose(M @ M.T, target, atol=1e-10)
    # the signal token's mean is Ω_{·K*} θ
    theta = jnp.asarray(prior.points[0]) if hasattr(prior, "points") else jnp.ones(F)
    zeros = lambda *s: jnp.zeros(s)  # noqa: E731
    mean = _chain_fields(law, theta, zeros(F, 2), zeros(H, 2), zeros(H + 1, 2))[:, SIGNAL]
    np.testing.assert_allclose(mean, target[:, 2 * H:2 * H + F] @ theta, atol=1e-12)


@pytest.mark.parametrize("case", range(len(CASE_NAMES)), ids=CASE_NAMES)
def test_field_law_monte_carlo(case):
    """The same statement within error bars, from sampled normals (both tokens)."""
    name, ov, rho, prior = overlap_cases()[case]
    H, F = ov.H, ov.F
    law = FieldLaw.from_overlaps(ov, rho)
    n, L = 50_000, 2
    k = jr.split(jr.key(20 + case), 4)
    theta = prior.sample(k[0], (n,))
    gs = jr.normal(k[1], (n, F, L), dtype=jnp.float64)
    gp = jr.normal(k[2], (n, H, L), dtype=jnp.float64)
    gn = jr.normal(k[3], (n, H + 1, L), dtype=jnp.float64)
    lam = np.asarray(jax.jit(jax.vmap(lambda *a: _chain_fields(law, *a)))(theta, gs, gp, gn))
    omega = np.asarray(ov.gram(rho))
    other = lam[:, :, 1 - SIGNAL]
    P = omega.shape[0]
    assert np.all(np.abs(second_moment_z(other, np.zeros(P), omega)) < Z)
    sig = lam[:, :, SIGNAL]
    om_k = omega[:, 2 * H:2 * H + F]
    mean = om_k @ np.asarray(prior.mean())
    assert np.all(np.abs(first_moment_z(sig, mean)) < Z)
    cov = omega + om_k @ prior_covariance(prior) @ om_k.T
    assert np.all(np.abs(second_moment_z(sig, mean, cov)) < Z)


def test_overlaps_roundtrip_through_weights():
    """`weights_from_overlaps` realizes each case at finite D (the Gram matrix of the built
    weights is the given one), which is the premise of the tests above."""
    for name, ov, rho, _ in overlap_cases():
        from headflow.dynamics import make_teacher
        teacher = make_teacher(jr.key(0), 40, ov.F, rho, dtype=jnp.float64)
        w = weights_from_overlaps(jr.key(1), ov, teacher, rho, dtype=jnp.float64)
        np.testing.assert_allclose(w.overlaps(teacher).gram(rho), ov.gram(rho), atol=1e-10,
                                   err_msg=name)


# -- (c) population risk of real sequences -----------------------------------------------------

@pytest.mark.parametrize("prior", ["flipped_spike", "gaussian_2d"])
def test_population_risk_equals_finite_d_risk(prior):
    """All three activations on the same real sequences, off-manifold weights."""
    H, L, D = 2, 3, 200
    base = make_model(L=L, H=H, prior=PRIORS[prior](), noise=0.3, rho=1.2)
    models = [with_activation(base, a) for a in ACTIVATIONS]
    teacher = teacher_for(base, D, seed=6)
    w = correlated_weights(jr.key(7), teacher, H, scale=1.5)
    ov = w.overlaps(teacher)
    assert float(ov.cross_size()) > 0.1
    errs = squared_errors(models, teacher, w, jr.key(8), 20_480)
    backend = MonteCarlo(samples=1 << 15, seed=3)
    for model, e in zip(models, errs):
        est, se = mean_se(e)
        r, r_err = population_risk(model, ov, backend)
        assert abs(float(r) - est) < Z * np.hypot(se, float(r_err)), (
            model.activation.name, float(r), est, se, float(r_err))
        # ignoring the cross overlaps changes the answer by many error bars (the test has teeth)
        r_man, r_man_err = population_risk(model, ov, backend, manifold=True)
        assert abs(float(r_man) - est) > Z * np.hypot(se, float(r_man_err))


@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_population_risk_manifold_paths_agree(activation):
    """On the manifold the fast path (`manifold=True`) and the full law give the same risk with
    the same nodes (to round-off); QMC agrees with MC within error bars."""
    model = make_model(activation, L=3, H=2, prior=PRIORS["discrete_2d"](), noise=0.2, rho=1.1)
    teacher = teacher_for(model, 80, seed=9)
    ov = correlated_weights(jr.key(10), teacher, 2).overlaps(teacher).on_manifold()
    mc = MonteCarlo(samples=1 << 13, seed=0)
    a, _ = population_risk(model, ov, mc)
    b, b_err = population_risk(model, ov, mc, manifold=True)
    np.testing.assert_allclose(a, b, rtol=1e-10)
    c, c_err = population_risk(model, ov, QuasiMonteCarlo(samples=1 << 13, seed=1))
    assert abs(float(c) - float(b)) < Z * np.hypot(float(b_err), float(c_err))


# -- (d) the zero predictor --------------------------------------------------------------------

@pytest.mark.parametrize("activation,noise,rho", [("softmax", 0.0, 1.0), ("softmax1", 0.5, 1.0),
                                                  ("bayes_softmax", 0.3, 2.5)])
@pytest.mark.parametrize("prior", ["flipped_spike", "gaussian_2d"])
def test_zero_predictor_risk(activation, noise, rho, prior):
    """`ŷ ≡ 0` (n = 0, s = 0, values orthogonal to everything) gives `R = Δ² + ρ*` exactly."""
    model = make_model(activation, L=4, H=3, prior=PRIORS[prior](), noise=noise, rho=rho)
    rng = np.random.default_rng(0)
    F = model.F
    m = rng.standard_normal((3, F))
    q = m @ m.T + 0.5 * np.eye(3)
    ov = Overlaps.manifold(m=m, q=q, n=np.zeros(3), s=np.zeros((3, 3)), b=rng.standard_normal(3))
    for manifold in (True, False):
        r, err = population_risk(model, ov, MonteCarlo(samples=4096), manifold=manifold)
        np.testing.assert_allclose(r, noise**2 + rho, rtol=1e-12)
        assert float(err) < 1e-12
