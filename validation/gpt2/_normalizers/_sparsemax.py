from __future__ import annotations

import jax.numpy as jnp

from ._base import AbstractNormalizer, visible_or_all


class Sparsemax(AbstractNormalizer):
    """Sparsemax: the Euclidean projection of the logits onto the probability simplex."""

    def __call__(self, logits, mask=None):
        mask = visible_or_all(logits, mask)
        low = jnp.finfo(logits.dtype).min / 4
        z = jnp.where(mask, logits, low)
        zs = -jnp.sort(-z, axis=-1)
        k = jnp.arange(1, z.shape[-1] + 1, dtype=logits.dtype)
        n = jnp.sum(mask, axis=-1, keepdims=True)
        csum = jnp.cumsum(jnp.where(k <= n, zs, 0.0), axis=-1)
        support = (1 + k * zs > csum) & (k <= n)
        k_star = jnp.sum(support, axis=-1, keepdims=True)
        tau = (jnp.take_along_axis(csum, k_star - 1, axis=-1) - 1) / k_star.astype(logits.dtype)
        return jnp.where(mask, jnp.maximum(z - tau, 0.0), 0.0)

    def jacobian(self, logits, mask=None):
        """`diag(σ) − σσᵀ/|S|` with σ the indicator of the support S (almost everywhere)."""
        sup = (self(logits, mask) > 0).astype(logits.dtype)
        eye = jnp.eye(logits.shape[-1], dtype=logits.dtype)
        size = jnp.sum(sup, axis=-1)[..., None, None]
        return eye * sup[..., None, :] - sup[..., :, None] * sup[..., None, :] / size
