from __future__ import annotations

import jax.numpy as jnp
from jaxtyping import Array

from ._base import AbstractPositiveNormalizer


class Softmax(AbstractPositiveNormalizer):
    """`softmax(l / T)`: `F = exp(l/T)`, Jacobian `(diag α − α αᵀ)/T`."""

    temperature: float | Array = 1.0

    def log_f(self, logits, n_visible):
        return logits / self.temperature

    def dlog_f(self, logits, n_visible):
        return jnp.full_like(logits, 1.0 / self.temperature)
