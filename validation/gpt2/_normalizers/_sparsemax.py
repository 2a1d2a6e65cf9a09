from __future__ import annotations

from typing import ClassVar

import jax.numpy as jnp

from ._base import AbstractNormalizer, _eye_like, visible_or_all


class Sparsemax(AbstractNormalizer):
    """Sparsemax: the Euclidean projection of the logits onto the probability simplex."""

    name: ClassVar[str] = "sparsemax"

    def __call__(self, logits, mask=None):
        mask = visible_or_all(logits, mask)
        low = jnp.finfo(logits.dtype).min / 4
        z = jnp.where(mask, logits, low)
        zs = -jnp.sort(-z, axis=-1)
        k = jnp.arange(1, z.shape[-1] + 1, dtype=logits.dtype).reshape((1,) * (z.ndim - 1) + (-1,))
        n = jnp.sum(mask, axis=-1, keepdims=True)
        csum = jnp.cumsum(jnp.where(k <= n, zs, 0.0), axis=-1)
        support = (1 + k * zs > csum) & (k <= n)
        k_star = jnp.sum(support, axis=-1, keepdims=True)
        tau = (jnp.take_along_axis(csum, k_star - 1, axis=-1) - 1) / k_star.astype(logits.dtype)
        return jnp.where(mask, jnp.maximum(z - tau, 0.0), 0.0)

    def _support(self, logits, mask):
        return (self(logits, mask) > 0).astype(logits.dtype)

    def jacobian(self, logits, mask=None):
        """`diag(σ) − σσᵀ/|S|` with σ the indicator of the support S (almost everywhere)."""
        sup = self._support(logits, mask)
        size = jnp.sum(sup, axis=-1)[..., None, None]
        return _eye_like(sup) * sup[..., None, :] - sup[..., :, None] * sup[..., None, :] / size

    def jacobian_diagonal(self, logits, mask=None):
        """`σ_i (1 − 1/|S|)`."""
        sup = self._support(logits, mask)
        return sup * (1 - 1 / jnp.sum(sup, axis=-1, keepdims=True))

    def jacobian_norm(self, logits, mask=None, *, iterations=None):
        """Exact: the Jacobian is the orthogonal projection onto the zero-sum vectors on S, of
        norm 1 when `|S| ≥ 2` and 0 otherwise."""
        size = jnp.sum(self._support(logits, visible_or_all(logits, mask)), axis=-1)
        return jnp.where(size >= 2, 1.0, 0.0).astype(logits.dtype)

    def jacobian_bounds(self, n_visible):
        """`(1, 1)`: a projection has norm at most 1, and `1 − 1/|S| < 1`."""
        return 1.0, 1.0
