"""Gradient sensitivity of softmax attention (Lemma 2, Corollary 3; spec §5).

For `α = softmax(l/T)` the Jacobian is `J = (diag α − α αᵀ)/T`, symmetric positive semidefinite.
Its diagonal entries are at most `1/(4T)` and its spectral norm at most `1/(2T)` (reached by two
weights of 1/2). The spectral norm is computed exactly, without forming J: the eigenvalues of a
diagonal matrix minus a rank-one term solve the secular equation
`f(λ) = 1 − Σ_i α_i²/(α_i − λ) = 0`, and by interlacing the largest one lies in `[α_(2), α_(1)]`,
where f decreases; a fixed number of bisection steps finds it to working precision in
`O(iterations × tokens)` per row.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax
from jaxtyping import Array, Bool, Float

from ._normalizers import Softmax


def softmax_jacobian(alpha: Float[Array, "*#batch tokens"], temperature: float | Float[Array, ""]
                     ) -> Float[Array, "*#batch tokens tokens"]:
    """`J = (diag α − α αᵀ)/T` (Lemma 2 for softmax), as a dense matrix."""
    eye = jnp.eye(alpha.shape[-1], dtype=alpha.dtype)
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
    if iterations is None:
        iterations = 32 if alpha.dtype == jnp.float32 else 60
    top2 = lax.top_k(alpha, 2)[0] if alpha.shape[-1] > 1 else jnp.concatenate(
        [alpha, jnp.zeros_like(alpha)], axis=-1)
    hi, lo = top2[..., 0], top2[..., 1]
    a2 = alpha * alpha

    def f(lam):
        den = alpha - lam[..., None]
        den = jnp.where(den == 0, jnp.finfo(alpha.dtype).tiny, den)
        return 1 - jnp.sum(jnp.where(alpha > 0, a2 / den, 0), axis=-1)

    def step(_, bracket):
        lo, hi = bracket
        mid = 0.5 * (lo + hi)
        above = f(mid) > 0  # f decreases on (α_(2), α_(1)): the root lies above mid
        return jnp.where(above, mid, lo), jnp.where(above, hi, mid)

    lo, hi = lax.fori_loop(0, iterations, step, (lo, hi))
    return 0.5 * (lo + hi) / temperature


def softmax_jacobian_diag_max(alpha: Float[Array, "*#batch tokens"],
                              temperature: float | Float[Array, "*#batch"] = 1.0) -> Float[Array, "*#batch"]:
    """`max_i α_i(1 − α_i)/T`, the largest diagonal entry of J (at most `1/(4T)`)."""
    return jnp.max(alpha * (1 - alpha), axis=-1) / temperature


def fd_sensitivity(logits: Float[Array, "*#batch tokens"], direction: Float[Array, "*#batch tokens"],
                   temperature: float | Float[Array, "*#batch"], eps: float,
                   mask: Bool[Array, "*#batch tokens"] | None = None) -> Float[Array, "*#batch"]:
    """Finite-difference sensitivity `‖softmax((l + εu)/T) − softmax(l/T)‖ / ε` (Corollary 3).

    **Arguments:**

    - `logits`: raw logits l; `direction`: u (a unit vector over the visible tokens).
    - `temperature`: T; `eps`: ε; `mask`: visible tokens.

    **Returns:** `g(T, ε)` per row. As ε → 0 it tends to `‖J u‖ ≤ ‖J‖₂`; for any ε it is at
    most `√2/ε`.
    """
    t = jnp.asarray(temperature, logits.dtype)[..., None]
    base = Softmax(1.0)(logits / t, mask)
    moved = Softmax(1.0)((logits + eps * direction) / t, mask)
    return jnp.linalg.norm(moved - base, axis=-1) / eps


def random_unit_directions(key, shape: tuple[int, ...], mask: Bool[Array, "*#batch tokens"],
                           dtype=jnp.float32) -> Float[Array, "*#batch tokens"]:
    """Random unit vectors supported on the visible tokens (uniform on that sphere)."""
    u = jnp.where(mask, jax.random.normal(key, shape, dtype=dtype), 0)
    norm = jnp.linalg.norm(u, axis=-1, keepdims=True)
    return u / jnp.where(norm > 0, norm, 1)
