"""Gradient sensitivity of attention normalizers (Lemma 2, Corollary 3; docs/gpt2.md,
"The bounds").

For `α = softmax(l/T)` the Jacobian is `J = (diag α − α αᵀ)/T`, symmetric positive semidefinite.
Its diagonal entries are at most `1/(4T)` and its spectral norm at most `1/(2T)` (reached by two
weights of 1/2). The spectral norm is computed exactly, without forming J, by
[`top_eigenvalue`][] (the secular equation). Other normalizers give their own Jacobian norms
(`AbstractNormalizer.jacobian_norm`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float

from ._linalg import lead
from ._normalizers import AbstractNormalizer, Softmax, top_eigenvalue


def softmax_jacobian(alpha: Float[Array, "*#batch tokens"], temperature: float | Float[Array, ""]
                     ) -> Float[Array, "*#batch tokens tokens"]:
    """`J = (diag α − α αᵀ)/T` (Lemma 2 for softmax), as a dense matrix."""
    eye = lead(jnp.eye(alpha.shape[-1], dtype=alpha.dtype), alpha.ndim + 1)
    return (eye * alpha[..., None, :] - alpha[..., :, None] * alpha[..., None, :]) / temperature


def softmax_jacobian_norm(alpha: Float[Array, "*#batch tokens"],
                          temperature: float | Float[Array, "*#batch"] = 1.0,
                          *, iterations: int | None = None) -> Float[Array, "*#batch"]:
    """Exact spectral norm of the softmax Jacobian, `λ_max(diag α − α αᵀ)/T`.

    **Arguments:**

    - `alpha`: softmax weights (masked tokens 0; each row sums to one).
    - `temperature`: T.
    - `iterations`: bisection steps (default 32 in float32, 60 in float64).

    **Returns:** `‖J‖₂` per row.
    """
    return top_eigenvalue(alpha, iterations=iterations) / temperature


def softmax_jacobian_diag_max(
    alpha: Float[Array, "*#batch tokens"], temperature: float | Float[Array, "*#batch"] = 1.0
) -> Float[Array, "*#batch"]:
    """`max_i α_i(1 − α_i)/T`, the largest diagonal entry of J (at most `1/(4T)`)."""
    return jnp.max(alpha * (1 - alpha), axis=-1) / temperature


def fd_sensitivity(
    logits: Float[Array, "*#batch tokens"],
    direction: Float[Array, "*#batch tokens"],
    temperature: float | Float[Array, "*#batch"],
    eps: float | Float[Array, ""],
    mask: Bool[Array, "*#batch tokens"] | None = None,
    *,
    normalizer: AbstractNormalizer | None = None,
) -> Float[Array, "*#batch"]:
    """Finite-difference sensitivity `‖N((l + εu)/T) − N(l/T)‖ / ε` (Corollary 3).

    **Arguments:**

    - `logits`: raw logits l; `direction`: u (a unit vector over the visible tokens).
    - `temperature`: T; `eps`: ε; `mask`: visible tokens.
    - `normalizer`: N (default `Softmax(1.0)`).

    **Returns:** `g(T, ε)` per row. As ε → 0 it tends to `‖J u‖ ≤ ‖J‖₂`; for a normalizer
    onto the probability simplex it is at most `√2/ε` for any ε.
    """
    normalizer = Softmax(1.0) if normalizer is None else normalizer
    t = jnp.asarray(temperature, logits.dtype)
    t = lead(t[..., None], logits.ndim) if t.ndim else t
    base = normalizer(logits / t, mask)
    moved = normalizer((logits + eps * direction) / t, mask)
    return jnp.linalg.norm(moved - base, axis=-1) / eps


def random_unit_directions(
    key, shape: tuple[int, ...], mask: Bool[Array, "*#batch tokens"], dtype=jnp.float32
) -> Float[Array, "*#batch tokens"]:
    """Random unit vectors supported on the visible tokens (uniform on that sphere)."""
    u = jnp.where(mask, jax.random.normal(key, shape, dtype=dtype), 0)
    norm = jnp.linalg.norm(u, axis=-1, keepdims=True)
    return u / jnp.where(norm > 0, norm, 1)
