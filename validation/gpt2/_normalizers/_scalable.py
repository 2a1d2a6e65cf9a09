from __future__ import annotations

import jax.numpy as jnp
from jaxtyping import Array

from ._base import AbstractPositiveNormalizer


class ScalableSoftmax(AbstractPositiveNormalizer):
    """Scalable-softmax, `softmax(s · log(n) · l)` over the `n` visible tokens.

    Its F depends on the length n, so Lemma 1 (vanishing attention) does not apply to it.
    """

    s: float | Array = 1.0

    def log_f(self, logits, n_visible):
        return self.s * jnp.log(jnp.maximum(n_visible, 2)).astype(logits.dtype) * logits

    def dlog_f(self, logits, n_visible):
        return jnp.broadcast_to(self.s * jnp.log(jnp.maximum(n_visible, 2)).astype(logits.dtype),
                                logits.shape)
