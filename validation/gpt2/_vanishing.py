"""Vanishing attention (Lemma 1, Corollary 1; docs/gpt2.md, "The bounds") and attention entropy."""

from __future__ import annotations

import jax.numpy as jnp
from jaxtyping import Array, Float, Int

from ._linalg import lead
from ._selection import visible_mask


def attention_entropy(alpha: Float[Array, "*#batch tokens"]) -> Float[Array, "*#batch"]:
    """`−Σ α log α` (with `0 log 0 = 0`); at most `log L` for L visible tokens."""
    safe = jnp.where(alpha > 0, alpha, 1)
    return -jnp.sum(jnp.where(alpha > 0, alpha * jnp.log(safe), 0), axis=-1)


def softmax_weight_bounds(
    q: Float[Array, "*#batch rows dim"],
    k: Float[Array, "*#batch tokens dim"],
    context: Int[Array, "*#batch rows"],
    temperature: float | Float[Array, ""],
) -> tuple[Float[Array, "*#batch rows"], Float[Array, "*#batch rows"]]:
    """Corollary 1: `(1/L) e^{−2Δ/T} ≤ α_j ≤ (1/L) e^{2Δ/T}` with `Δ = ‖q‖ max_j ‖k_j‖`.

    For `α = softmax(q·k/T)` over `L = L_t` visible keys; GPT-2 has `T = √d_head` on raw `q·k`.

    **Returns:** `(lower, upper)` per row.
    """
    ndim = max(q.ndim, k.ndim, jnp.ndim(context) + 1)
    q, k, context = lead(q, ndim), lead(k, ndim), lead(context, ndim - 1)
    visible = visible_mask(context, k.shape[-2])
    knorm = jnp.linalg.norm(k, axis=-1)[..., None, :]
    delta = jnp.linalg.norm(q, axis=-1) * jnp.max(jnp.where(visible, knorm, 0), axis=-1)
    lt = context.astype(q.dtype)
    return jnp.exp(-2 * delta / temperature) / lt, jnp.exp(2 * delta / temperature) / lt


def weight_bound_violations(
    alpha: Float[Array, "*#batch rows tokens"],
    q: Float[Array, "*#batch rows dim"],
    k: Float[Array, "*#batch tokens dim"],
    context: Int[Array, "*#batch rows"],
    temperature: float | Float[Array, ""],
    *,
    rtol: float = 1e-4,
) -> Int[Array, "*#batch rows"]:
    """Number of visible weights per row outside Corollary 1's interval (relative slack `rtol`)."""
    lower, upper = softmax_weight_bounds(q, k, context, temperature)
    ndim = max(alpha.ndim, lower.ndim + 1)
    alpha, lower, upper = lead(alpha, ndim), lead(lower, ndim - 1), lead(upper, ndim - 1)
    visible = visible_mask(lead(context, ndim - 1), alpha.shape[-1])
    bad = (alpha < lower[..., None] * (1 - rtol)) | (alpha > upper[..., None] * (1 + rtol))
    return jnp.sum(visible & bad, axis=-1)
