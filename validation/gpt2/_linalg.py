"""Small helpers: full-precision contractions (no TF32/bf16 on accelerators)."""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax


def dot(spec: str, *operands):
    """`jnp.einsum` at `Precision.HIGHEST`."""
    return jnp.einsum(spec, *operands, precision=lax.Precision.HIGHEST)


def safe_sqrt(x):
    """`√max(x, 0)`: squared norms from Gram identities can round slightly below zero."""
    return jnp.sqrt(jnp.maximum(x, 0))


def lead(a, ndim: int):
    """`a` with singleton axes prepended up to `ndim` axes.

    The bound functions broadcast batch axes (heads, windows) against arrays that lack them
    (per-row contexts, shared token vectors); aligning the ranks first keeps every broadcast
    explicit, as `jax_numpy_rank_promotion = "raise"` requires. Size-1 axes cost nothing.
    """
    a = jnp.asarray(a)
    return a.reshape((1,) * (ndim - a.ndim) + a.shape) if a.ndim < ndim else a
