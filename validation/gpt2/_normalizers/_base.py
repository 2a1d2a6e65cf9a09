from __future__ import annotations

import abc

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float


def visible_or_all(logits, mask):
    return jnp.ones(logits.shape, bool) if mask is None else jnp.broadcast_to(mask, logits.shape)


class AbstractNormalizer(eqx.Module):
    """Maps logits `l` (over the last axis) to attention weights; masked tokens get weight 0."""

    @abc.abstractmethod
    def __call__(self, logits: Float[Array, "*#batch tokens"],
                 mask: Bool[Array, "*#batch tokens"] | None = None) -> Float[Array, "*#batch tokens"]:
        """**Arguments:** `logits`; `mask` (True = visible, default all).

        **Returns:** the weights, zero where `mask` is False.
        """

    def jacobian(self, logits: Float[Array, "*#batch tokens"],
                 mask: Bool[Array, "*#batch tokens"] | None = None
                 ) -> Float[Array, "*#batch tokens tokens"]:
        """`∂α_i/∂l_j` (rows i, columns j); by forward-mode autodiff unless overridden."""
        mask = visible_or_all(logits, mask)
        flat_l = logits.reshape(-1, logits.shape[-1])
        flat_m = mask.reshape(-1, logits.shape[-1])
        jac = jax.vmap(lambda row, m: jax.jacfwd(lambda z: self(z, m))(row))(flat_l, flat_m)
        return jac.reshape(*logits.shape, logits.shape[-1])


class AbstractPositiveNormalizer(AbstractNormalizer):
    """`α_j = F(l_j) / Σ_i F(l_i)` with `F > 0` smooth (spec §1, §5).

    Subclasses give `log F` and its derivative `φ = F'/F`. The Jacobian is Lemma 2,
    `∂α_i/∂l_j = (δ_ij F'_i − α_i F'_j) / Σ_k F_k = α_i φ_i δ_ij − α_i α_j φ_j`.
    """

    @abc.abstractmethod
    def log_f(self, logits: Float[Array, "*#batch tokens"], n_visible: Array
              ) -> Float[Array, "*#batch tokens"]:
        """`log F(l)`; `n_visible` (the number of visible tokens) for length-aware normalizers."""

    @abc.abstractmethod
    def dlog_f(self, logits: Float[Array, "*#batch tokens"], n_visible: Array
               ) -> Float[Array, "*#batch tokens"]:
        """`φ = F'(l)/F(l)`."""

    def __call__(self, logits, mask=None):
        mask = visible_or_all(logits, mask)
        n = jnp.sum(mask, axis=-1, keepdims=True)
        z = jnp.where(mask, self.log_f(logits, n), -jnp.inf)
        peak = jax.lax.stop_gradient(jnp.max(z, axis=-1, keepdims=True))
        e = jnp.where(mask, jnp.exp(z - peak), 0.0)
        return e / jnp.sum(e, axis=-1, keepdims=True)

    def jacobian(self, logits, mask=None):
        """Lemma 2 in closed form."""
        mask = visible_or_all(logits, mask)
        n = jnp.sum(mask, axis=-1, keepdims=True)
        a = self(logits, mask)
        aphi = jnp.where(mask, a * self.dlog_f(logits, n), 0.0)
        eye = jnp.eye(logits.shape[-1], dtype=a.dtype)
        return eye * aphi[..., None, :] - a[..., :, None] * aphi[..., None, :]

    def lemma1_constants(self, a: float | Array, n_visible: Array | int = 1) -> tuple[Array, Array]:
        """`(C_1, C_2) = (min F / max F, max F / min F)` on `[−a, a]` (Lemma 1), for increasing F.

        Then `C_1/L ≤ α_j ≤ C_2/L` whenever all logits lie in `[−a, a]`.
        """
        a = jnp.asarray(a)
        gap = self.log_f(a, n_visible) - self.log_f(-a, n_visible)
        return jnp.exp(-gap), jnp.exp(gap)
