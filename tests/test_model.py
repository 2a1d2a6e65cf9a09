"""The predictor and loss (`docs/model.md#the-student-attention-heads`,
`docs/model.md#training-online-sgd`): autodiff against finite differences, the SGD update
against the gradient of the loss in the weights, and the conditional error against Monte Carlo
over the value fields."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
from _util import ACTIVATIONS, PRIORS, Z, correlated_weights, make_model, mean_se, teacher_for

from headflow import sims
from headflow.dynamics import StepSizes
from headflow.dynamics import SIGNAL, FieldLaw, Overlaps, ValueMoments, Weights, sample_data


def _central_fd(f, x, eps):
    """Central finite differences of a scalar function of a flat vector, all directions at
    once (jitted, vmapped)."""
    E = eps * jnp.eye(x.size, dtype=x.dtype)
    fv = jax.jit(jax.vmap(f))
    return (fv(x[None, :] + E) - fv(x[None, :] - E)) / (2 * eps)


def _random_state(seed, H, L, scale=1.5):
    rng = np.random.default_rng(seed)
    chi = jnp.asarray(scale * rng.standard_normal((H, L)))
    z = jnp.asarray(rng.standard_normal((H, L)))
    b = jnp.asarray(rng.standard_normal(H))
    y = jnp.asarray(rng.standard_normal())
    return chi, z, b, y


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("H,L", [(1, 1), (1, 4), (2, 3), (3, 5)])
@pytest.mark.parametrize("seed", range(2))
def test_loss_gradient_finite_differences(activation, H, L, seed):
    model = make_model(activation, L=L, H=H)
    chi, z, b, y = _random_state(seed, H, L)
    flat = jnp.concatenate([chi.ravel(), z.ravel(), b])

    def f(p):
        return model.loss(p[:H * L].reshape(H, L), p[H * L:2 * H * L].reshape(H, L),
                          p[2 * H * L:], y)

    g = jax.grad(model.loss, argnums=(0, 1, 2))(chi, z, b, y)
    auto = jnp.concatenate([g[0].ravel(), g[1].ravel(), g[2]])
    fd = _central_fd(f, flat, 1e-5)
    np.testing.assert_allclose(auto, fd, rtol=1e-7, atol=1e-9)
    # ∂ℓ/∂z = (ŷ − y) A exactly
    e = model.predict(chi, z, b) - y
    np.testing.assert_allclose(g[1], e * model.attention(chi, b), rtol=1e-13, atol=1e-15)
    if activation == "softmax":
        np.testing.assert_array_equal(g[2], 0.0)


@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_predict_and_loss_definitions(activation):
    model = make_model(activation, L=4, H=3)
    chi, z, b, y = _random_state(5, 3, 4)
    A = model.attention(chi, b)
    yhat = float(jnp.sum(A * z))
    np.testing.assert_allclose(model.predict(chi, z, b), yhat, rtol=1e-14)
    np.testing.assert_allclose(model.loss(chi, z, b, y), 0.5 * (yhat - float(y)) ** 2, rtol=1e-13)


def test_target_is_the_label_of_the_data():
    """`Model.target` on the teacher's fields of a sequence, tokens rolled so that the planted
    token is `SIGNAL`, is the label `sample_data` draws (noiseless): `y = v*·x_ε/√D`."""
    model = make_model("softmax", L=4, H=2)
    D = 64
    teacher = teacher_for(model, D, seed=3)
    X, y = sample_data(jr.key(7), teacher, model, 16)
    lam = jnp.einsum("fd,bld->bfl", teacher.rows(), X) / np.sqrt(D)        # (B, F+1, L)
    eps = jr.randint(jr.split(jr.key(7), 4)[2], (16,), 0, model.L)     # sample_data's tokens
    rolled = jax.vmap(lambda la, e: jnp.roll(la, SIGNAL - e, axis=-1))(lam, eps)
    got = jax.vmap(lambda la: model.target({}, la))(rolled)
    np.testing.assert_allclose(got, y, rtol=0, atol=1e-12)
    assert len(set(np.asarray(eps).tolist())) > 1          # the planted token varies


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("batch", [1, 3])
def test_weight_gradients_through_fields(activation, batch):
    """`headflow.sims.attention.field_gradients` (local-field chain rule) against finite
    differences of the batch-mean loss as a function of the weights K, V, b themselves."""
    H, L, D = 2, 3, 7
    model = make_model(activation, L=L, H=H, noise=0.3)
    teacher = teacher_for(model, D)
    w = correlated_weights(jr.key(1), teacher, H, scale=1.5)
    X, y = sample_data(jr.key(2), teacher, model, batch)
    sqrt_d = np.sqrt(D)

    def loss(p):
        K, V, b = p[:H * D].reshape(H, D), p[H * D:2 * H * D].reshape(H, D), p[2 * H * D:]
        chi = jnp.einsum("hd,bld->bhl", K, X) / sqrt_d
        z = jnp.einsum("hd,bld->bhl", V, X) / sqrt_d
        return jnp.mean(jax.vmap(model.loss, in_axes=(0, 0, None, 0))(chi, z, b, y))

    flat = jnp.concatenate([w.K.ravel(), w.V.ravel(), w.b])
    fd = np.asarray(_central_fd(loss, flat, 1e-5))
    g_chi, g_z, g_b = sims.attention.field_gradients(model, w, X, y)
    assert g_chi.shape == g_z.shape == (batch, H, L) and g_b.shape == (H,)
    gK = np.einsum("bhl,bld->hd", g_chi, X) / sqrt_d
    gV = np.einsum("bhl,bld->hd", g_z, X) / sqrt_d
    np.testing.assert_allclose(gK.ravel(), fd[:H * D], rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(gV.ravel(), fd[H * D:2 * H * D], rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(g_b, fd[2 * H * D:], rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("train_values", [True, False])
def test_sgd_step_is_gradient_step(activation, train_values):
    """`k ← (1 − ηλ/D) k − η ∂ℓ/∂k`, `v` likewise (unless frozen), `b ← b − (η_b/D) ∂ℓ/∂b`
    (`docs/model.md#training-online-sgd`), with the gradients by finite differences of the
    batch-mean loss."""
    H, L, D, B = 2, 3, 6, 2
    model = make_model(activation, L=L, H=H, noise=0.2, train_values=train_values)
    teacher = teacher_for(model, D)
    w = correlated_weights(jr.key(3), teacher, H)
    hp = StepSizes(lr=0.3, lr_bias=0.7, weight_decay=0.1, batch=B)
    key = jr.key(9)
    X, y = sample_data(key, teacher, model, B)

    def loss(p):
        K, V, b = p[:H * D].reshape(H, D), p[H * D:2 * H * D].reshape(H, D), p[2 * H * D:]
        chi = jnp.einsum("hd,bld->bhl", K, X) / np.sqrt(D)
        z = jnp.einsum("hd,bld->bhl", V, X) / np.sqrt(D)
        return jnp.mean(jax.vmap(model.loss, in_axes=(0, 0, None, 0))(chi, z, b, y))

    fd = np.asarray(_central_fd(loss, jnp.concatenate([w.K.ravel(), w.V.ravel(), w.b]), 1e-5))
    new = sims.attention.sgd_step(model, hp, teacher, w, key)
    decay = 1 - 0.3 * 0.1 / D
    np.testing.assert_allclose(new.K, decay * w.K - 0.3 * fd[:H * D].reshape(H, D),
                               rtol=1e-7, atol=1e-9)
    if train_values:
        np.testing.assert_allclose(new.V, decay * w.V - 0.3 * fd[H * D:2 * H * D].reshape(H, D),
                                   rtol=1e-7, atol=1e-9)
    else:
        np.testing.assert_array_equal(new.V, w.V)
    np.testing.assert_allclose(new.b, w.b - 0.7 / D * fd[2 * H * D:], rtol=1e-7, atol=1e-10)
    assert new.K.dtype == w.K.dtype == jnp.float64


# -- conditional error -------------------------------------------------------------------------

def _mc_conditional_error(model, chi, b, mean_z, mean_y, cov, key, n=200_000):
    """Draw `(z_ℓ, y*_ℓ)` per token from `N((mean_z[:, ℓ], mean_y δ_{ℓ,signal}), cov)`,
    independent across tokens, `y = y*_signal + Δξ`, and average `(ŷ − y)²`."""
    H, L = chi.shape
    kg, kn = jr.split(key)
    g = jr.normal(kg, (n, L, H + 1), dtype=jnp.float64)
    chol = jnp.linalg.cholesky(cov + 1e-300 * jnp.eye(H + 1))
    vals = jnp.einsum("ij,nlj->nli", chol, g)
    z = vals[..., :H] + mean_z.T[None]
    ystar = vals[:, SIGNAL, H] + mean_y
    y = ystar + model.noise * jr.normal(kn, (n,), dtype=jnp.float64)
    A = model.attention(chi, b)
    err = (jnp.einsum("hl,nlh->n", A, z) - y) ** 2
    return mean_se(np.asarray(err))


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("on_manifold", [True, False])
@pytest.mark.parametrize("noise", [0.0, 0.4])
def test_conditional_error_monte_carlo(activation, on_manifold, noise):
    H, L = 3, 4
    model = make_model(activation, L=L, H=H, noise=noise, rho=1.3)
    rng = np.random.default_rng(17)
    chi, _, b, _ = _random_state(4, H, L)
    M = rng.standard_normal((H + 1, H + 1))
    cov = M @ M.T / (H + 1)
    if on_manifold:  # mz = 0, my = 0: szz = s, szy = n, syy = ρ*
        cov *= model.rho / cov[H, H]
        mz, my = np.zeros((H, L)), 0.0
    else:
        mz, my = rng.standard_normal((H, L)), float(rng.standard_normal())
    vm = ValueMoments(mz=jnp.asarray(mz), my=jnp.asarray(my), szz=jnp.asarray(cov[:H, :H]),
                      szy=jnp.asarray(cov[:H, H]), syy=jnp.asarray(cov[H, H]))
    exact = float(model.conditional_error(chi, b, vm))
    est, se = _mc_conditional_error(model, chi, b, jnp.asarray(mz), my, jnp.asarray(cov),
                                    jr.key(5))
    assert abs(est - exact) < Z * se, (est, exact, se)


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("prior", ["flipped_spike", "gaussian_2d"])
def test_conditional_error_through_field_law(activation, prior):
    """Off the manifold: fix the key fields, draw the value fields from `FieldLaw.value_fields`
    and compare the average `(ŷ − y)²` with `conditional_error(value_moments(...))`."""
    H, L, D = 2, 3, 40
    model = make_model(activation, L=L, H=H, prior=PRIORS[prior](), noise=0.3, rho=1.2)
    teacher = teacher_for(model, D)
    w = correlated_weights(jr.key(7), teacher, H)
    ov = w.overlaps(teacher)
    assert float(ov.cross_size()) > 0.1  # genuinely off the manifold
    law = FieldLaw.from_overlaps(ov, model.rho)
    k = jr.split(jr.key(8), 4)
    theta = model.prior.sample(k[0])
    g_star = jr.normal(k[1], (model.F, L), dtype=jnp.float64)
    g_perp = jr.normal(k[2], (H, L), dtype=jnp.float64)
    chi_star, chi = law.key_fields(theta, g_star, g_perp)
    exact = float(model.conditional_error(chi, ov.b, law.value_moments(chi_star, g_perp)))
    n = 100_000
    g_nu = jr.normal(k[3], (n, H + 1, L), dtype=jnp.float64)
    z, ystar = jax.vmap(lambda g: law.value_fields(chi_star, g_perp, g))(g_nu)
    y = ystar[:, SIGNAL] + model.noise * jr.normal(jr.key(10), (n,), dtype=jnp.float64)
    A = model.attention(chi, ov.b)
    est, se = mean_se(np.asarray((jnp.einsum("hl,nhl->n", A, z) - y) ** 2))
    assert abs(est - exact) < Z * se, (est, exact, se)


def test_overlaps_of_weights_are_gram_blocks():
    """`Weights.overlaps` against the definitions of `docs/model.md#order-parameters`, computed
    directly."""
    H, D = 3, 50
    model = make_model(H=H, prior=PRIORS["discrete_2d"](), rho=1.7)
    teacher = teacher_for(model, D)
    w = correlated_weights(jr.key(0), teacher, H)
    K, V = np.asarray(w.K), np.asarray(w.V)
    Ks, vs = np.asarray(teacher.kstar), np.asarray(teacher.vstar)
    ov = w.overlaps(teacher)
    for name, val in dict(m=K @ Ks.T / D, q=K @ K.T / D, n=V @ vs / D, s=V @ V.T / D,
                          kv=K @ V.T / D, kvs=K @ vs / D, vks=V @ Ks.T / D).items():
        np.testing.assert_allclose(getattr(ov, name), val, rtol=1e-12, atol=1e-13, err_msg=name)
    np.testing.assert_allclose(ov.r, K @ K.T / D - (K @ Ks.T / D) @ (K @ Ks.T / D).T, atol=1e-12)
    # the teacher block: orthonormal k*, |v*|² = ρ* D, v* ⟂ k*
    np.testing.assert_allclose(Ks @ Ks.T / D, np.eye(model.F), atol=1e-12)
    np.testing.assert_allclose(vs @ vs / D, model.rho, rtol=1e-12)
    np.testing.assert_allclose(Ks @ vs / D, 0.0, atol=1e-12)
    Wall = np.concatenate([K, V, Ks, vs[None]])
    np.testing.assert_allclose(ov.gram(model.rho), Wall @ Wall.T / D, atol=1e-12)
    assert isinstance(Overlaps.manifold(ov.m, ov.q, ov.n, ov.s, ov.b), Overlaps)
    assert float(ov.on_manifold().cross_size()) == 0.0
    assert isinstance(w, Weights)
