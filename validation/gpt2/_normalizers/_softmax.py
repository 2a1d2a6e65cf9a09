from __future__ import annotations

from typing import ClassVar

import jax.numpy as jnp
from jaxtyping import Array

from ._base import AbstractPositiveNormalizer, top_eigenvalue, visible_or_all


class Softmax(AbstractPositiveNormalizer):
    """`softmax(l / T)`: `F = exp(l/T)`, Jacobian `(diag α − α αᵀ)/T`."""

    name: ClassVar[str] = "softmax"
    jacobian_bound_names: ClassVar[tuple[str, str]] = ("jacobian_spectral_1_over_2T",
                                                       "jacobian_diag_1_over_4T")
    temperature: float | Array = 1.0

    def log_f(self, logits, n_visible):
        return logits / self.temperature

    def dlog_f(self, logits, n_visible):
        return jnp.full_like(logits, 1.0 / self.temperature)

    def jacobian_norm(self, logits, mask=None, *, iterations=None):
        """Exact: `λ_max(diag α − α αᵀ)/T` from the secular equation ([`top_eigenvalue`][])."""
        return top_eigenvalue(self(logits, visible_or_all(logits, mask)),
                              iterations=iterations) / self.temperature

    def jacobian_bounds(self, n_visible):
        """`(1/(2T), 1/(4T))`: two weights of 1/2 reach the first, one weight of 1/2 the second."""
        return 0.5 / self.temperature, 0.25 / self.temperature
