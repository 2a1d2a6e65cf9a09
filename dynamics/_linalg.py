"""Matrix functions of symmetric positive semi-definite matrices, smooth in their argument.

`eigh` has no usable derivative at repeated eigenvalues, but a matrix function `f(A)` does
(Daleckii–Krein): `d f(A) = U (F̃ ∘ (Uᵀ dA U)) Uᵀ` with divided differences
`F̃_ij = (f(λ_i) − f(λ_j)) / (λ_i − λ_j)` (→ `f'(λ_i)` when the eigenvalues coincide). The
order-parameter ODEs differentiate through `q^{1/2}` (linear stability at the symmetric point,
where eigenvalues do coincide), hence these custom JVPs.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float


def _divided_differences(lam, f, fprime):
    fl = f(lam)
    dl = lam[:, None] - lam[None, :]
    close = jnp.abs(dl) <= 1e-9 * jnp.maximum(1.0, jnp.abs(lam[:, None]) + jnp.abs(lam[None, :]))
    safe = jnp.where(close, 1.0, dl)
    avg = 0.5 * (lam[:, None] + lam[None, :])
    return jnp.where(close, fprime(avg), (fl[:, None] - fl[None, :]) / safe)


def _make(f, fprime):
    @jax.custom_jvp
    def matfun(a):
        a = 0.5 * (a + a.T)
        lam, u = jnp.linalg.eigh(a)
        return (u * f(lam)[None, :]) @ u.T

    @matfun.defjvp
    def _jvp(primals, tangents):
        (a,), (da,) = primals, tangents
        a = 0.5 * (a + a.T)
        da = 0.5 * (da + da.T)
        lam, u = jnp.linalg.eigh(a)
        out = (u * f(lam)[None, :]) @ u.T
        dd = _divided_differences(lam, f, fprime)
        return out, u @ (dd * (u.T @ da @ u)) @ u.T

    return matfun


def _sqrt(lam):
    return jnp.sqrt(jnp.clip(lam, 0.0))


def _dsqrt(lam):
    # derivative of √λ, capped where the matrix is (numerically) singular
    return 0.5 / jnp.sqrt(jnp.clip(lam, 1e-24))


psd_sqrt = _make(_sqrt, _dsqrt)
psd_sqrt.__doc__ = """The symmetric PSD square root `A^{1/2}` (negative round-off eigenvalues
clipped to 0), differentiable also at repeated eigenvalues."""


def _cutoff(lam):
    return 1e-12 * jnp.maximum(jnp.max(jnp.abs(lam)), 1e-300)


def psd_pinv_sqrt(a: Float[Array, "n n"]) -> Float[Array, "n n"]:
    """The pseudo-inverse of `A^{1/2}`: `U diag(λ^{-1/2} or 0) Uᵀ`, eigenvalues below
    `1e-12·max λ` treated as zero."""
    a = 0.5 * (a + a.T)
    lam, u = jnp.linalg.eigh(a)
    keep = lam > _cutoff(lam)
    inv = jnp.where(keep, 1.0 / jnp.sqrt(jnp.where(keep, lam, 1.0)), 0.0)
    return (u * inv[None, :]) @ u.T


def psd_part(a: Float[Array, "n n"]) -> Float[Array, "n n"]:
    """The nearest PSD matrix to the symmetric part of `a` (negative eigenvalues clipped)."""
    a = 0.5 * (a + a.T)
    lam, u = jnp.linalg.eigh(a)
    return (u * jnp.clip(lam, 0.0)[None, :]) @ u.T


