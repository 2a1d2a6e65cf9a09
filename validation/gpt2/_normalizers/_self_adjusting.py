from __future__ import annotations

from typing import ClassVar

import jax
import jax.numpy as jnp

from ._base import AbstractNormalizer, visible_or_all


class SelfAdjustingSoftmax(AbstractNormalizer):
    """Self-adjusting softmax (SA-softmax), `l ⊙ softmax(l)`; with `minmax=True`,
    `l̂ ⊙ softmax(l)` where `l̂ = (l − min l)/(max l − min l)` over the visible tokens.

    The weights do not sum to one, and without `minmax` they take the sign of the logits:
    Theorem 1's and Theorem 2's proofs need non-negative weights, so their bounds are applied to
    the min–max variant only. The spectral norm of the Jacobian comes from power iteration.
    """

    name: ClassVar[str] = "sa-softmax"
    normalized: ClassVar[bool] = False
    nonnegative: ClassVar[bool] = False
    minmax: bool = False

    def __call__(self, logits, mask=None):
        mask = visible_or_all(logits, mask)
        soft = self._softmax(logits, mask)
        scale = jnp.where(mask, logits, 0.0)
        if self.minmax:
            lo = jnp.min(jnp.where(mask, logits, jnp.inf), axis=-1, keepdims=True)
            hi = jnp.max(jnp.where(mask, logits, -jnp.inf), axis=-1, keepdims=True)
            span = jnp.where(hi > lo, hi - lo, 1.0)
            scale = jnp.where(mask, (logits - lo) / span, 0.0)
        return scale * soft

    @staticmethod
    def _softmax(logits, mask):
        z = jnp.where(mask, logits, -jnp.inf)
        peak = jax.lax.stop_gradient(jnp.max(z, axis=-1, keepdims=True))
        e = jnp.where(mask, jnp.exp(z - peak), 0.0)
        return e / jnp.sum(e, axis=-1, keepdims=True)

    def jacobian_diagonal(self, logits, mask=None):
        """`p_i + l_i p_i (1 − p_i)` with `p = softmax(l)` (dense autodiff for `minmax`)."""
        if self.minmax:
            return super().jacobian_diagonal(logits, mask)
        mask = visible_or_all(logits, mask)
        p = self._softmax(logits, mask)
        return jnp.where(mask, p + logits * p * (1 - p), 0.0)


class MinMaxSelfAdjustingSoftmax(SelfAdjustingSoftmax):
    """SA-softmax with min–max normalized logits (non-negative weights, see the base class)."""

    name: ClassVar[str] = "sa-softmax-minmax"
    nonnegative: ClassVar[bool] = True
    minmax: bool = True
