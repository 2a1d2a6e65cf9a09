from __future__ import annotations

from typing import ClassVar

import jax.numpy as jnp
from jaxtyping import Array

from ._base import AbstractPositiveNormalizer, top_eigenvalue, visible_or_all


class ScalableSoftmax(AbstractPositiveNormalizer):
    """Scalable-softmax (SSMax), `softmax(s · log(n) · l)` over the `n` visible tokens.

    Its F depends on the length n, so Lemma 1 (vanishing attention) does not apply to it. With
    `s = 1/log(n₀)` it equals `softmax(l)` on contexts of `n₀` tokens and sharpens with length.
    """

    name: ClassVar[str] = "ssmax"
    s: float | Array = 1.0

    def _scale(self, n_visible, dtype):
        return self.s * jnp.log(jnp.maximum(n_visible, 2)).astype(dtype)

    def log_f(self, logits, n_visible):
        return self._scale(n_visible, logits.dtype) * logits

    def dlog_f(self, logits, n_visible):
        return jnp.broadcast_to(self._scale(n_visible, logits.dtype), logits.shape)

    def jacobian_norm(self, logits, mask=None, *, iterations=None):
        """Exact: `s log(n) λ_max(diag α − α αᵀ)` (φ is constant over a row)."""
        mask = visible_or_all(logits, mask)
        n = jnp.sum(mask, axis=-1)
        return self._scale(n, logits.dtype) * top_eigenvalue(self(logits, mask),
                                                              iterations=iterations)

    def jacobian_bounds(self, n_visible):
        """`(s log(n)/2, s log(n)/4)`, the softmax bounds at temperature `1/(s log n)`."""
        scale = self.s * jnp.log(jnp.maximum(jnp.asarray(n_visible), 2))
        return 0.5 * scale, 0.25 * scale
