from __future__ import annotations

import jax
import jax.numpy as jnp

from ._base import AbstractNormalizer, visible_or_all


class SelfAdjustingSoftmax(AbstractNormalizer):
    """Self-adjusting softmax, `l ⊙ softmax(l)`; with `minmax=True`, `l̂ ⊙ softmax(l)` where
    `l̂ = (l − min l)/(max l − min l)` over the visible tokens.

    The weights need not be positive or sum to one, so the Theorem 1/2 bounds (which assume a
    probability vector) are not applied to it; its Jacobian comes from autodiff.
    """

    minmax: bool = False

    def __call__(self, logits, mask=None):
        mask = visible_or_all(logits, mask)
        z = jnp.where(mask, logits, -jnp.inf)
        peak = jax.lax.stop_gradient(jnp.max(z, axis=-1, keepdims=True))
        e = jnp.where(mask, jnp.exp(z - peak), 0.0)
        soft = e / jnp.sum(e, axis=-1, keepdims=True)
        scale = jnp.where(mask, logits, 0.0)
        if self.minmax:
            lo = jnp.min(jnp.where(mask, logits, jnp.inf), axis=-1, keepdims=True)
            hi = jnp.max(jnp.where(mask, logits, -jnp.inf), axis=-1, keepdims=True)
            span = jnp.where(hi > lo, hi - lo, 1.0)
            scale = jnp.where(mask, (logits - lo) / span, 0.0)
        return scale * soft
