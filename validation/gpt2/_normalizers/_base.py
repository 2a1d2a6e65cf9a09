from __future__ import annotations

import abc
from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from jax import lax
from jaxtyping import Array, Bool, Float


def visible_or_all(logits, mask):
    """The mask broadcast to the logits' shape (all visible when `None`)."""
    if mask is None:
        return jnp.ones(logits.shape, bool)
    mask = jnp.asarray(mask)
    return jnp.broadcast_to(
        mask.reshape((1,) * (logits.ndim - mask.ndim) + mask.shape), logits.shape
    )


def _eye_like(a):
    """The identity over the last axis of `a`, with the rank of `a[..., None]`."""
    eye = jnp.eye(a.shape[-1], dtype=a.dtype)
    return eye.reshape((1,) * (a.ndim - 1) + eye.shape)


def top_eigenvalue(
    alpha: Float[Array, "*#batch tokens"], *, iterations: int | None = None
) -> Float[Array, "*#batch"]:
    """`λ_max(diag α − α αᵀ)` for weights `α ≥ 0` summing to one, exactly.

    The eigenvalues of a diagonal matrix minus a rank-one term solve the secular equation
    `f(λ) = 1 − Σ_i α_i²/(α_i − λ) = 0`; by interlacing the largest lies in `[α_(2), α_(1)]`,
    where f decreases, and a fixed number of bisection steps finds it to working precision in
    `O(iterations × tokens)` per row, without forming the matrix.

    **Arguments:**

    - `alpha`: weights (masked tokens 0; each row sums to one).
    - `iterations`: bisection steps (default 32 in float32, 60 in float64).

    **Returns:** the largest eigenvalue per row (at most 1/2, reached by two weights of 1/2).
    """
    if iterations is None:
        iterations = 32 if alpha.dtype == jnp.float32 else 60
    top2 = (
        lax.top_k(alpha, 2)[0]
        if alpha.shape[-1] > 1
        else jnp.concatenate([alpha, jnp.zeros_like(alpha)], axis=-1)
    )
    hi, lo = top2[..., 0], top2[..., 1]
    a2 = alpha * alpha

    def f(lam):
        den = alpha - lam[..., None]
        den = jnp.where(den == 0, jnp.finfo(alpha.dtype).tiny, den)
        return 1 - jnp.sum(jnp.where(alpha > 0, a2 / den, 0), axis=-1)

    def step(_, bracket):
        lo, hi = bracket
        mid = 0.5 * (lo + hi)
        above = f(mid) > 0  # f decreases on (α_(2), α_(1)): the root lies above mid
        return jnp.where(above, mid, lo), jnp.where(above, hi, mid)

    lo, hi = lax.fori_loop(0, iterations, step, (lo, hi))
    return 0.5 * (lo + hi)


class AbstractNormalizer(eqx.Module):
    """Maps logits `l` (over the last axis) to attention weights; masked tokens get weight 0.

    Class attributes describe what the bounds may assume about the weights:

    - `name`: the name used by `gpt2 bounds --normalizer`.
    - `nonnegative`: weights are ≥ 0 (Theorem 1's and Theorem 2's proofs need this).
    - `normalized`: weights sum to one over the visible tokens.
    - `jacobian_bound_names`: report keys of the violation counts of [`jacobian_bounds`][].
    """

    name: ClassVar[str] = ""
    nonnegative: ClassVar[bool] = True
    normalized: ClassVar[bool] = True
    jacobian_bound_names: ClassVar[tuple[str, str]] = ("jacobian_spectral", "jacobian_diagonal")

    @abc.abstractmethod
    def __call__(
        self,
        logits: Float[Array, "*#batch tokens"],
        mask: Bool[Array, "*#batch tokens"] | None = None,
    ) -> Float[Array, "*#batch tokens"]:
        """**Arguments:** `logits`; `mask` (True = visible, default all).

        **Returns:** the weights, zero where `mask` is False.
        """

    def jacobian(
        self,
        logits: Float[Array, "*#batch tokens"],
        mask: Bool[Array, "*#batch tokens"] | None = None,
    ) -> Float[Array, "*#batch tokens tokens"]:
        """`∂α_i/∂l_j` (rows i, columns j); by forward-mode autodiff unless overridden."""
        mask = visible_or_all(logits, mask)
        flat_l = logits.reshape(-1, logits.shape[-1])
        flat_m = mask.reshape(-1, logits.shape[-1])
        jac = jax.vmap(lambda row, m: jax.jacfwd(lambda z: self(z, m))(row))(flat_l, flat_m)
        return jac.reshape(*logits.shape, logits.shape[-1])

    def jacobian_diagonal(
        self,
        logits: Float[Array, "*#batch tokens"],
        mask: Bool[Array, "*#batch tokens"] | None = None,
    ) -> Float[Array, "*#batch tokens"]:
        """`∂α_i/∂l_i` for every token (from the dense [`jacobian`][] unless overridden)."""
        return jnp.diagonal(self.jacobian(logits, mask), axis1=-2, axis2=-1)

    def jacobian_norm(
        self,
        logits: Float[Array, "*#batch tokens"],
        mask: Bool[Array, "*#batch tokens"] | None = None,
        *,
        iterations: int | None = None,
    ) -> Float[Array, "*#batch"]:
        """Spectral norm `‖∂α/∂l‖₂` per row.

        By default, power iteration on `JᵀJ` with one forward- and one reverse-mode product
        per step (J is never formed), from a fixed pseudo-random start on the visible tokens;
        the estimate `‖J v‖` approaches the norm from below. Subclasses with a closed form
        override it.

        **Arguments:** `logits`, `mask`; `iterations` (default 64).

        **Returns:** the norm per row.
        """
        mask = visible_or_all(logits, mask)
        iterations = 64 if iterations is None else iterations
        fn = lambda z: self(z, mask)  # noqa: E731  (rows are independent: batched products)
        v = jnp.where(mask, jr.normal(jr.key(0), logits.shape, logits.dtype), 0)

        def unit(w):
            norm = jnp.linalg.norm(w, axis=-1, keepdims=True)
            return w / jnp.where(norm > 0, norm, 1)

        def step(_, w):
            jw = jax.jvp(fn, (logits,), (w,))[1]
            return unit(jnp.where(mask, jax.vjp(fn, logits)[1](jw)[0], 0))

        v = lax.fori_loop(0, iterations, step, unit(v))
        return jnp.linalg.norm(jax.jvp(fn, (logits,), (v,))[1], axis=-1)

    def jacobian_bounds(self, n_visible: Array) -> tuple[Array, Array] | None:
        """Rigorous upper bounds `(spectral, diagonal)` on `‖∂α/∂l‖₂` and on
        `max_i ∂α_i/∂l_i` for rows with `n_visible` tokens, or `None` when none is known."""
        return None


class AbstractPositiveNormalizer(AbstractNormalizer):
    """`α_j = F(l_j) / Σ_i F(l_i)` with `F > 0` smooth (docs/gpt2.md, "The bounds").

    Subclasses give `log F` and its derivative `φ = F'/F`. The Jacobian is Lemma 2,
    `∂α_i/∂l_j = (δ_ij F'_i − α_i F'_j) / Σ_k F_k = α_i φ_i δ_ij − α_i α_j φ_j`.
    """

    @abc.abstractmethod
    def log_f(
        self, logits: Float[Array, "*#batch tokens"], n_visible: Array
    ) -> Float[Array, "*#batch tokens"]:
        """`log F(l)`; `n_visible` (the number of visible tokens) for length-aware normalizers."""

    @abc.abstractmethod
    def dlog_f(
        self, logits: Float[Array, "*#batch tokens"], n_visible: Array
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
        return _eye_like(a) * aphi[..., None, :] - a[..., :, None] * aphi[..., None, :]

    def jacobian_diagonal(self, logits, mask=None):
        """`α_i (1 − α_i) φ_i` (Lemma 2)."""
        mask = visible_or_all(logits, mask)
        n = jnp.sum(mask, axis=-1, keepdims=True)
        a = self(logits, mask)
        return jnp.where(mask, a * (1 - a) * self.dlog_f(logits, n), 0.0)

    def lemma1_constants(self, a: float | Array,
                         n_visible: Array | int = 1) -> tuple[Array, Array]:
        """`(C_1, C_2) = (min F / max F, max F / min F)` on `[−a, a]` (Lemma 1), for increasing F.

        Then `C_1/L ≤ α_j ≤ C_2/L` whenever all logits lie in `[−a, a]`.
        """
        a, n = jnp.asarray(a), jnp.asarray(n_visible)
        gap = self.log_f(a, n) - self.log_f(-a, n)
        return jnp.exp(-gap), jnp.exp(gap)
