"""A lean, independent JAX implementation of online SGD for the default experiment: the baseline
that the theory's cost is measured against (it imports nothing from headflow).

Model (`docs/model.md`): L tokens `x_ℓ ~ N(0, I_D)`, the signal token (uniform location) shifted
by `θ k*/√D` with θ = ±a (probability p for +), label `y = v*·x_ε/√D`; H Bayes-softmax heads,
`A = softmax over (h, ℓ) of (K x_ℓ/√D + b_h)`, `ŷ = Σ_{hℓ} A_{hℓ} V_h·x_ℓ/√D`, loss `½(ŷ − y)²`,
plain SGD on K and V with step `η/√D` on the fields and `η_b/D` on the biases. The gradients are
written in closed form; `tests/test_reference_sgd.py` checks them against headflow's autodiff of
the same loss.

One call runs `steps` steps for every seed (`vmap` over seeds, `fori_loop` over steps) and
returns the final weights, so what is timed is the simulation and nothing else.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import jax.random as jr


def gradients(K, V, b, X, y):
    """Closed-form gradients of `½(ŷ − y)²` for one sample `X (L, D)`: `∂ŷ/∂χ_{hℓ} =
    A_{hℓ}(z_{hℓ} − ŷ)`, `∂ŷ/∂z = A`, `∂ŷ/∂b_h = Σ_ℓ A_{hℓ}(z_{hℓ} − ŷ)`."""
    sqrt_d = jnp.sqrt(jnp.asarray(X.shape[-1], X.dtype))
    chi = K @ X.T / sqrt_d                                  # (H, L)
    z = V @ X.T / sqrt_d
    A = jax.nn.softmax((chi + b[:, None]).ravel()).reshape(chi.shape)
    yhat = jnp.sum(A * z)
    err = yhat - y
    g_chi = err * A * (z - yhat)
    g_z = err * A
    return g_chi, g_z, jnp.sum(g_chi, axis=1)


def make_run(dim: int, heads: int, tokens: int, *, amplitude: float = 3.0, p: float = 0.7,
             lr: float = 1.0, lr_bias: float = 1.0, init_std: float = 0.1,
             dtype=jnp.float32, teacher: bool = False):
    """`run(keys (S,), steps) → (K, V, b)` for S seeds, jitted with `steps` static; with
    `teacher`, `(K, V, b, k*, v*)` (the teacher's directions, `|k*|² = |v*|² = D`)."""
    sqrt_d = jnp.sqrt(jnp.asarray(dim, dtype))

    def one_seed(key, steps):
        kt, kw, kd = jr.split(key, 3)
        q, _ = jnp.linalg.qr(jr.normal(kt, (dim, 2), dtype))
        kstar, vstar = q[:, 0] * sqrt_d, q[:, 1] * sqrt_d
        kk, kv = jr.split(kw)
        K = init_std * jr.normal(kk, (heads, dim), dtype)
        V = init_std * jr.normal(kv, (heads, dim), dtype)
        b = jnp.zeros(heads, dtype)

        def step(i, w):
            K, V, b = w
            kx, ks, ke = jr.split(jr.fold_in(kd, i), 3)
            X = jr.normal(kx, (tokens, dim), dtype)
            theta = jnp.where(jr.uniform(ks) < p, amplitude, -amplitude).astype(dtype)
            eps = jr.randint(ke, (), 0, tokens)
            X = X.at[eps].add(theta * kstar / sqrt_d)
            y = X[eps] @ vstar / sqrt_d
            g_chi, g_z, g_b = gradients(K, V, b, X, y)
            return (K - lr / sqrt_d * g_chi @ X, V - lr / sqrt_d * g_z @ X,
                    b - lr_bias / dim * g_b)

        K, V, b = jax.lax.fori_loop(0, steps, step, (K, V, b))
        return (K, V, b, kstar, vstar) if teacher else (K, V, b)

    return jax.jit(jax.vmap(one_seed, in_axes=(0, None)), static_argnums=1)
