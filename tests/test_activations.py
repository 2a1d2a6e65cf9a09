"""Activations (`docs/model.md#the-student-attention-heads`, `docs/ode.md#derivation-of-the-odes`):
normalizations, invariances, stability at extreme logits, and
Jacobians against their closed forms."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from headflow.dynamics import ConfigError
from headflow.dynamics.activations import (AbstractActivation, BayesSoftmax, Softmax, Softmax1,
                                           activation_names, get_activation)

NAMES = ("softmax", "softmax1", "bayes_softmax")
SHAPES = [(1, 1), (1, 4), (2, 3), (3, 5), (4, 2)]


def _logits(seed, H, L, scale=2.0):
    rng = np.random.default_rng(seed)
    return (jnp.asarray(scale * rng.standard_normal((H, L))),
            jnp.asarray(scale * rng.standard_normal(H)))


# -- reference implementations (numpy, float64, naive but exact for moderate logits) ----------

def _ref(name, chi, b):
    chi, b = np.asarray(chi, np.float64), np.asarray(b, np.float64)
    if name == "softmax":
        e = np.exp(chi)
        return e / e.sum(-1, keepdims=True)
    e = np.exp(chi + b[:, None])
    if name == "softmax1":
        return e / (1.0 + e.sum(-1, keepdims=True))
    return e / e.sum()


def _jacobians_closed_form(name, A):
    """`∂A_{h'ℓ'}/∂χ_{hℓ}` and `∂A_{h'ℓ'}/∂b_h` (`docs/ode.md#derivation-of-the-odes`), indexed
    `[h', ℓ', h, ℓ]`, `[h', ℓ', h]`."""
    A = np.asarray(A)
    H, L = A.shape
    dH, dL = np.eye(H), np.eye(L)
    if name in ("softmax", "softmax1"):
        # δ_{hh'} A_{hℓ'} (δ_{ℓℓ'} − A_{hℓ}), the row sum being each head's own
        jchi = (np.einsum("ab,al,lk->albk", dH, A, dL)
                - np.einsum("ab,al,bk->albk", dH, A, A))
        if name == "softmax":
            jb = np.zeros((H, L, H))
        else:
            # ∂A_{h'ℓ'}/∂b_h = δ_{hh'} A_{hℓ'} (1 − Σ_ℓ A_{hℓ})
            jb = np.einsum("ab,al,b->alb", dH, A, 1.0 - A.sum(-1))
        return jchi, jb
    # Bayes-softmax: A_{h'ℓ'} (δ_{hh'} δ_{ℓℓ'} − A_{hℓ})
    jchi = np.einsum("al,ab,lk->albk", A, dH, dL) - np.einsum("al,bk->albk", A, A)
    jb = np.einsum("al,ab->alb", A, dH) - np.einsum("al,b->alb", A, A.sum(-1))
    return jchi, jb


# -- registry ----------------------------------------------------------------------------------

def test_registry():
    assert set(NAMES) <= set(activation_names())
    for name, cls in zip(NAMES, (Softmax, Softmax1, BayesSoftmax)):
        act = get_activation(name)
        assert isinstance(act, cls) and isinstance(act, AbstractActivation)
        assert act.name == name
    with pytest.raises(ConfigError, match="model.activation"):
        get_activation("sparsemax2")


# -- values and normalizations -----------------------------------------------------------------

@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("H,L", SHAPES)
@pytest.mark.parametrize("seed", range(2))
def test_values_match_reference(name, H, L, seed):
    chi, b = _logits(seed, H, L)
    A = get_activation(name)(chi, b)
    assert A.shape == (H, L) and A.dtype == jnp.float64
    np.testing.assert_allclose(A, _ref(name, chi, b), rtol=1e-13, atol=1e-15)
    assert np.all(np.asarray(A) > 0)


@pytest.mark.parametrize("H,L", SHAPES)
@pytest.mark.parametrize("seed", range(2))
def test_softmax_rows_sum_to_one(H, L, seed):
    chi, b = _logits(seed, H, L, scale=5.0)
    A = get_activation("softmax")(chi, b)
    np.testing.assert_allclose(A.sum(-1), 1.0, rtol=0, atol=1e-14)


@pytest.mark.parametrize("H,L", SHAPES)
@pytest.mark.parametrize("seed", range(2))
def test_softmax1_rows_sum_below_one(H, L, seed):
    chi, b = _logits(seed, H, L, scale=3.0)
    A = np.asarray(get_activation("softmax1")(chi, b))
    u = np.asarray(chi) + np.asarray(b)[:, None]
    expected = np.exp(u).sum(-1) / (1.0 + np.exp(u).sum(-1))
    np.testing.assert_allclose(A.sum(-1), expected, rtol=1e-13)
    assert np.all(A.sum(-1) < 1.0)


@pytest.mark.parametrize("H,L", SHAPES)
def test_softmax1_bias_limits(H, L):
    """b → +∞: softmax-1 → softmax (the "1" becomes negligible); b → −∞: → 0."""
    chi, _ = _logits(7, H, L)
    s1, sm = get_activation("softmax1"), get_activation("softmax")
    for big in (20.0, 40.0, 80.0):
        A = s1(chi, jnp.full(H, big))
        # 1 − Σ A = 1/(1 + Σ e^{χ+b}) ≤ e^{−b − max χ}
        bound = np.exp(-big - np.asarray(chi).max(-1))
        np.testing.assert_array_less(np.abs(A - sm(chi, jnp.zeros(H))).max(-1), 2 * bound + 1e-14)
    for small in (-20.0, -40.0, -80.0):
        A = np.asarray(s1(chi, jnp.full(H, small)))
        np.testing.assert_allclose(A, np.exp(np.asarray(chi) + small), rtol=1e-5)
        assert A.sum() <= (1 + 1e-12) * L * H * np.exp(small + np.asarray(chi).max())


@pytest.mark.parametrize("H,L", SHAPES)
@pytest.mark.parametrize("seed", range(2))
def test_bayes_softmax_sums_to_one_jointly(H, L, seed):
    chi, b = _logits(seed, H, L, scale=4.0)
    A = get_activation("bayes_softmax")(chi, b)
    np.testing.assert_allclose(A.sum(), 1.0, rtol=0, atol=1e-14)
    if H > 1:  # per-head rows do not sum to one
        assert np.abs(np.asarray(A.sum(-1)) - 1.0).max() > 1e-3


@pytest.mark.parametrize("L", [1, 2, 5])
@pytest.mark.parametrize("seed", range(2))
def test_bayes_softmax_one_head_is_softmax(L, seed):
    chi, b = _logits(seed, 1, L)
    np.testing.assert_allclose(get_activation("bayes_softmax")(chi, b),
                               get_activation("softmax")(chi, b), rtol=1e-14, atol=1e-16)


# -- invariances -------------------------------------------------------------------------------

@pytest.mark.parametrize("H,L", SHAPES)
@pytest.mark.parametrize("seed", range(2))
def test_softmax_invariances(H, L, seed):
    chi, b = _logits(seed, H, L)
    rng = np.random.default_rng(100 + seed)
    sm = get_activation("softmax")
    A = sm(chi, b)
    per_head = jnp.asarray(10.0 * rng.standard_normal(H))[:, None]
    np.testing.assert_allclose(sm(chi + per_head, b), A, rtol=1e-12)
    np.testing.assert_array_equal(sm(chi, b + jnp.asarray(rng.standard_normal(H)) * 50), A)


@pytest.mark.parametrize("H,L", SHAPES)
@pytest.mark.parametrize("seed", range(2))
def test_bayes_softmax_invariances(H, L, seed):
    chi, b = _logits(seed, H, L)
    bs = get_activation("bayes_softmax")
    A = bs(chi, b)
    for c in (-30.0, 1.7, 500.0):
        np.testing.assert_allclose(bs(chi + c, b), A, rtol=1e-12)
        np.testing.assert_allclose(bs(chi, b + c), A, rtol=1e-12)
    if H > 1:  # but not under per-head constants
        shift = jnp.arange(H, dtype=jnp.float64)[:, None]
        assert np.abs(np.asarray(bs(chi + shift, b) - A)).max() > 1e-3


@pytest.mark.parametrize("H,L", SHAPES)
@pytest.mark.parametrize("seed", range(2))
def test_softmax1_not_invariant(H, L, seed):
    chi, b = _logits(seed, H, L)
    s1 = get_activation("softmax1")
    A = np.asarray(s1(chi, b))
    for c in (-1.0, 0.5, 3.0):
        B = np.asarray(s1(chi + c, b))
        # a constant shift changes the row sums monotonically: the head switches on/off
        assert np.all(np.sign(B.sum(-1) - A.sum(-1)) == np.sign(c))
        np.testing.assert_allclose(np.asarray(s1(chi, b + c)), B, rtol=1e-12)


# -- extreme logits ----------------------------------------------------------------------------

EXTREME = [
    # (logits, bias)
    ([[1e4, 0.0, -1e4]], [0.0]),
    ([[-1e4, -1e4, -1e4]], [0.0]),
    ([[1e4, 1e4 + 1.0, 1e4 - 2.0]], [0.0]),
    ([[-1e4, -1e4 + 1.0, -1e4 - 2.0]], [0.0]),
    ([[1e4, 0.0], [-1e4, 0.0]], [0.0, 0.0]),
    ([[0.0, 1.0], [0.5, -0.5]], [1e4, -1e4]),
    ([[1e4, -1e4], [-1e4, 1e4 - 1.0]], [-1e4, 1e4]),
]


def _stable_ref(name, chi, b):
    """Reference values at extreme logits: the same max shifts, written out in numpy."""
    chi, b = np.asarray(chi, np.float64), np.asarray(b, np.float64)
    if name == "softmax":
        u = chi - chi.max(-1, keepdims=True)
        e = np.exp(u)
        return e / e.sum(-1, keepdims=True)
    u = chi + b[:, None]
    if name == "softmax1":
        top = np.maximum(u.max(-1, keepdims=True), 0.0)
        e = np.exp(u - top)
        return e / (np.exp(-top) + e.sum(-1, keepdims=True))
    e = np.exp(u - u.max())
    return e / e.sum()


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("case", range(len(EXTREME)))
def test_extreme_logits_values(name, case):
    chi, b = (jnp.asarray(x, jnp.float64) for x in EXTREME[case])
    A = np.asarray(get_activation(name)(chi, b))
    assert np.all(np.isfinite(A))
    np.testing.assert_allclose(A, _stable_ref(name, chi, b), rtol=1e-12, atol=1e-300)


def test_extreme_logits_known_values():
    sm, s1, bs = (get_activation(n) for n in NAMES)
    chi = jnp.array([[1e4, 1e4 + 1.0, 1e4 - 2.0]])
    e = np.exp([0.0, 1.0, -2.0])
    np.testing.assert_allclose(sm(chi, jnp.zeros(1))[0], e / e.sum(), rtol=1e-12)
    np.testing.assert_allclose(s1(chi, jnp.zeros(1))[0], e / e.sum(), rtol=1e-12)
    np.testing.assert_allclose(bs(chi, jnp.zeros(1))[0], e / e.sum(), rtol=1e-12)
    low = jnp.full((1, 3), -1e4)
    np.testing.assert_allclose(sm(low, jnp.zeros(1)), 1.0 / 3.0, rtol=1e-14)
    assert float(jnp.max(s1(low, jnp.zeros(1)))) == 0.0       # e^{-1e4} underflows to 0
    np.testing.assert_allclose(s1(low, jnp.array([1e4 - 1.0])),
                               np.exp(-1.0) / (1 + 3 * np.exp(-1.0)), rtol=1e-12)
    two = jnp.array([[1e4, 0.0], [-1e4, 0.0]])
    np.testing.assert_allclose(bs(two, jnp.zeros(2)), [[1.0, 0.0], [0.0, 0.0]], atol=1e-300)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("case", range(len(EXTREME)))
def test_extreme_logits_gradients_finite(name, case):
    chi, b = (jnp.asarray(x, jnp.float64) for x in EXTREME[case])
    w = jnp.linspace(-1.0, 2.0, chi.size).reshape(chi.shape)
    act = get_activation(name)
    gchi, gb = jax.jit(jax.grad(lambda c, bb: jnp.sum(w * act(c, bb)), argnums=(0, 1)))(chi, b)
    assert np.all(np.isfinite(gchi)) and np.all(np.isfinite(gb))
    jchi, jb = jax.jit(jax.jacobian(act, argnums=(0, 1)))(chi, b)
    assert np.all(np.isfinite(jchi)) and np.all(np.isfinite(jb))
    cf_chi, cf_b = _jacobians_closed_form(name, _stable_ref(name, chi, b))
    np.testing.assert_allclose(jchi, cf_chi, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(jb, cf_b, rtol=1e-10, atol=1e-14)


# -- Jacobians ---------------------------------------------------------------------------------

@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("H,L", SHAPES)
@pytest.mark.parametrize("seed", range(2))
def test_jacobian_closed_form(name, H, L, seed):
    chi, b = _logits(seed, H, L)
    act = get_activation(name)
    jchi, jb = jax.jit(jax.jacrev(act, argnums=(0, 1)))(chi, b)
    cf_chi, cf_b = _jacobians_closed_form(name, act(chi, b))
    np.testing.assert_allclose(jchi, cf_chi, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(jb, cf_b, rtol=1e-12, atol=1e-15)
    # and forward mode agrees with reverse mode
    fchi, fb = jax.jit(jax.jacfwd(act, argnums=(0, 1)))(chi, b)
    np.testing.assert_allclose(fchi, jchi, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(fb, jb, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("name", NAMES)
def test_jit_vmap_float32(name):
    """Works under jit and vmap, and keeps float32 inputs in float32."""
    act = get_activation(name)
    chi = jnp.asarray(np.random.default_rng(0).standard_normal((5, 3, 4)), jnp.float32)
    b = jnp.zeros((5, 3), jnp.float32)
    A = jax.jit(jax.vmap(act))(chi, b)
    assert A.dtype == jnp.float32 and A.shape == (5, 3, 4)
    np.testing.assert_allclose(A, np.stack([_ref(name, c, bb) for c, bb in zip(chi, b)]),
                               rtol=2e-6, atol=1e-7)


def test_shapes_are_checked_at_runtime():
    """conftest installs jaxtyping's import hook: a bias of the wrong shape is a type error,
    not a silent broadcast."""
    import os

    import jaxtyping

    if os.environ.get("HEADFLOW_TYPECHECK", "1") == "0":
        pytest.skip("runtime shape checks switched off (HEADFLOW_TYPECHECK=0)")
    with pytest.raises(jaxtyping.TypeCheckError):
        get_activation("softmax1")(jnp.zeros((2, 3)), jnp.zeros(3))
